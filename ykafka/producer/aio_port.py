"""What the asyncio producer (:mod:`ykafka.aio.producer`) needs from the sync one beyond confluent-kafka's API:
whether a send would block, and a throttled send split into taking its tokens and sending.

Kept off the drop-in :class:`~ykafka.producer.core.Producer` (whose public methods are confluent-kafka's):
:func:`async_port` hands the asyncio layer a narrow object implementing :class:`AsyncSendPort`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from ykafka.errors import BufferFullError
from ykafka.producer.state import DeliveryCallback, _nbytes, send_error
from ykafka.transport import KafkaException

if TYPE_CHECKING:
    from ykafka.producer.core import Producer


class AsyncSendPort(Protocol):
    """The sends of one producer as the asyncio layer makes them, never blocking its event loop."""

    def ready(self, topic: str) -> bool:
        """Whether a send to ``topic`` runs without blocking: its routing, client and settings are resolved (no
        grant check, metadata fetch or client build pending) and it is not held by a client swap (whose release
        sends under the producer's lock), nor waiting for a disaster-recovery hand-over (a route that just moved
        between clusters). The asyncio producer sends such messages on the event loop and hands the others to a
        thread."""
        ...

    def reserve(self, topic: str, value: Any) -> float:
        """Take a send's throttle tokens now and return how long it must wait before :meth:`produce_reserved`
        (0 when ``topic`` is not throttled). Raises :class:`ThrottledError` as ``produce`` would."""
        ...

    def produce_reserved(self, topic: str, value: Any, key: Any, partition: int,
                         on_delivery: DeliveryCallback | None, timestamp: int, headers: Any) -> None:
        """``Producer.produce`` for a send whose throttle tokens :meth:`reserve` already took."""
        ...


def async_port(producer: Producer) -> AsyncSendPort:
    """The :class:`AsyncSendPort` of ``producer``."""
    return _Port(producer)


class _Port:
    __slots__ = ("_p",)

    def __init__(self, producer: Producer) -> None:
        self._p = producer

    def ready(self, topic: str) -> bool:
        p = self._p
        st = p._states.get(topic)
        return st is not None and not (st.expires and time.monotonic() > st.expires) and topic not in p._held \
            and (st.direct is not None or p._dr is None or not p._dr.handing_over(topic))

    def reserve(self, topic: str, value: Any) -> float:
        p = self._p
        st = p._states.get(topic)
        if st is None or (st.expires and time.monotonic() > st.expires):
            st = p._prepare(topic)
        return st.throttle.reserve(_nbytes(value)) if st.throttle is not None else 0.0

    def produce_reserved(self, topic: str, value: Any, key: Any, partition: int,
                         on_delivery: DeliveryCallback | None, timestamp: int, headers: Any) -> None:
        p = self._p
        st = p._states.get(topic)
        if st is None:  # dropped since the reservation: a send as any other
            return p.produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
        try:
            st.send_reserved(topic, value, key, partition, on_delivery, None, timestamp, headers)
        except BufferFullError:
            raise
        except (BufferError, KafkaException) as exc:
            raise send_error(exc, p.runtime.app_id, st.cluster, topic) from None
