"""Producer throttling (``producer.rate.limit.msgs`` / ``producer.rate.limit.bytes``): token buckets.

A limit applies to everything the scope that set it covers, inside this process: a limit from
``ykafka.global`` is one bucket for all topics, one from ``ykafka.cluster.<c>`` one bucket per cluster,
one from ``ykafka.topic.<t>`` one per topic. Per-host limits are the same keys in a gray release
matching the host's IP. A throttled send waits (at most ``ykafka.throttle.max.wait.ms``) and never drops:
when the wait would be longer it raises :class:`ThrottledError` at once and nothing is sent.
"""

from __future__ import annotations

import threading
import time

from ykafka.errors import ThrottledError


class TokenBucket:
    """A token bucket whose rate can change in place; rate 0 = unlimited.

    The burst is ``burst_s`` seconds' worth (at least one unit). A producer limit starts with a full burst
    and reserves (:meth:`reserve`, may go into debt: later callers wait behind it); the consumer's dispatch
    limit (:meth:`for_dispatch`) has a 100 ms burst, starts empty and asks :meth:`allowance` / :meth:`take`.
    """

    def __init__(self, rate: float = 0.0, name: str = "", burst_s: float = 1.0, start_full: bool = True) -> None:
        self.name = name
        self._burst_s = burst_s
        self._lock = threading.Lock()
        self._rate = 0.0
        self._burst = 1.0
        self._tokens = 0.0
        self._stamp = time.monotonic()
        self.refused = 0  # sends refused with ThrottledError (a client report's health)
        self.set_rate(rate)
        if start_full:
            self._tokens = self._burst  # a new limit starts with a full burst of budget

    @classmethod
    def for_dispatch(cls, rate: float = 0.0) -> TokenBucket:
        """``consumer.rate.limit.msgs``: bounds how many messages are dispatched per second."""
        return cls(rate, "consumer", burst_s=0.1, start_full=False)

    @property
    def rate(self) -> float:
        return self._rate

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._refill(time.monotonic())
            self._rate = max(0.0, float(rate))
            self._burst = max(self._rate * self._burst_s, 1.0)
            self._tokens = min(self._tokens, self._burst) if self._rate else 0.0

    def _refill(self, now: float) -> None:
        if self._rate > 0:
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    def allowance(self, wanted: int) -> int:
        """How many of ``wanted`` units may be taken now (all of them when unlimited)."""
        if not self._rate:
            return wanted
        with self._lock:
            self._refill(time.monotonic())
            return min(wanted, int(self._tokens))

    def take(self, count: int) -> None:
        if not self._rate or count <= 0:
            return
        with self._lock:
            self._refill(time.monotonic())
            self._tokens -= count

    def wait_time(self) -> float:
        """Seconds until one unit is available (0 when one is)."""
        if not self._rate:
            return 0.0
        with self._lock:
            self._refill(time.monotonic())
            return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self._rate

    def reserve(self, amount: float, max_wait_s: float) -> float:
        """Take ``amount``; return how long to wait before sending, or raise if that exceeds ``max_wait_s``."""
        with self._lock:
            if self._rate <= 0:
                return 0.0
            now = time.monotonic()
            self._refill(now)
            deficit = amount - self._tokens
            wait = deficit / self._rate if deficit > 0 else 0.0
            if wait > max_wait_s:
                self.refused += 1
                raise ThrottledError(f"rate limit {self.name or 'producer'} ({self._rate:g}/s) would delay this "
                                     f"send {wait * 1000:.0f} ms, more than the {max_wait_s * 1000:.0f} ms bound")
            self._tokens -= amount  # may go negative: later callers wait behind this reservation
            return wait


class Throttle:
    """The message and byte buckets that apply to one topic."""

    __slots__ = ("msgs", "bytes", "max_wait_s")

    def __init__(self, msgs: TokenBucket | None, bytes_: TokenBucket | None, max_wait_s: float) -> None:
        self.msgs = msgs
        self.bytes = bytes_
        self.max_wait_s = max_wait_s

    def acquire(self, nbytes: int) -> float:
        """Block until the send may go; returns the time waited. Raises :class:`ThrottledError`."""
        wait = self.reserve(nbytes)
        if wait > 0:
            time.sleep(wait)
        return wait

    def reserve(self, nbytes: int) -> float:
        """Take this send's tokens now and return how long it must wait (the asyncio producer awaits it
        instead of sleeping a thread). Raises :class:`ThrottledError` and takes nothing when over the bound."""
        wait = 0.0
        if self.msgs is not None:
            wait = self.msgs.reserve(1, self.max_wait_s)
        if self.bytes is not None:
            try:
                wait = max(wait, self.bytes.reserve(max(nbytes, 1), self.max_wait_s))
            except ThrottledError:
                if self.msgs is not None:
                    self.msgs.reserve(-1, float("inf"))  # give the message token back
                raise
        return wait


class Throttles:
    """Buckets by (key, source scope); rates updated in place so a change does not reset the budget."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, key: str, source: str, rate: float) -> TokenBucket | None:
        if rate <= 0:
            return None
        with self._lock:
            found = self._buckets.get((key, source))
            if found is None:
                found = self._buckets[(key, source)] = TokenBucket(rate, f"{key}@{source}")
            elif found.rate != rate:
                found.set_rate(rate)
            return found

    def refused(self) -> int:
        """Sends refused with ThrottledError so far, over every bucket."""
        with self._lock:
            return sum(b.refused for b in self._buckets.values())

    def for_topic(self, effective: dict[str, object], sources: dict[str, str], max_wait_s: float) -> Throttle | None:
        buckets: list[TokenBucket | None] = []
        for name in ("producer.rate.limit.msgs", "producer.rate.limit.bytes"):
            rate = float(effective.get(name) or 0.0)  # type: ignore[arg-type]
            # the bucket is named by the layer that set the limit (a namespace = its scope; ``local`` /
            # ``default`` = the whole process), so one global limit is shared by every topic
            buckets.append(self.bucket(name, sources.get(name, "default"), rate))
        if buckets[0] is None and buckets[1] is None:
            return None
        return Throttle(buckets[0], buckets[1], max_wait_s)
