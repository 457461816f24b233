"""Consumer-lag evaluation in the manner of LinkedIn's Burrow: judge a window of lag samples, not a threshold.

For each (group, topic, partition) the last ``window`` samples of (time, committed offset, end offset,
lag, group alive?) are judged, in this order:

1. ``OK``    — the lag was zero at some point in the window (the consumer caught up).
2. ``STOP``  — no committed offset at all while there is something to read; or commits frozen and the
               group has no live member any more (the consumer is gone).
3. ``ERR``   — commits frozen over the window while the lag grows (the consumer is alive but stuck).
4. ``STALL`` — commits frozen over the window with a constant lag > 0.
5. ``WARN``  — commits move, but the lag grew in every interval of the window (falling behind).
6. ``OK``    — otherwise.

A status comes with its reason and the window as evidence. Fewer than ``min_samples`` samples: ``OK``
(not enough evidence) unless rule 2's "no commit at all" applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ORDER = {"OK": 0, "WARN": 1, "STALL": 2, "ERR": 3, "STOP": 4}


@dataclass(frozen=True)
class Sample:
    ts: int  # epoch ms
    committed: int  # < 0: the group has no committed offset for the partition
    end_offset: int
    lag: int
    alive: bool | None = None  # the group had live members when sampled (None: unknown)

    def as_list(self) -> list[Any]:
        return [self.ts, self.committed, self.end_offset, self.lag, self.alive]


@dataclass
class Verdict:
    status: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)


def evaluate(samples: Sequence[Sample], window: int = 5, min_samples: int = 3) -> Verdict:
    """Judge the last ``window`` samples (sorted by time here) of one partition."""
    recent = sorted(samples, key=lambda s: s.ts)[-window:]
    evidence = {"window": [s.as_list() for s in recent], "fields": ["ts", "committed", "end_offset", "lag", "alive"]}
    if not recent:
        return Verdict("OK", "no samples", evidence)
    last = recent[-1]
    if all(s.committed < 0 for s in recent) and last.end_offset > 0 and last.lag != 0:
        return Verdict("STOP", f"no commits at all: the group never committed an offset while "
                               f"{last.end_offset} messages are available", evidence)
    if len(recent) < min_samples:
        return Verdict("OK", f"{len(recent)} of {min_samples} samples needed", evidence)
    lags = [s.lag for s in recent]
    if any(lag == 0 for lag in lags):
        return Verdict("OK", "lag reached zero within the window", evidence)
    commits = [s.committed for s in recent]
    frozen = len(set(commits)) == 1
    span_s = (last.ts - recent[0].ts) / 1000.0
    if frozen and last.lag > 0:
        if last.alive is False:
            return Verdict("STOP", f"committed offset frozen at {commits[-1]} for {span_s:.0f}s with lag "
                                   f"{last.lag} and no live member in the group", evidence)
        if lags[-1] > lags[0]:
            return Verdict("ERR", f"lag grew from {lags[0]} to {lags[-1]} while the committed offset stayed at "
                                  f"{commits[-1]} for {span_s:.0f}s", evidence)
        return Verdict("STALL", f"committed offset frozen at {commits[-1]} for {span_s:.0f}s with lag "
                                f"{last.lag}", evidence)
    if all(b > a for a, b in zip(lags, lags[1:], strict=False)):
        return Verdict("WARN", f"lag grew in every interval ({lags[0]} -> {lags[-1]}) while commits moved "
                               f"({commits[0]} -> {commits[-1]})", evidence)
    return Verdict("OK", "consumer keeps up", evidence)
