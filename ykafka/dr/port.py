"""The two sides of the seam between a producer and its disaster-recovery engine.

* :class:`ProducerPort`: what the engine needs from a producer, the one interface it may use.
  :func:`ykafka.dr.attach.attach` wires an engine into any object with this shape (the :class:`ykafka.Producer`
  implements it); the engine never touches a producer's private state. A send reaches the engine through the
  send hook with a :class:`SendingClient` (the producer's client for the message's cluster).
* :class:`DrEngine`: what a producer may call on the engine (:class:`ykafka.dr.engine.DisasterRecovery`
  implements it). The producer types its engine as this protocol, so the type checker keeps it to this surface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ykafka.dr.engine import DisasterRecovery
    from ykafka.dr.link import DirectSender
    from ykafka.runtime import Runtime
    from ykafka.tracing import Tracer
    from ykafka.transport import RawProducer

#: send(producer, client: SendingClient, topic, value, key, partition, on_delivery, timestamp, headers) -> True
#: when the engine took the message
SendHook = Callable[..., bool]


class SendingClient(Protocol):
    """The producer's client a send would go through: the engine sends there when the route agrees."""

    @property
    def cluster(self) -> str: ...

    @property
    def rd(self) -> RawProducer:
        """Its librdkafka producer."""
        ...


class ProducerPort(Protocol):
    """The producer side of the engine: its runtime (routes, effective config), its clients, its hooks."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def disaster_recovery(self) -> DisasterRecovery | None: ...

    @property
    def default_delivery(self) -> Callable[[Any, Any], None] | None:
        """The ``on_delivery`` given in the producer's config (used when a send passes none)."""
        ...

    def client_settings(self, cluster: str) -> dict[str, Any]:
        """librdkafka settings of a producer on ``cluster`` (catalog keys, cluster, local), no callbacks."""
        ...

    def tracer(self) -> Tracer:
        """The producer's message tracer (spill and replay steps join the message's trace)."""
        ...

    def retire_clients(self, cluster: str, reason: str) -> None:
        """Replace every client of ``cluster`` (a recovered cluster lost their idempotence state)."""
        ...

    def add_error_listener(self, listener: Callable[[Any, str | None], None]) -> None:
        """Be told of every ``error_cb`` error of the producer's clients, with the client's cluster."""
        ...

    def set_hooks(self, send: SendHook | None = None, delivery: Any = None) -> None:
        """Route every send through ``send``."""
        ...


class DrEngine(Protocol):
    """What a producer calls on its engine: the whole surface, each member named for the producer's need."""

    @property
    def epoch(self) -> int:
        """Bumped by every route or link change: a direct path resolved before a change is stale."""
        ...

    @property
    def needs_poll(self) -> bool:
        """The producer's poll() has work here (deferred callbacks, retired clients to drain)."""
        ...

    def open_link(self, topic: str, cluster: str) -> None:
        """``topic``'s client on ``cluster`` is about to be built: open the cluster's link (its spill queue) first
        when the topic's writes go there."""
        ...

    def direct(self, topic: str, cluster: str, client: RawProducer) -> DirectSender | None:
        """The healthy-cluster fast path of ``topic`` through the producer's ``client``, or None."""
        ...

    def watch_stalls(self, conf: dict[str, Any], cluster: str, stall_ms: int) -> None:
        """Give a client's messages back after ``stall_ms`` without delivery: the link's stall watch in its
        settings, librdkafka's per-message timeout a backstop only (ykafka.dr.stall)."""
        ...

    def handing_over(self, topic: str) -> bool:
        """A send of ``topic`` may wait now (a hand-over between clusters, an outage's start offsets)."""
        ...

    def forget_client(self, client: RawProducer) -> None:
        """The producer closes ``client``: the engine keeps and polls it no more."""
        ...

    def poll(self, timeout: float = 0.0) -> int: ...

    def flush(self, timeout: float = 30.0, external: bool = False) -> int: ...

    def pending(self) -> int:
        """Messages the engine holds (its own clients, spill commits, deferred callbacks)."""
        ...

    def status(self) -> dict[str, Any]: ...

    def close(self, timeout: float = 10.0) -> None: ...
