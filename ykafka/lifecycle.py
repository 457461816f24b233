"""How a client lives and dies like confluent-kafka's: collected when no reference is left, and what a fork does.

A ykafka client runs background threads (config watch, reports, the disaster-recovery engine, metrics). A thread is
a garbage-collection root, so if any of them held its client the client could never be collected: a service that
makes clients in request handlers, tests or retry loops would pile up threads, sockets and librdkafka handles
(issue 40: 50 dropped Producers took a process from 17 to 971 threads). So:

* every callback a client gives a component with a thread of its own is a :func:`weak_method` (or goes through a
  :func:`weakref.proxy`): the threads reach the client only weakly;
* a client's shutdown is a ``weakref.finalize`` over the components, not over the client (it never needs
  ``self``); when the client is collected, :func:`reap` hands that shutdown to one reaper thread, which stops the
  threads and destroys the librdkafka handles there, never on the thread that happened to run the collection (it
  may be one of the threads being stopped, or an event loop that must not block);
* as with confluent-kafka, nothing is flushed implicitly: messages still queued in a collected producer are
  dropped (a ``ResourceWarning`` names the client and the count, :func:`warn_unsent`); messages the spill had
  already journaled stay on disk and are replayed by the next producer of the app.

Fork (docs/producer.md, "Lifecycle and processes"): librdkafka handles and threads do not survive ``fork()``.
:func:`forked` says whether a client was created in another process; clients check it on first use in a child
and raise :class:`~ykafka.errors.ForkedClientError` naming the fix (create the client after the fork) instead of
hanging on a handle whose threads are gone.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: incremented in every child right after fork() (os.register_at_fork); a client remembers the value it was made in
_generation = 0


#: a forked child's copies of its parent's clients' state: never destroyed in the child (destroying a librdkafka
#: handle there would wait for its threads, which do not exist; closing the spill would unlock the parent's)
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    global _generation, _reaper, _reaper_lock, _open_lock, _open
    _generation += 1
    _reaper = None  # the parent's reaper thread does not exist here; a child starts its own on first use
    _reaper_lock = threading.Lock()  # another thread of the parent may have held these at the fork
    _open_lock = threading.Lock()
    clients, _open = list(_open), weakref.WeakSet()
    for client in clients:
        hook = getattr(type(client), "_after_fork", None)
        if hook is not None:
            try:
                hook(client)
            except Exception:  # a child must start whatever one client's state
                log.exception("ykafka.client.after_fork_failed", kind=type(client).__name__)


os.register_at_fork(after_in_child=_after_fork_in_child)


def keep_inherited(state: Any) -> None:
    """Keep ``state`` (a parent's client internals) alive for the child's lifetime: see :data:`_inherited`."""
    _inherited.append(state)


def forked_message(kind: str) -> str:
    """What a client made before fork() says when used in the child: the cause and the fix."""
    return (f"this {kind} was created in process {os.getppid()} before fork(); librdkafka clients and ykafka's "
            f"threads do not survive a fork: create the {kind} in the child process, after the fork (a lazily "
            "created global, gunicorn's post_fork, Celery's worker_process_init, a multiprocessing Pool initializer)")


def disable_in_child(client: object, kind: str, methods: tuple[str, ...], async_methods: tuple[str, ...] = ()) -> None:
    """In a forked child: ``methods`` of ``client`` (made before the fork) raise :class:`ForkedClientError` naming
    the fix; ``close`` does nothing (it must not touch the parent's spill or wait on threads that are gone). The
    parent's state stays alive, untouched. Instance attributes: the parent's method calls cost nothing more."""
    from ykafka.errors import ForkedClientError

    message = forked_message(kind)
    keep_inherited(dict(client.__dict__))

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise ForkedClientError(message)

    async def refuse_async(*_args: Any, **_kwargs: Any) -> Any:
        raise ForkedClientError(message)

    def close(*_args: Any, **_kwargs: Any) -> int:
        return 0

    async def close_async(*_args: Any, **_kwargs: Any) -> int:
        return 0

    for name in methods:
        client.__dict__[name] = refuse
    for name in async_methods:
        client.__dict__[name] = refuse_async
    client.__dict__["close"] = close_async if async_methods else close


def fork_generation() -> int:
    """How many forks separate this process from the first one that imported ykafka (0: that process)."""
    return _generation


def forked(born: int) -> bool:
    """True when a client made at fork generation ``born`` is used in a forked child."""
    return born != _generation


def weak_method(method: Callable[..., Any], default: Any = None) -> Callable[..., Any]:
    """A callable calling the bound ``method`` while its object lives, else returning ``default``.

    What a client hands to a component running its own thread (a listener, a report provider, an error callback):
    the component no longer keeps the client alive."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        target = ref()
        if target is None:
            return default
        return target(*args, **kwargs)

    call.__name__ = getattr(method, "__name__", "weak_method")
    call.__qualname__ = getattr(method, "__qualname__", call.__name__)
    return call


class _Reaper:
    """One daemon thread running the shutdowns of collected clients, in the order they were collected.

    ``put`` runs inside the garbage collector: no lock (a SimpleQueue is safe there), counters by ``next``."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, Callable[[], None]]] = queue.SimpleQueue()
        self._queued = itertools.count(1)
        self._done = itertools.count(1)
        self.last_queued = 0
        self.last_done = 0
        self._thread = threading.Thread(target=self._run, name="ykafka-reaper", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return max(0, self.last_queued - self.last_done)

    def put(self, name: str, shutdown: Callable[[], None]) -> None:
        self.last_queued = next(self._queued)
        self._queue.put((name, shutdown))

    def _run(self) -> None:
        while True:
            name, shutdown = self._queue.get()
            try:
                shutdown()
            except Exception:
                log.exception("ykafka.client.reap_failed", client=name)
            finally:
                self.last_done = next(self._done)
                del shutdown


_reaper: _Reaper | None = None
_reaper_lock = threading.Lock()


def _ensure_reaper() -> _Reaper:
    """The reaper, started by the first client's construction (never inside the garbage collector)."""
    global _reaper
    with _reaper_lock:
        if _reaper is None:
            _reaper = _Reaper()
        return _reaper


def reap(name: str, shutdown: Callable[[], None]) -> None:
    """Run ``shutdown`` (a collected client's) on the reaper thread."""
    reaper = _reaper
    if reaper is None:  # not reached for a client made through on_collect
        reaper = _ensure_reaper()
    reaper.put(name, shutdown)


def reaping() -> int:
    """Shutdowns of collected clients queued or running (tests wait for 0)."""
    reaper = _reaper
    return 0 if reaper is None else reaper.pending


#: clients made and neither closed nor collected; a client's parts reference one another (its send chains, its
#: hooks), so a dropped one waits for the cyclic garbage collector, not for its reference count. When this many more
#: are open than after the last forced collection, the next construction runs one: dropped clients cannot pile up
#: (threads, sockets) between the collector's own passes
COLLECT_EVERY = 8
#: the longest a new client waits for the shutdowns of dropped ones (see :func:`opened`)
BACKLOG_WAIT_S = 10.0
_open: weakref.WeakSet[Any] = weakref.WeakSet()
_collect_at = COLLECT_EVERY
_open_lock = threading.Lock()


def opened(client: object) -> None:
    """Count a new client (see :data:`COLLECT_EVERY`); may run a garbage collection first."""
    global _collect_at
    with _open_lock:
        due = len(_open) >= _collect_at
    if due:
        gc.collect()
        with _open_lock:
            _collect_at = len(_open) + COLLECT_EVERY
    # dropped clients are shut down before more are made: a loop that makes and drops clients faster than they
    # close (a consumer leaves its group) waits here instead of piling up their threads (bounded)
    deadline = time.monotonic() + BACKLOG_WAIT_S
    while reaping() > COLLECT_EVERY and time.monotonic() < deadline:
        time.sleep(0.01)
    with _open_lock:
        _open.add(client)


def closed(client: object) -> None:
    """A client closed explicitly: no longer counted."""
    with _open_lock:
        _open.discard(client)


def on_collect(client: object, kind: str, name: str, shutdown: Callable[[], None],
               unsent: Callable[[], int] | None = None) -> weakref.finalize:
    """When ``client`` is collected: the :func:`warn_unsent` warning (``unsent`` counts what it still held), then
    ``shutdown`` on the reaper thread. Neither may reference the client.

    Not at interpreter exit (``atexit=False``): as with confluent-kafka, a client alive at exit is not closed for
    the application; daemon threads end with the process and the spill keeps what it journaled."""
    _ensure_reaper()
    finalizer = weakref.finalize(client, _collected, kind, name, shutdown, unsent, _generation)
    finalizer.atexit = False
    return finalizer


def _collected(kind: str, name: str, shutdown: Callable[[], None], unsent: Callable[[], int] | None,
               born: int) -> None:
    """Runs inside the garbage collector, on whatever thread it ran: takes no lock (that thread may hold one),
    logs nothing here (the logger's lock); the count and the warning only, the rest on the reaper thread."""
    if born != _generation:  # a copy of the parent's client in a forked child: its threads and handles are the
        return  # parent's; nothing here may stop or destroy them
    count = 0
    if unsent is not None:
        try:
            count = unsent()
        except Exception:  # a half-built client: nothing to count
            count = 0
        warn_unsent(kind, name, count)
    reap(name, functools.partial(_shut_down, kind, name, count, shutdown))


def _shut_down(kind: str, name: str, unsent: int, shutdown: Callable[[], None]) -> None:
    log.info("ykafka.client.collected", client=name, kind=kind, unsent=unsent)
    shutdown()


def warn_unsent(kind: str, name: str, unsent: int) -> None:
    """The ResourceWarning of a client collected while it still held unsent messages."""
    if unsent:
        warnings.warn(f"{kind} {name} was collected without close() while {unsent} message(s) were not delivered: "
                      "they are dropped (call flush() or close() before dropping it)", ResourceWarning, stacklevel=3)
