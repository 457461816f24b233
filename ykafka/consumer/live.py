"""Live changes to a running consumer: hot-config values applied in place at once, the rest (a rebuilt or
rejoined handle, a paused group, an ordering switch, a cluster move) queued and applied by the thread that
polls the consumer, each by its key's ``catalog.Apply``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka import catalog
from ykafka.consumer import session as S
from ykafka.consumer.offsets import PartitionTracker
from ykafka.consumer.ordering import Dispatcher, Ordering
from ykafka.consumer.pool import Pool
from ykafka.consumer.retry import RetryPolicy, RetryRouter
from ykafka.consumer.settings import ConsumerSettings
from ykafka.errors import InvalidConfigValue
from ykafka.throttle import TokenBucket

log = structlog.get_logger("ykafka.consumer.engine")


def retry_policy(effective: Mapping[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        backoff_ms=tuple(catalog.value(effective, "consumer.retry.backoff.ms")),
        max_attempts=int(catalog.value(effective, "consumer.retry.max.attempts")),
        dlq_enabled=bool(catalog.value(effective, "consumer.dlq.enabled")),
    )


def migration_strategy(new: str, current: str) -> str:
    """The ``partition.assignment.strategy`` list to rejoin with when the strategy changes.

    Between eager strategies the old one stays as a fallback (``roundrobin,range``): members that already
    switched still agree with members that have not, and once every member prefers the new strategy the
    coordinator selects it. librdkafka cannot mix eager and cooperative assignors, so a switch to or from
    ``cooperative-sticky`` names the new one alone; the coordinator admits it once the old members left.
    """
    previous = current.split(",")[0].strip()
    if not previous or previous == new or "cooperative" in new or "cooperative" in previous:
        return new
    return f"{new},{previous}"


class LiveChanges:
    """The :class:`~ykafka.consumer.engine.Engine`'s live-change half (its state is the engine's)."""

    session: S.ConsumerSession
    effective: dict[str, Any]
    settings: ConsumerSettings
    router: RetryRouter | None
    trackers: dict[S.TP, PartitionTracker]
    pool: Pool | None
    dispatcher: Dispatcher | None
    bucket: TokenBucket
    _running: threading.Event
    _pending: dict[str, Any]
    _pending_switch: tuple[dict[str, Any], Callable[[], RetryRouter] | None] | None
    _pending_lock: threading.Lock
    _ordering_change: tuple[Ordering, float] | None
    _retry_levels: int
    _subscribe_retry_levels: Callable[[int], None]

    def apply(self, changes: Mapping[str, Any]) -> dict[str, InvalidConfigValue]:
        """Validate raw hot-config values (``Consumer.apply``) and apply the valid ones; returns the rejected
        ones (previous values stay)."""
        accepted: dict[str, Any] = {}
        rejected: dict[str, InvalidConfigValue] = {}
        for name, raw in changes.items():
            try:
                accepted[name] = catalog.parse(name, raw)
            except InvalidConfigValue as exc:
                rejected[name] = exc
                log.warning("hot config rejected", key=name, value=raw, reason=exc.reason)
        if accepted:
            self.apply_valid(accepted)
        return rejected

    def apply_valid(self, accepted: Mapping[str, Any]) -> None:
        """Apply values the catalog already parsed (the runtime's effective config): in-place keys now,
        the rest queued for the polling thread, which dispatches on each key's ``catalog.Apply``."""
        self.effective.update(accepted)
        if "consumer.workers" in accepted and self.pool is not None:
            self.pool.resize(accepted["consumer.workers"])
        if "consumer.rate.limit.msgs" in accepted:
            self.bucket.set_rate(accepted["consumer.rate.limit.msgs"])
        if self.router is not None and accepted.keys() & {"consumer.retry.backoff.ms", "consumer.retry.max.attempts",
                                                          "consumer.dlq.enabled"}:
            self.router.policy = retry_policy(self.effective)
        with self._pending_lock:
            self._pending.update(accepted)
        self.session.gate.disarm()  # the drop-in poll applies them on its next call

    def switch_cluster(self, props: Mapping[str, Any], router_factory: Callable[[], RetryRouter] | None) -> None:
        """Move to another cluster (``route.cluster`` changed): finish and commit here, rejoin there."""
        with self._pending_lock:
            self._pending_switch = (dict(props), router_factory)
        self.session.gate.disarm()

    def has_pending(self) -> bool:
        return bool(self._pending) or self._pending_switch is not None

    def apply_pending(self) -> None:
        """Apply queued live changes; must run on the thread that polls the consumer."""
        self._apply_pending()

    # -- live changes on the polling thread -------------------------------------------------------------

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            switch, self._pending_switch = self._pending_switch, None
        session = self.session
        if switch is not None:  # Apply.SWITCH (route.cluster): finish and commit here, rejoin there
            self._switch(*switch)
        if "consumer.leave" in pending:
            if pending["consumer.leave"]:
                session.leave()
            else:
                session.rejoin()
        kinds = catalog.by_apply(pending, "consumer.")
        changed = kinds[catalog.Apply.REBUILD] + kinds[catalog.Apply.REJOIN]  # both need a new handle
        if changed:
            props = catalog.rdkafka_properties({k: pending[k] for k in changed}, "consumer.")
            if "partition.assignment.strategy" in props:
                props["partition.assignment.strategy"] = migration_strategy(
                    str(props["partition.assignment.strategy"]),
                    str(session.props.get("partition.assignment.strategy", "")))
            removed = [str(catalog.KEYS[k].rdkafka) for k in changed if catalog.KEYS[k].rdkafka not in props]
            session.rebuild(props, removed)
        if "consumer.paused" in pending:
            session.set_operator_paused(bool(pending["consumer.paused"]))
        if "consumer.ordering" in pending and self.dispatcher is not None:
            new = pending["consumer.ordering"]
            if new != self.dispatcher.ordering:
                self._ordering_change = (new, time.monotonic() + self.settings.drain_timeout_ms / 1000)
        if "consumer.retry.max.attempts" in pending and self.router is not None and self.settings.retry_topics:
            levels = int(pending["consumer.retry.max.attempts"])
            if levels > self._retry_levels:
                self._subscribe_retry_levels(levels)

    def _switch(self, props: dict[str, Any], router_factory: Callable[[], RetryRouter] | None) -> None:
        session = self.session
        had_handle = session.consumer is not None
        session.close()  # revoke hook drains and commits on the old cluster
        if self.router is not None:
            self.router.flush()
            self.router = router_factory() if router_factory is not None and self._running.is_set() else None
        session.props = props
        if self.router is not None and self.settings.retry_topics:
            self._subscribe_retry_levels(max(self._retry_levels, 1))
        if had_handle and not session.left:
            session.open()

    def _try_switch_ordering(self, now: float) -> bool:
        """Switch the ordering mode once in-flight work drained (or the drain deadline passed)."""
        assert self._ordering_change is not None and self.dispatcher is not None
        new, deadline = self._ordering_change
        if self.router is not None:
            self.router.poll(0)
        drained = all(tracker.idle() for tracker in self.trackers.values())
        if not drained and now < deadline:
            return False
        if not drained:
            log.warning("ordering switched before in-flight work drained", ordering=new)
        log.info("ordering changed", previous=self.dispatcher.ordering, ordering=new)
        self.dispatcher.ordering = new
        self._ordering_change = None
        return True
