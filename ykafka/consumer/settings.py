"""Local (not hot) settings of the consumer framework: the ``ykafka.consumer.*`` options of the local config,
declared once as the fields of :class:`ConsumerSettings` (a typo in one is a configuration error)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ykafka import catalog
from ykafka.config import option, options_of, settings_from

_ints = catalog.int_range


@dataclass(frozen=True)
class ConsumerSettings:
    max_inflight_per_partition: int = option(
        "ykafka.consumer.max.inflight.per.partition", _ints(1, 10_000_000), 1000,
        "messages of a partition dispatched but not committable before its fetching pauses (memory bound)")
    batch_size: int = option("ykafka.consumer.batch.size", _ints(1, 1_000_000), 500,
                             "most messages the fetch loop takes from librdkafka per turn")
    commit_interval_ms: int = option("ykafka.consumer.commit.interval.ms", _ints(10, 3_600_000), 1000,
                                     "how often finished offsets are committed (asynchronously)")
    revoke_timeout_ms: int = option(
        "ykafka.consumer.revoke.timeout.ms", _ints(0, 3_600_000), 30_000,
        "how long a revoke / shutdown waits for in-flight work of the partitions it gives up")
    drain_timeout_ms: int = option(
        "ykafka.consumer.drain.timeout.ms", _ints(0, 3_600_000), 30_000,
        "how long an ordering change waits for in-flight work to drain before switching anyway")
    poll_timeout_ms: int = option(
        "ykafka.consumer.poll.timeout.ms", _ints(1, 60_000), 100,
        "longest wait for a message per fetch-loop turn (also the housekeeping cadence)")
    watchdog_ms: int = option(
        "ykafka.consumer.watchdog.ms", _ints(0, 3_600_000), 60_000,
        "a subscribed consumer with no assignment the group confirms, or assigned but fetching nothing while its "
        "partitions have records beyond the committed offsets, this long: its client is rebuilt and rejoins "
        "(0: off)")
    retry_topics: bool = option("ykafka.consumer.retry.topics", catalog.boolean, True,
                                "framework mode: create and consume the group's retry and .dlq topics "
                                "(__ykafka-retry.<len>.<group>.<topic>.retry.<n>)")
    ephemeral_group: bool = option(
        "ykafka.consumer.group.ephemeral", catalog.boolean, False,
        "the group is short-lived: the client's report says so, the pipeline deletes the group once its last "
        "client closed and the console lists it as an ephemeral clean-up candidate once no member is left")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ConsumerSettings:
        """From a parsed option dict (``LocalConfig.options``); missing options keep their defaults."""
        return settings_from(cls, options)


OPTIONS = options_of(ConsumerSettings)
