"""Which cluster takes a topic's writes: the route decision (pure) and the routes committed so far.

:meth:`RouteTable.decide` answers from the topic's :class:`RouteSpec`, the in-process switches and the clusters'
health, and changes nothing: a send asks it for every message. :meth:`RouteTable.commit` records the decision
and, when the topic's writes move, which cluster they left (the next send of the topic hands that cluster's
held messages over first, :meth:`ykafka.dr.link.ClusterLink.hand_over`). The engine commits on its own thread
when health or a switch moves routes, and on a send only when the send saw the move first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RouteSpec:
    """A topic's dual-DC route, from the catalog keys ``route.*`` and ``spill.enabled``."""

    primary: str
    standby: str | None = None
    failover: str = "manual"  # auto | manual
    active: str = "primary"  # primary | standby (manual switch)
    spill: bool = True
    #: writes-first: the primary takes new writes at once at failback, the outage's records are synced back behind
    #: them; strict: new writes are spilled until the sync is done (at most ``failback_hold_ms``), so a consumer of
    #: the primary sees every key in order (docs/disaster-recovery.md, "Order across a failback")
    failback_order: str = "writes-first"
    failback_hold_ms: int = 120_000

    @classmethod
    def from_effective(cls, primary: str, effective: Mapping[str, Any]) -> RouteSpec:
        standby = effective.get("route.standby")
        return cls(primary, standby if standby and standby != primary else None,
                   str(effective.get("route.failover", "manual")), str(effective.get("route.active", "primary")),
                   bool(effective.get("spill.enabled", True)),
                   str(effective.get("route.failback.order", "writes-first")),
                   int(effective.get("route.failback.hold.ms", 120_000)))


class RouteTable:
    """The route decision of each topic and what was last committed of it.

    ``spec(topic)`` gives the topic's :class:`RouteSpec` (cached by the owner per config version);
    ``is_up(cluster)`` the cluster's health.
    """

    def __init__(self, spec: Callable[[str], RouteSpec], is_up: Callable[[str], bool]) -> None:
        self.spec = spec
        self._is_up = is_up
        self._lock = threading.Lock()
        self.forced: dict[str, str] = {}  # primary -> "primary" | "standby" (in-process admin switch)
        self.committed: dict[str, tuple[RouteSpec, str]] = {}  # topic -> (spec, cluster) last committed
        self.moved: dict[str, str] = {}  # topic -> the cluster its writes just left (handed over at its next send)

    def wants_standby(self, spec: RouteSpec) -> bool:
        """Whether ``spec``'s writes belong on its standby now (a switch, ``route.active``, or auto failover)."""
        if spec.standby is None:
            return False
        forced = self.forced.get(spec.primary)
        if forced is not None:
            return forced == "standby"
        if spec.active == "standby":
            return True
        if spec.failover != "auto":
            return False
        return not self._is_up(spec.primary) and self._is_up(spec.standby)

    def decide(self, topic: str) -> tuple[RouteSpec, str]:
        """The topic's route and the cluster that takes its next write. No side effects."""
        spec = self.spec(topic)
        if spec.standby is None:
            return spec, spec.primary
        return spec, spec.standby if self.wants_standby(spec) else spec.primary

    def is_committed(self, topic: str, spec: RouteSpec, cluster: str) -> bool:
        """The decision ``(spec, cluster)`` is what was last committed for ``topic``."""
        previous = self.committed.get(topic)
        return previous is not None and previous[1] == cluster and previous[0] is spec

    def commit(self, topic: str, spec: RouteSpec, cluster: str) -> bool:
        """Record the decision; when the topic's writes move, remember the cluster they left. True on a move."""
        with self._lock:
            previous = self.committed.get(topic)
            if previous is not None and previous[1] == cluster and previous[0] is spec:
                return False
            self.committed[topic] = (spec, cluster)
            if previous is None or previous[1] == cluster:
                return False
            log.warning("route.switch", topic=topic, source=previous[1], target=cluster)
            self.moved[topic] = previous[1]
            return True

    def take_move(self, topic: str, left: str) -> bool:
        """The topic's writes left ``left`` and no send handed it over yet: the caller does so now."""
        if self.moved.get(topic) != left:
            return False
        with self._lock:
            return self.moved.get(topic) == left and self.moved.pop(topic, None) is not None

    def status(self) -> dict[str, dict[str, Any]]:
        return {topic: {"primary": spec.primary, "standby": spec.standby, "failover": spec.failover,
                        "active": target, "failed_over": target != spec.primary}
                for topic, (spec, target) in list(self.committed.items())}
