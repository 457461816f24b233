"""Delivery callbacks raised on the engine's own threads wait here for the application's ``poll()`` / ``flush()``.

confluent-kafka runs delivery callbacks inside the application's ``poll()`` / ``flush()`` and nowhere else;
the engine's threads (maintenance, replay, health) also see delivery reports: of its standby clients, of
spilled records replayed. Attached to a :class:`ykafka.Producer` (``defer``), a callback reached on such a
thread is queued and run, in order, by the next ``poll()`` / ``flush()``; on any other thread it runs at once.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

DeliveryCallback = Callable[[Any, Any], Any]

_local = threading.local()


def mark_internal() -> None:
    """Called first by each engine thread: callbacks reached on it are deferred."""
    _local.internal = True


def on_internal_thread() -> bool:
    return bool(getattr(_local, "internal", False))


class Mailbox:
    """Callbacks to run on the application's polling thread (thread-safe)."""

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer
        self._queue: deque[tuple[DeliveryCallback, Any, Any]] = deque()
        self.on_mail: Callable[[], None] | None = None  # the owner's poll() must now serve it

    def deliver(self, callback: DeliveryCallback | None, err: Any, msg: Any, later: bool = False) -> None:
        """Run ``callback(err, msg)`` now, or queue it for the owner's poll (on an engine thread, or ``later``:
        a send's own failure is reported by poll(), as librdkafka's are, never inside produce())."""
        if callback is None:
            return
        if self.defer and (later or getattr(_local, "internal", False)):
            self._queue.append((callback, err, msg))
            notify = self.on_mail
            if notify is not None:
                notify()
            return
        callback(err, msg)

    @property
    def holds_back(self) -> bool:
        """Whether engine threads leave the owner's clients to the owner's poll (their reports call back)."""
        return self.defer and on_internal_thread()

    def serve(self) -> int:
        """Run the queued callbacks, oldest first (on the caller's thread); returns how many ran."""
        served = 0
        queue = self._queue
        while queue:
            try:
                callback, err, msg = queue.popleft()
            except IndexError:  # another poller took the last one
                break
            callback(err, msg)
            served += 1
        return served

    def __len__(self) -> int:
        return len(self._queue)
