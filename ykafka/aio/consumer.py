"""``AIOConsumer``: confluent-kafka's asyncio consumer API over the one ykafka :class:`~ykafka.Consumer`.

Every call runs off the loop, one at a time (the gate): the sync consumer applies live changes (rebuild,
rejoin, cluster switch) on the thread that polls it, and no other call may run beside that. A long poll is
taken in short slices (live changes apply between two) under one hold of the gate: a ``commit`` or ``close``
awaited meanwhile waits for the whole poll, as confluent-kafka's gate makes it wait.
``consumer.rate.limit`` is awaited on the loop, not slept on a thread. ``run(handler)`` takes an ``async
def`` handler whose coroutines run on the application's own loop (docs/consumer.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

import structlog

from ykafka import lifecycle
from ykafka.aio import callbacks
from ykafka.consumer import Consumer
from ykafka.errors import ClosedError

log = structlog.get_logger(__name__)

_SLICE_S = 0.2  # longest single blocking poll on the consumer thread


class AIOConsumer:
    """Drop-in for confluent-kafka's ``aio.AIOConsumer``. Must be created inside a running event loop.

    Calls run on ``executor`` (or a pool of ``max_workers``) one at a time, in the order they were made,
    as confluent-kafka's gate admits them: a ``close()`` or ``position()`` awaited while a ``poll()`` is in
    flight waits for it. A call made from inside a callback this consumer runs (``on_assign``, ``on_revoke``,
    ``on_lost``, ``on_commit``, ``error_cb``...) runs on the thread that waits for the callback
    (:mod:`ykafka.aio.callbacks`). After :meth:`close` every call raises ``RuntimeError("Consumer closed")``.
    """

    def __init__(self, consumer_conf: Mapping[str, Any], max_workers: int = 2,
                 executor: concurrent.futures.Executor | None = None) -> None:
        self._closed = False
        self._own_executor = executor is None
        if executor is None:
            if max_workers < 1:
                raise ValueError("max_workers must be at least 1")
            executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                             thread_name_prefix="ykafka-aio-consumer")
        self.executor = executor
        self._loop = asyncio.get_running_loop()
        self._gate = asyncio.Lock()
        conf = callbacks.wrap_conf(self._loop, dict(consumer_conf), self, (*callbacks.COMMON_CALLBACKS, "on_commit"))
        try:
            self._consumer = Consumer(conf)
        except BaseException:
            if self._own_executor:
                executor.shutdown(wait=False)
            raise
        # dropped without close(): collected (its callbacks hold it weakly), its pool's threads end, and the sync
        # consumer underneath is collected and reaped in turn (it leaves the group: ykafka/lifecycle.py)
        lifecycle.opened(self)
        self._finalizer = lifecycle.on_collect(self, "AIOConsumer", self._consumer.runtime.client_id,
                                               functools.partial(executor.shutdown, wait=False)
                                               if self._own_executor else _nothing)

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def _after_fork(self) -> None:
        """In a forked child (lifecycle's ``os.register_at_fork`` hook): its consumer and event loop are the
        parent's; every call raises :class:`ForkedClientError` naming the fix, ``close()`` does nothing."""
        self._finalizer.detach()
        lifecycle.disable_in_child(self, type(self).__name__, (), ("_call",))

    @property
    def consumer(self) -> Consumer:
        """The sync consumer underneath (introspection: ``effective``, ``generation``, ``engine``)."""
        return self._consumer

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one call of the sync consumer off the loop, through the gate (see the class)."""
        return await self._exclusive(functools.partial(fn, *args, **kwargs), lambda run: run())

    async def _exclusive(self, job: Callable[..., Any],
                         body: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]) -> Any:
        """``body(run)`` while this call holds the gate (or, from inside a callback, its lane): ``run()`` runs
        ``job`` once on the consumer's thread. A ``poll()`` runs several slices under one hold, so a call
        awaited meanwhile waits for the whole poll, as confluent-kafka's gate makes it wait."""
        if self._closed:
            raise ClosedError("Consumer closed")  # a RuntimeError, as confluent-kafka raises
        lane = callbacks.current_lane(self)
        if lane is not None:  # from inside a callback: the thread waiting for it runs the call
            async with lane.serial:  # one call of this callback at a time, gathered or not (as upstream's lock)
                first = lane.submit(job)
                if first is not None:
                    pending = [first]

                    async def on_lane() -> Any:
                        fut = pending.pop() if pending else lane.submit(job)
                        if fut is None:  # the callback returned meanwhile: its thread serves no more calls
                            raise ClosedError("Consumer callback returned while its call was in flight")
                        return await asyncio.wrap_future(fut)

                    return await body(on_lane)
        await self._gate.acquire()
        running: asyncio.Future[Any] | None = None

        async def on_thread() -> Any:
            nonlocal running
            if self._closed:
                raise ClosedError("Consumer closed")
            running = self._loop.run_in_executor(self.executor, job)
            return await asyncio.shield(running)

        try:
            return await body(on_thread)
        finally:
            # released when the call has finished on its thread, even if the awaiting task is cancelled meanwhile
            if running is not None and not running.done():
                running.add_done_callback(lambda _: self._gate.release())
            else:
                self._gate.release()

    async def _throttled(self, timeout: float) -> bool:
        """Await ``consumer.rate.limit``; False when it outlasts ``timeout`` (nothing may be read yet)."""
        wait = self._consumer.throttle_wait()
        if not wait:
            return True
        if 0 <= timeout < wait:
            await asyncio.sleep(timeout)
            return False
        await asyncio.sleep(wait)
        return True

    async def poll(self, timeout: float = -1) -> Any:
        """The next message or event, or ``None`` after ``timeout`` seconds (-1: wait for one)."""
        return await self._sliced(self._consumer.poll, (), timeout, None)

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Up to ``num_messages`` messages, waiting at most ``timeout`` seconds (-1: until at least one)."""
        msgs: list[Any] = await self._sliced(self._consumer.consume, (num_messages,), timeout, [])
        return msgs

    async def _sliced(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None, empty: Any) -> Any:
        """``fn(*args, slice)`` in slices of at most ``_SLICE_S`` until it returns something or ``timeout``
        passed (``empty`` when it did not), all under one hold of the gate: the sync consumer applies live
        changes between two slices, and no other call of this consumer runs before the poll has returned."""
        sizes: list[float] = []

        def one_slice() -> Any:
            return fn(*args, sizes[-1])

        async def slices(run: Callable[[], Awaitable[Any]]) -> Any:
            # the timeout counts from when the poll holds the gate, not from when it began waiting for it
            deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
            while True:
                left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
                if not await self._throttled(left):
                    return empty
                sizes.append(_SLICE_S if deadline is None else min(_SLICE_S, max(0.0, deadline - time.monotonic())))
                got = await run()
                if got or (deadline is not None and time.monotonic() >= deadline):
                    return got

        return await self._exclusive(one_slice, slices)

    async def subscribe(self, topics: Sequence[str], on_assign: Callable[..., Any] | None = None,
                        on_revoke: Callable[..., Any] | None = None, on_lost: Callable[..., Any] | None = None) -> None:
        """Subscribe; rebalance callbacks may be plain functions or coroutines (run on this loop)."""
        kwargs = {name: callbacks.on_loop(self._loop, cb, self, first=self) for name, cb in
                  (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost)) if cb is not None}
        await self._call(self._consumer.subscribe, list(topics), **kwargs)

    async def unsubscribe(self) -> None:
        await self._call(self._consumer.unsubscribe)

    async def commit(self, message: Any = None, offsets: list[Any] | None = None, asynchronous: bool = True) -> Any:
        return await self._call(self._consumer.commit, message, offsets, asynchronous)

    async def committed(self, partitions: list[Any], timeout: float | None = None) -> Any:
        return await self._call(self._consumer.committed, partitions, timeout)

    async def position(self, partitions: list[Any]) -> Any:
        return await self._call(self._consumer.position, partitions)

    async def pause(self, partitions: list[Any]) -> None:
        await self._call(self._consumer.pause, partitions)

    async def resume(self, partitions: list[Any]) -> None:
        await self._call(self._consumer.resume, partitions)

    async def seek(self, partition: Any) -> None:
        await self._call(self._consumer.seek, partition)

    async def store_offsets(self, message: Any = None, offsets: list[Any] | None = None) -> None:
        await self._call(self._consumer.store_offsets, message, offsets)

    async def assign(self, partitions: list[Any]) -> None:
        await self._call(self._consumer.assign, partitions)

    async def unassign(self) -> None:
        await self._call(self._consumer.unassign)

    async def incremental_assign(self, partitions: list[Any]) -> None:
        await self._call(self._consumer.incremental_assign, partitions)

    async def incremental_unassign(self, partitions: list[Any]) -> None:
        await self._call(self._consumer.incremental_unassign, partitions)

    async def assignment(self) -> list[Any]:
        return list(await self._call(self._consumer.assignment))

    async def consumer_group_metadata(self) -> Any:
        return await self._call(self._consumer.consumer_group_metadata)

    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return await self._call(self._consumer.list_topics, topic, timeout)

    async def get_watermark_offsets(self, partition: Any, timeout: float | None = None,
                                    cached: bool = False) -> tuple[int, int]:
        return tuple(await self._call(self._consumer.get_watermark_offsets, partition, timeout, cached))

    async def offsets_for_times(self, partitions: list[Any], timeout: float | None = None) -> Any:
        return await self._call(self._consumer.offsets_for_times, partitions, timeout)

    async def run(self, handler: Callable[[Any], Coroutine[Any, Any, Any]],
                  topics: Sequence[str] | None = None) -> None:
        """Process messages with an ``async def`` handler until :meth:`stop` or SIGTERM / SIGINT.

        At most ``consumer.workers`` handlers are in flight (live); ordering, contiguous commits, retry
        topics and DLQ are the sync :meth:`ykafka.Consumer.run`'s. On a stop signal in-flight handlers
        finish and their offsets are committed before this returns.
        """
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self._consumer.stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread's loop (or Windows)
                log.info("ykafka.aio.consumer.no_signal_handler", signal=sig.name,
                         hint="call consumer.stop() to end run() gracefully")
        try:
            await self._loop.run_in_executor(
                None, functools.partial(self._consumer.run_async, handler, topics, self._loop))
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)

    def stop(self) -> None:
        """Ask :meth:`run` to finish in-flight handlers, commit and return."""
        self._consumer.stop()

    async def close(self) -> None:
        """Leave the group (committing per the mode's rules) and release the consumer. Waits for the call in
        flight, as every call does; later calls raise ``RuntimeError("Consumer closed")``."""
        def close() -> None:
            try:
                self._consumer.close()
            finally:
                self._closed = True  # before the gate opens again: a call waiting behind close() sees it

        try:
            await self._call(close)
        finally:
            self._closed = True
            self._finalizer.detach()
            if self._own_executor:
                await self._loop.run_in_executor(None, self.executor.shutdown, True)


def _nothing() -> None:
    """The shutdown of a collected AIOConsumer on a pool it does not own."""
