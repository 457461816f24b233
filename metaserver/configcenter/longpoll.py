"""Long-poll registry: parked `/notifications/v2` requests keyed by the release-message keys they watch.

Each parked request is one asyncio future, not a thread (Apollo uses Spring DeferredResult the same way).
A release resolves every future watching its key in one pass on the event loop; the JSON answer is encoded
once per release and shared by every waiter whose namespace names need no restoring.
"""

from __future__ import annotations

import asyncio
import json
import resource
from collections import defaultdict
from typing import Any

import structlog

log = structlog.get_logger(__name__)


#: descriptors kept for everything but parked polls (the database pools, the LISTEN connection, log files,
#: ordinary ``/configs`` and Open API requests, health checks), at most this many ...
RESERVED_FDS = 1024

#: the ``Retry-After`` of a long poll refused at the cap: ykafka's clients (ykafka.endpoints.Endpoints) wait this
#: (up to 1.25 times) once every instance refused, so it bounds how late a release reaches a watcher no instance
#: could park; each such watcher costs the instances about one refused poll per instance per this many seconds
DEFAULT_POLL_RETRY_AFTER_S = 5


def default_max_parked(nofile: int | None = None) -> int:
    """How many long polls one process parks before refusing more: derived from the open-file limit.

    Why: each parked poll holds a socket; a process at its limit fails every ``accept()`` (uvicorn logs EMFILE
    per attempt) and answers nobody, its health and Open API included. A quarter of the limit (at most
    :data:`RESERVED_FDS`) is kept for everything else, and half of the rest goes to polls, because a client
    that holds a poll usually holds a second, idle keep-alive connection from its last ``/configs`` fetch
    (the SDK's fetch session; Java's keep-alive cache), which the server keeps for its keep-alive timeout."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    reserved = max(32, min(RESERVED_FDS, nofile // 4))
    return max(1, (nofile - reserved) // 2)


def notification(namespace: str, notification_id: int, details: dict[str, int]) -> dict[str, Any]:
    """ApolloConfigNotification as clients parse it."""
    return {"namespaceName": namespace, "notificationId": notification_id, "messages": {"details": details}}


class Waiter:
    """One parked long poll: the keys it watches, its future, and how to restore client namespace names."""

    __slots__ = ("future", "keys", "original_names")

    def __init__(self, keys: list[str], original_names: dict[str, str]) -> None:
        self.future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.keys = [k.lower() for k in keys]
        # normalized namespace -> the spelling the client sent, when they differ (DeferredResultWrapper)
        self.original_names = original_names

    def expire(self) -> None:
        """The long-poll timeout: an empty body, answered as 304 Not Modified."""
        if not self.future.done():
            self.future.set_result(b"")

    def resolve(self, namespace: str, notification_id: int, message: str, shared_body: bytes) -> None:
        if self.future.done():
            return
        original = self.original_names.get(namespace)
        if original is None:
            self.future.set_result(shared_body)
        else:
            body = [notification(original, notification_id, {message: notification_id})]
            self.future.set_result(json.dumps(body).encode())


class LongPollRegistry:
    """Watch key (lower-cased `appId+cluster+namespace`) -> parked waiters."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._parked = 0

    def __len__(self) -> int:
        """How many polls are parked."""
        return self._parked

    def register(self, waiter: Waiter) -> None:
        self._parked += 1
        for key in waiter.keys:
            self._waiters[key].add(waiter)

    def unregister(self, waiter: Waiter) -> None:
        self._parked -= 1
        for key in waiter.keys:
            bucket = self._waiters.get(key)
            if bucket is not None:
                bucket.discard(waiter)
                if not bucket:
                    del self._waiters[key]

    def expire_all(self) -> int:
        """Answer every parked poll with 304 at once (shutdown: clients re-poll instead of waiting)."""
        waiters = {w for ws in self._waiters.values() for w in ws}
        for waiter in waiters:
            waiter.expire()
        return len(waiters)

    def publish(self, message: str, notification_id: int) -> int:
        """Answer every poll watching `message`; returns how many were woken."""
        waiters = self._waiters.get(message.lower())
        if not waiters:
            return 0
        namespace = message.split("+", 2)[2]
        shared = json.dumps([notification(namespace, notification_id, {message: notification_id})]).encode()
        woken = list(waiters)
        for waiter in woken:
            waiter.resolve(namespace, notification_id, message, shared)
        log.debug("longpoll.published", message=message, notification_id=notification_id, woken=len(woken))
        return len(woken)
