"""``AIOProducer``: confluent-kafka's asyncio producer API over the one ykafka :class:`~ykafka.Producer`.

Why a layer and not a second producer: hot config, routing, throttling, spill and failover live once, in the
sync producer (docs/architecture.md, "one engine, two call styles"). This layer only decides *where* a call
runs so the event loop never blocks:

- a send whose topic is resolved (``AsyncSendPort.ready``, ``ykafka/producer/aio_port.py``) is handed to
  librdkafka on the loop itself (a C call that only enqueues);
- a send that must first resolve its topic (grant check, metadata, a client rebuilt after a hot change) runs
  on one dedicated thread; while any such send is queued, later sends queue behind it, so per-key order holds
  across rebuilds and cluster switches;
- a throttled send *awaits* its wait (the tokens are reserved first, so order is kept), never sleeping a thread;
- delivery reports are served by a background thread and resolve the returned futures on the loop in
  batches (one loop wake-up per batch, not per message).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka import lifecycle
from ykafka.aio import callbacks
from ykafka.errors import BufferFullError, ClosedError
from ykafka.producer import Producer
from ykafka.producer.aio_port import async_port
from ykafka.transport import KafkaException, from_kafka_error, is_auth_error

log = structlog.get_logger(__name__)

DeliveryCallback = Callable[[Any, Any], None]
_FULL_RETRY_S = 0.005  # back-off while librdkafka's queue is full (the poll thread is draining it)


class AIOProducer:
    """Drop-in for confluent-kafka's ``aio.AIOProducer``: ``await producer.produce(...)`` returns a future of the
    delivered message (raises :class:`ykafka.KafkaError` on failure).

    ``batch_size`` and ``buffer_timeout`` are accepted for signature compatibility: batching is librdkafka's
    (``linger.ms``, a hot key). Unlike confluent-kafka's, headers are supported. Must be created inside a
    running event loop.
    """

    def __init__(self, producer_conf: Mapping[str, Any], max_workers: int = 4,
                 executor: concurrent.futures.Executor | None = None, batch_size: int = 1000,
                 buffer_timeout: float = 1.0) -> None:
        self._loop = asyncio.get_running_loop()
        self._own_executor = executor is None
        self.executor = executor or concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                                          thread_name_prefix="ykafka-aio")
        # one thread for sends that must resolve first: FIFO keeps their order
        self._sender = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ykafka-aio-send")
        self._queued = 0  # sends handed to the sender thread and not yet enqueued in librdkafka
        # error_cb, throttle_cb, stats_cb and logger run on the loop (confluent-kafka's wrap_common_callbacks)
        self._producer = Producer(callbacks.wrap_conf(self._loop, dict(producer_conf), self))
        self._port = async_port(self._producer)  # ready / reserve / produce_reserved: not the drop-in API
        self._sink = _Reports(self._loop, weakref.ref(self._producer))
        self._closed = False
        self._stop = threading.Event()
        # the poller reaches the producers weakly; dropped without close(), this client is collected and
        # _reap stops its threads (nothing flushed, as confluent-kafka's: ykafka/lifecycle.py)
        self._poller = threading.Thread(target=_poll_loop, args=(weakref.ref(self._producer), self._stop),
                                        name="ykafka-aio-poll", daemon=True)
        self._poller.start()
        lifecycle.opened(self)
        self._finalizer = lifecycle.on_collect(
            self, "AIOProducer", self._producer.runtime.client_id,
            functools.partial(_reap, self._stop, self._sender, self.executor if self._own_executor else None))

    # --- context manager ----------------------------------------------------------------------------

    async def __aenter__(self) -> AIOProducer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- sending --------------------------------------------------------------------------------------

    async def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                      timestamp: int = 0, headers: Any = None, on_delivery: DeliveryCallback | None = None,
                      callback: DeliveryCallback | None = None) -> asyncio.Future[Any]:
        """Queue a message; the returned future resolves to the delivered ``Message``.

        Raises at once what :meth:`ykafka.Producer.produce` raises before sending (:class:`AclDenied`,
        :class:`ThrottledError` beyond ``ykafka.throttle.max.wait.ms``, :class:`ClosedError`, ``TypeError``).
        A message librdkafka refuses (``MSG_SIZE_TOO_LARGE``, ``_UNKNOWN_PARTITION``) fails its own future
        with a ``KafkaException``, as confluent-kafka's. A full local queue is waited out (awaiting).
        """
        if self._closed:
            raise ClosedError("Producer has been closed")  # confluent-kafka's words
        fut: asyncio.Future[Any] = self._loop.create_future()
        report = functools.partial(self._sink.report, fut, on_delivery or callback)
        p = self._port
        try:
            if self._queued or not p.ready(topic):
                await self._send_off_loop(topic, value, key, partition, report, timestamp, headers)
                return fut
            wait = p.reserve(topic, value)
            if wait > 0:
                await asyncio.sleep(wait)
                if self._queued:  # a rebuild started meanwhile: stay behind the sends it holds
                    await self._send_off_loop(topic, value, key, partition, report, timestamp, headers,
                                              reserved=True)
                    return fut
            while True:
                try:
                    p.produce_reserved(topic, value, key, partition, report, timestamp, headers)
                    return fut
                except BufferFullError:
                    await asyncio.sleep(_FULL_RETRY_S)
        except KafkaException as exc:
            # librdkafka refused this message (too large, unknown partition...): as confluent-kafka's, its
            # future fails with the KafkaException and the other messages go on
            fut.set_exception(exc)
            return fut

    async def _send_off_loop(self, topic: str, value: Any, key: Any, partition: int, report: DeliveryCallback,
                             timestamp: int, headers: Any, reserved: bool = False) -> None:
        p = self._port

        def send() -> None:
            if not reserved:
                wait = p.reserve(topic, value)
                if wait > 0:  # on the sender thread, behind earlier sends: sleeping here keeps their order
                    threading.Event().wait(wait)
            while True:
                try:
                    p.produce_reserved(topic, value, key, partition, report, timestamp, headers)
                    return
                except BufferFullError:
                    if self._stop.wait(_FULL_RETRY_S):
                        raise

        self._queued += 1
        try:
            await self._loop.run_in_executor(self._sender, send)
        finally:
            self._queued -= 1

    # --- the rest of the producer API -----------------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    async def poll(self, timeout: float = 0, *args: Any, **kwargs: Any) -> int:
        """Delivery reports are served continuously by a background thread; this waits ``timeout`` at most."""
        if timeout and timeout > 0:
            await asyncio.sleep(min(timeout, 0.1))
        return 0

    async def flush(self, timeout: float = -1) -> int:
        """Wait until every queued message is delivered (or spilled); returns how many remain."""
        while self._queued:
            await asyncio.sleep(0.001)
        left = int(await self._call(self._producer.flush, timeout))
        await asyncio.sleep(0)  # let the last batch of futures resolve
        return left

    async def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        await self._call(self._producer.purge, in_queue, in_flight, blocking)

    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return await self._call(self._producer.list_topics, topic, timeout)

    # --- transactions (confluent-kafka's: begin / commit / abort flush what is queued first) -----------

    async def init_transactions(self, *args: Any, **kwargs: Any) -> None:
        await self._call(self._producer.init_transactions, *args, **kwargs)

    async def begin_transaction(self) -> None:
        await self.flush()
        await self._call(self._producer.begin_transaction)

    async def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        await self._call(self._producer.send_offsets_to_transaction, *args, **kwargs)

    async def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
        await self.flush()
        await self._call(self._producer.commit_transaction, *args, **kwargs)

    async def abort_transaction(self, *args: Any, **kwargs: Any) -> None:
        await self.flush()
        await self._call(self._producer.abort_transaction, *args, **kwargs)

    def __len__(self) -> int:
        return 0 if self._closed else len(self._producer) + self._queued

    def _after_fork(self) -> None:
        """In a forked child (lifecycle's ``os.register_at_fork`` hook): its poller thread and event loop are the
        parent's; every call raises :class:`ForkedClientError` naming the fix, ``close()`` does nothing."""
        self._finalizer.detach()
        lifecycle.disable_in_child(self, type(self).__name__, (), (
            "produce", "flush", "poll", "purge", "list_topics", "init_transactions", "begin_transaction",
            "send_offsets_to_transaction", "commit_transaction", "abort_transaction"))

    @property
    def producer(self) -> Producer:
        """The sync producer underneath (introspection: ``applied_config``, ``route``, ``clients``)."""
        return self._producer

    async def close(self, timeout: float = 30.0) -> int:
        """Flush (bounded), stop the background threads, release the clients; returns messages undelivered."""
        if self._closed:
            return 0
        self._closed = True
        self._finalizer.detach()
        while self._queued:
            await asyncio.sleep(0.001)
        left = int(await self._call(self._producer.flush, timeout))
        self._stop.set()
        await self._loop.run_in_executor(None, self._poller.join, 5)
        left = int(await self._call(self._producer.close, 1.0)) or left
        self._sender.shutdown(wait=True)
        if self._own_executor:
            self.executor.shutdown(wait=False)
        self._sink.resolve()
        return left


class _Reports:
    """Delivery outcomes on their way to the loop: what each message's callback references (not the AIOProducer).

    A delivery callback may be kept past its message by the engine's threads (the direct path caches the last
    one); it must not keep the AIOProducer, nor its sync producer, alive (ykafka/lifecycle.py)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, producer: weakref.ReferenceType[Producer]) -> None:
        self._loop = loop
        self._producer = producer
        self._reports: list[tuple[asyncio.Future[Any], DeliveryCallback | None, Any, Any]] = []
        self._lock = threading.Lock()
        self._wake_scheduled = False

    def report(self, fut: asyncio.Future[Any], user_cb: DeliveryCallback | None, err: Any, msg: Any) -> None:
        """Delivery callback (any thread): queue the outcome; one loop wake-up serves the whole batch."""
        with self._lock:
            self._reports.append((fut, user_cb, err, msg))
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self.resolve)
        except RuntimeError:  # the loop is closed: nobody is left to await these futures
            with self._lock:
                self._reports.clear()
                self._wake_scheduled = False

    def resolve(self) -> None:
        with self._lock:
            batch, self._reports = self._reports, []
            self._wake_scheduled = False
        for fut, user_cb, err, msg in batch:
            if user_cb is not None:
                try:
                    user_cb(err, msg)
                except Exception:  # a user callback's error must not strand the other futures
                    log.exception("ykafka.aio.delivery_callback_failed")
            if fut.done():
                continue
            if err is None:
                fut.set_result(msg)
            else:
                fut.set_exception(self._error(err, msg))

    def _error(self, err: Any, msg: Any) -> Exception:
        """The typed error of a failed delivery; a broker's refusal names the app, the cluster and the topic."""
        producer = self._producer()
        if not is_auth_error(err) or producer is None:
            return from_kafka_error(err)
        topic = msg.topic() if msg is not None else None
        try:
            cluster = producer.route(topic) if topic else None
        except Exception:  # noqa: BLE001 - the message is what matters; the cluster is a courtesy
            cluster = None
        return from_kafka_error(err, app_id=producer.runtime.app_id, cluster=cluster, resource=topic)


def _poll_loop(ref: weakref.ReferenceType[Producer], stop: threading.Event) -> None:
    """Serve delivery reports (the futures resolve on the loop) while the producer lives and is not closed."""
    while not stop.is_set():
        producer = ref()
        if producer is None:
            return
        try:
            producer.poll(0.1)
        except ClosedError:
            return
        except Exception:
            log.exception("ykafka.aio.poll_failed")
            stop.wait(0.1)
        del producer


def _reap(stop: threading.Event, sender: concurrent.futures.ThreadPoolExecutor,
          executor: concurrent.futures.Executor | None) -> None:
    """An AIOProducer collected without close(): its threads end; its sync Producer, unreferenced, is collected
    and reaped in turn (no flush: queued messages are dropped with a ResourceWarning)."""
    stop.set()
    sender.shutdown(wait=False)
    if executor is not None:
        executor.shutdown(wait=False)
