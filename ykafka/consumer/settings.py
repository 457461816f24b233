"""Local (not hot) settings of the consumer framework: ``ykafka.consumer.*`` options of the local config.

They are registered with :mod:`ykafka.config` at import, so a typo in one is a configuration error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ykafka import catalog, config

_ints = catalog.int_range

_OPTIONS: list[tuple[str, str, Callable[[Any], Any], Any, str]] = [
    ("max_inflight_per_partition", "ykafka.consumer.max.inflight.per.partition", _ints(1, 10_000_000), 1000,
     "messages of a partition dispatched but not committable before its fetching pauses (memory bound)"),
    ("batch_size", "ykafka.consumer.batch.size", _ints(1, 1_000_000), 500,
     "most messages the fetch loop takes from librdkafka per turn"),
    ("commit_interval_ms", "ykafka.consumer.commit.interval.ms", _ints(10, 3_600_000), 1000,
     "how often finished offsets are committed (asynchronously)"),
    ("revoke_timeout_ms", "ykafka.consumer.revoke.timeout.ms", _ints(0, 3_600_000), 30_000,
     "how long a revoke / shutdown waits for in-flight work of the partitions it gives up"),
    ("drain_timeout_ms", "ykafka.consumer.drain.timeout.ms", _ints(0, 3_600_000), 30_000,
     "how long an ordering change waits for in-flight work to drain before switching anyway"),
    ("poll_timeout_ms", "ykafka.consumer.poll.timeout.ms", _ints(1, 60_000), 100,
     "longest wait for a message per fetch-loop turn (also the housekeeping cadence)"),
    ("retry_topics", "ykafka.consumer.retry.topics", catalog.boolean, True,
     "framework mode: create and consume <group>.<topic>.retry.<n> and .dlq topics"),
    ("ephemeral_group", "ykafka.consumer.group.ephemeral", catalog.boolean, False,
     "the group is short-lived: the client's report says so, the pipeline deletes the group once its last "
     "client closed and the console lists it as an ephemeral clean-up candidate once no member is left"),
]

for _field, _name, _parse, _default, _help in _OPTIONS:
    if _name not in config.options():
        config.register_option(_name, _parse, _default, _help)


@dataclass(frozen=True)
class ConsumerSettings:
    max_inflight_per_partition: int = 1000
    batch_size: int = 500
    commit_interval_ms: int = 1000
    revoke_timeout_ms: int = 30_000
    drain_timeout_ms: int = 30_000
    poll_timeout_ms: int = 100
    retry_topics: bool = True
    ephemeral_group: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ConsumerSettings:
        """From a parsed option dict (``LocalConfig.options``); missing options keep their defaults."""
        return cls(**{field: options[name] for field, name, *_ in _OPTIONS if name in options})
