"""User callbacks of the asyncio clients run on the application's event loop, as confluent-kafka's
``aio._common.wrap_common_callbacks`` runs them: ``error_cb``, ``throttle_cb``, ``stats_cb``, ``on_commit``,
the rebalance callbacks and ``logger``. A callback may be a plain function or an ``async def``.

librdkafka fires them on the thread serving the client (a poll); that thread waits until the callback has
run on the loop. A callback may call the client again (``await consumer.assign(...)`` in ``on_assign``,
``await consumer.commit()`` in ``on_revoke``, ``await producer.produce(...)`` in ``stats_cb``): the waiting
thread runs those calls itself (a :class:`Lane`), so they neither wait for the call in flight, which waits
for them, nor run beside it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: the conf entries confluent-kafka's asyncio clients run on the loop (besides ``logger``)
COMMON_CALLBACKS = ("error_cb", "throttle_cb", "stats_cb")


class Lane:
    """Client calls made by one callback invocation, run by the thread that waits for the callback."""

    def __init__(self, owner: object) -> None:
        self._owner = weakref.ref(owner)  # the client: the callback held by librdkafka must not keep it alive
        self._jobs: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()
        self._cond = threading.Condition()
        self._open = True
        # the callback's own calls one at a time, gathered or left running as tasks (taken on the loop; an
        # asyncio.Lock binds to the loop on first use, so creating it on the client's thread is fine)
        self.serial = asyncio.Lock()

    @property
    def owner(self) -> object:
        return self._owner()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any] | None:
        """Queue ``fn`` for the waiting thread; None once the callback has returned (the caller then takes
        the ordinary path: a task the callback left running outlives it)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._cond:
            if not self._open:
                return None
            self._jobs.append((fn, fut))
            self._cond.notify()
        return fut

    def serve(self, done: concurrent.futures.Future[Any]) -> Any:
        """Run queued calls until the callback ``done``; then its result (or its exception)."""
        done.add_done_callback(lambda _: self._wake())
        while True:
            with self._cond:
                while not self._jobs and not done.done():
                    self._cond.wait()
                if not self._jobs:
                    self._open = False
                    break
                fn, fut = self._jobs.popleft()
            _run(fn, fut)
        return done.result()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()


def _run(fn: Callable[[], Any], fut: concurrent.futures.Future[Any]) -> None:
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as exc:  # handed to the awaiting coroutine
        fut.set_exception(exc)


_LANE: contextvars.ContextVar[Lane | None] = contextvars.ContextVar("ykafka_aio_lane", default=None)


def current_lane(owner: object) -> Lane | None:
    """The lane of the callback invocation this coroutine runs in, when it is ``owner``'s."""
    lane = _LANE.get()
    return lane if lane is not None and lane.owner is owner else None


def on_loop(loop: asyncio.AbstractEventLoop, cb: Callable[..., Any], owner: object,
            first: object = None) -> Callable[..., Any]:
    """``cb`` as a callback for the client's thread: it runs on ``loop`` (awaited when it is a coroutine)
    while the calling thread runs the client calls it makes. ``first`` replaces the first argument (the
    rebalance callbacks get the asyncio consumer, not the sync one)."""

    # weakly: librdkafka (whose handle the client's threads reach) holds this callback; it must not keep the
    # asyncio client alive (ykafka/lifecycle.py)
    owner_ref = weakref.ref(owner)
    first_ref = None if first is None else weakref.ref(first)

    def call(*args: Any) -> Any:
        client = owner_ref()
        if client is None:  # collected: its shutdown is under way
            return None
        if first_ref is not None:
            args = (first_ref(), *args[1:])
        lane = Lane(client)
        del client

        async def run() -> Any:
            _LANE.set(lane)  # this task's context only: the calls it (and tasks it starts) make use the lane
            result = cb(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        try:
            done = asyncio.run_coroutine_threadsafe(run(), loop)
        except RuntimeError:  # the loop is closed: nobody is left to run the callback
            log.warning("ykafka.aio.callback_dropped", callback=getattr(cb, "__name__", repr(cb)))
            return None
        return lane.serve(done)

    return call


class LoopLogger:
    """confluent-kafka's ``AsyncLogger``: librdkafka's log lines are handed to the ``logger`` on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        self.loop = loop
        self.logger = logger

    def log(self, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the line is dropped
            self.loop.call_soon_threadsafe(lambda: self.logger.log(*args, **kwargs))


def wrap_conf(loop: asyncio.AbstractEventLoop, conf: dict[str, Any], owner: object,
              names: tuple[str, ...] = COMMON_CALLBACKS) -> dict[str, Any]:
    """A copy of ``conf`` whose callbacks ``names`` (and ``logger``) run on ``loop``."""
    out = dict(conf)
    for name in names:
        if callable(out.get(name)):
            out[name] = on_loop(loop, out[name], owner)
    if out.get("logger") is not None:
        out["logger"] = LoopLogger(loop, out["logger"])
    return out
