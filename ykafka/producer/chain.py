"""The send chain of one topic, built once when its state is resolved so a send is ONE call.

Every feature that acts on each message (a ``ykafka-id`` stamp, message trace, a throttle, a Python
partitioner, a client swap's hold, the spill / failover hooks, the disaster-recovery engine's direct path)
adds its step in :func:`build`, and only when the topic's state needs it: a topic that needs none sends
straight into its librdkafka client (its chain IS the client's ``produce``, no Python in between).

A chain has librdkafka's ``produce`` signature, positional: ``(topic, value, key, partition, on_delivery,
callback, timestamp, headers)``; ``callback`` is always None (``Producer.produce`` folded it into
``on_delivery``). Errors: the client's own (``BufferError``, ``KafkaException``) are mapped by the caller;
what goes through ``Producer._send`` is mapped there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ykafka.producer.state import (
    _PENDING_MAX,
    ProducerBase,
    _Client,
    _nbytes,
    _next,
    _random,
    _stamp_id,
    _TopicState,
    queue_full,
)
from ykafka.tracing import Tracer

#: send(topic, value, key, partition, on_delivery, callback, timestamp, headers)
Send = Callable[..., None]

_UNSET = object()  # no callback seen yet (None is a callback value: the producer's default report)


def build(p: ProducerBase, st: _TopicState) -> None:
    """Compose ``st.send`` and ``st.send_reserved`` (the same chain without the throttle step: the asyncio
    layer took the tokens beforehand), innermost first. ``st.steps`` names what was added, outermost first."""
    steps: list[str] = []
    if st.held:  # a client swap drains: its messages wait, in order, then go to the new client
        inner: Send = _hold(p)
        steps.append("hold")
    elif st.direct is not None and not p._stamp_ids:  # disaster recovery on, cluster healthy: straight to the
        # client (a stamped message goes through the engine's send, as it always did)
        inner = _direct(p, st, _hooks(p, st.client))
        steps.append("dr-direct")
    elif p._send_hook is not None or p._delivery_hook is not None:  # spill / failover: through the engine
        inner = _hooks(p, st.client)
        steps.append("hooks")
    else:
        inner = st.client.rd.produce
    if st.picker is not None:  # producer.partitioner / producer.partitions.exclude decided in Python
        inner = _picked(st.picker, inner)
        steps.append("partitioner")
    reserved = inner
    if st.throttle is not None:
        inner = _throttled(st.throttle.acquire, inner)
        steps.append("throttle")
    st.send = _outer(p, st, inner, steps, reserved=False)
    st.send_reserved = st.send if reserved is inner else _outer(p, st, reserved, [], reserved=True)
    st.steps = tuple(reversed(steps))
    # the direct step alone: Producer.produce runs it inline (the same code as _direct's send, kept in step)
    # ... and with a sampled trace before it (rate under 1, no message id): the sampling too (_traced_sampled's send)
    sampled = st.steps == ("trace", "dr-direct") and 0.0 < st.trace < 1.0 and not p._stamp_ids
    st.fast = (st.direct, st.client.rd.produce, st.trace if sampled else 0.0) \
        if (st.steps == ("dr-direct",) or sampled) and st.direct is not None else None


def _outer(p: ProducerBase, st: _TopicState, chain: Send, steps: list[str], reserved: bool) -> Send:
    """The steps before throttling: the message's id and trace (its wait counts in its trace), expiry."""
    if p._stamp_ids:  # ykafka.message.id: a stable id for consumer-side de-duplication
        chain = _stamped(p, st, chain)
        steps.append("message-id")
    elif st.trace >= 1.0:
        # traced straight into the direct path's client in one frame when nothing sits between them
        chain = _traced_direct(p, st, chain) if steps == ["dr-direct"] else _traced_all(p, st, chain)
        steps.append("trace")
    elif st.trace:
        chain = _traced_sampled(p, st, chain)
        steps.append("trace")
    if st.expires:  # partition count / disaster-recovery path re-checked when it is due
        chain = _expiring(p, st.expires, chain, reserved)
        steps.append("expiry")
    return chain


def _expiring(p: ProducerBase, expires: float, nxt: Send, reserved: bool) -> Send:
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        if time.monotonic() > expires:
            fresh = p._prepare(topic)
            chain = fresh.send_reserved if reserved else fresh.send
            return chain(topic, value, key, partition, on_delivery, callback, timestamp, headers)
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _stamped(p: ProducerBase, st: _TopicState, nxt: Send) -> Send:
    rate = st.trace

    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        headers, msg_id = _stamp_id(headers)
        if rate and Tracer.sampled(msg_id, rate):  # sampled by a hash of its id: every process decides the same
            on_delivery, headers = p._traced(st, key, on_delivery, headers, msg_id)
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _traced_all(p: ProducerBase, st: _TopicState, nxt: Send) -> Send:
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        user, twin = st.traced_pair
        if on_delivery is user:  # the same callback as the last send: its traced twin
            on_delivery = twin
        else:
            on_delivery, headers = p._traced(st, key, on_delivery, headers)
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _traced_direct(p: ProducerBase, st: _TopicState, direct_step: Send) -> Send:
    """Trace at 100 % on the disaster-recovery engine's direct path, one frame for the common send (no key, no
    partition, the same delivery callback as the last such send): straight to the client with that callback's
    traced twin fused with the engine's report (:meth:`DirectSender.shared`, what :func:`_direct` gives it).
    Other sends take the steps it composes (:func:`_traced_all`, :func:`_direct`)."""
    generic = _traced_all(p, st, direct_step)
    direct = st.direct
    assert direct is not None
    produce = st.client.rd.produce
    # (user callback, its traced and engine-fused callback) of the last send without key or partition: one
    # cell read once per send, so threads sending with different callbacks never see a mixed pair
    last: tuple[Any, Any] = (_UNSET, None)

    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        nonlocal last
        if key is not None or partition >= 0 or timestamp:
            return generic(topic, value, key, partition, on_delivery, callback, timestamp, headers)
        user, fused = last
        if on_delivery is user:
            return produce(topic, value, None, -1, fused, None, timestamp, headers)
        traced, headers = p._traced(st, None, on_delivery, headers)  # for this callback, whatever others do
        direct_step(topic, value, None, -1, traced, callback, timestamp, headers)
        if traced is not None and traced is not on_delivery:  # wrapped (the tracer is open)
            last = (on_delivery, direct.shared(traced))
    return send


def _traced_sampled(p: ProducerBase, st: _TopicState, nxt: Send) -> Send:
    """A sampled trace (rate under 1). Before the direct step alone ``Producer.produce`` runs it inline
    (``st.fast``'s rate): a change here goes there too."""
    rate = st.trace

    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        if _random() < rate:  # sampled: decided once, here
            on_delivery, headers = p._traced(st, key, on_delivery, headers)
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _throttled(acquire: Callable[[int], Any], nxt: Send) -> Send:
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        acquire(_nbytes(value))
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _picked(picker: Callable[[Any], int], nxt: Send) -> Send:
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        if partition < 0:
            partition = picker(key)
        nxt(topic, value, key, partition, on_delivery, callback, timestamp, headers)
    return send


def _hold(p: ProducerBase) -> Send:
    """Queue behind the swap; once released, to the client the topic resolves to then."""
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        if topic in p._held:
            with p._lock:
                if topic in p._held:
                    if len(p._pending) >= _PENDING_MAX:
                        raise queue_full("local queue full while a client swap drains: poll() and retry")
                    p._pending.append((topic, value, key, partition, on_delivery, timestamp, headers))
                    return
        st = p._states.get(topic) or p._prepare(topic)
        p._send(st.client, topic, value, key, partition, on_delivery, timestamp, headers)
    return send


def _hooks(p: ProducerBase, client: _Client) -> Send:
    """Through ``Producer._send``: the installed send / delivery hooks (spill, failover) see the message."""
    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        p._send(client, topic, value, key, partition, on_delivery, timestamp, headers)
    return send


def _direct(p: ProducerBase, st: _TopicState, engine: Send) -> Send:
    """The disaster-recovery engine's healthy-cluster path: a failure comes back to the engine through the
    delivery report (DirectSender); a pinned partition goes through the engine's send. When it is the whole
    chain, ``Producer.produce`` runs the same code inline (``st.fast``): a change here goes there too."""
    direct = st.direct
    assert direct is not None
    produce = st.client.rd.produce
    default = p._default_dr
    order = direct.order

    def send(topic: str, value: Any, key: Any, partition: int, on_delivery: Any, callback: Any, timestamp: int,
             headers: Any) -> None:
        if partition >= 0:
            return engine(topic, value, key, partition, on_delivery, callback, timestamp, headers)
        if on_delivery is None:
            on_delivery = default
        if key is not None or timestamp:  # its produce order rides along: a key's re-routed messages stay in
            # order; and a send with its own timestamp never gets a shared callback, whose trace twin takes
            # the message timestamp for the send time
            user, bind = direct.last_keyed  # one read: a consistent pair whatever other threads send
            if on_delivery is not user:
                bind = direct.binder(on_delivery)
            on_delivery = bind(_next(order))
        else:
            user, shared = direct.last  # one read: a consistent pair whatever other threads send
            on_delivery = shared if on_delivery is user else direct.shared(on_delivery)
        produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
    return send
