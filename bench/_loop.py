"""The produce loop every producer benchmark times, so raw confluent-kafka and ykafka run the same code.

confluent-kafka's canonical loop: ``produce(topic, value, key=..., on_delivery=cb)`` then ``poll(0)``,
``poll`` while the local queue is full, ``flush`` at the end; the time includes the flush, so every
message is acknowledged (checked by counting delivery callbacks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: prepare(callback) -> (callback, headers) for one message: what a tracing hook adds (None: nothing)
Prepare = Callable[[Callable[[Any, Any], None]], tuple[Callable[[Any, Any], None], Any]]


def produce_loop(producer: Any, topic: str, messages: int, value: bytes, keys: int = 0,
                 prepare: Prepare | None = None, positional: bool = False,
                 key_list: list[bytes | None] | None = None) -> float:
    """Messages per second for ``messages`` sends of ``value`` (``keys`` > 0: keyed ``i % keys``).

    ``positional``: call ``produce(topic, value, key, -1, cb, None, 0, headers)`` instead of the keyword
    form. confluent-kafka parses keywords in C more slowly than positions, while a Python wrapper takes
    either at the same cost, so the keyword loop flatters a wrapper and the positional one does not.
    ``key_list``: the keys, built by the caller (outside what bench/callgrind_budget.py counts)."""
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    if key_list is None:
        key_list = [str(i).encode() for i in range(keys)] if keys else [None]
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i in range(messages):
        key = key_list[i % len(key_list)]
        callback, headers = (on_delivery, None) if prepare is None else prepare(on_delivery)
        while True:
            try:
                if positional:
                    produce(topic, value, key, -1, callback, None, 0, headers)
                elif headers is None:
                    produce(topic, value, key=key, on_delivery=callback)
                else:
                    produce(topic, value, key=key, on_delivery=callback, headers=headers)
                break
            except BufferError:
                poll(0.01)
        poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - start
    if left or delivered[0] != messages:
        raise RuntimeError(f"{topic}: {delivered[0]} of {messages} delivered, {left} left")
    return messages / elapsed
