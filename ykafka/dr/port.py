"""What the disaster-recovery engine needs from a producer: the one interface it may use.

:func:`ykafka.dr.attach.attach` wires an engine into any object with this shape (the
:class:`ykafka.Producer` implements it); the engine never touches a producer's private state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ykafka.dr.engine import DisasterRecovery
    from ykafka.runtime import Runtime
    from ykafka.tracing import Tracer

#: send(producer, client, topic, value, key, partition, on_delivery, timestamp, headers) -> True when taken
SendHook = Callable[..., bool]


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
