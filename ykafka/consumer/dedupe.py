"""Opt-in duplicate suppression for handlers that are not naturally idempotent.

At-least-once delivery means a message can reach the handler again after a crash or rebalance. Wrapping
the handler with :class:`Dedupe` skips messages whose id was handled successfully within the TTL, in
this process. The id is the ``ykafka-id`` header the ykafka Producer stamps (or, failing that, the
``ykafka-trace`` id of a traced message); without either, the message's original topic / partition /
offset (retry copies carry the original ones).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from ykafka import headers as H


def message_id(msg: Any) -> str:
    """The ``ykafka-id`` header, else the trace id of a traced message, else ``topic/partition/offset``."""
    hdrs = msg.headers()
    found = H.get(hdrs, H.MESSAGE_ID) or H.get(hdrs, H.TRACE_ID)
    if found:
        return found.decode("utf-8", "replace")
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


class Dedupe:
    """An LRU + TTL set of handled message ids; use as a decorator: ``consumer.run(Dedupe()(handler))``."""

    def __init__(self, maxsize: int = 100_000, ttl_s: float = 3600.0,
                 key: Callable[[Any], str] = message_id) -> None:
        self._seen: TTLCache[str, bool] = TTLCache(maxsize=maxsize, ttl=ttl_s)
        self._lock = threading.Lock()
        self._key = key
        self.skipped = 0

    def seen(self, msg: Any) -> bool:
        ident = self._key(msg)
        with self._lock:
            return ident in self._seen

    def mark(self, msg: Any) -> None:
        ident = self._key(msg)
        with self._lock:
            self._seen[ident] = True

    def __call__(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(handler)
        def deduped(msg: Any) -> Any:
            ident = self._key(msg)
            with self._lock:
                if ident in self._seen:
                    self.skipped += 1
                    return None
            result = handler(msg)  # a failure leaves the id unmarked, so the retry copy runs
            with self._lock:
                self._seen[ident] = True
            return result

        return deduped
