"""The framework fetch loop: one librdkafka consumer feeding a resizable worker pool.

One thread polls, applies live changes, cuts batches into per-partition runs and dispatches them under
the ordering mode; workers run the handler. Offsets are committed up to the lowest unfinished one
(:mod:`ykafka.consumer.offsets`); a revoke waits for the revoked partitions' in-flight work, commits and
only then lets them go. Partitions whose in-flight window is full are paused at the fetcher, so memory
stays bounded. Failed messages go to retry topics / the DLQ (:mod:`ykafka.consumer.retry`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import structlog

from ykafka import catalog
from ykafka.consumer import session as S
from ykafka.consumer.observe import (
    CONSUME_ERRORS,
    CONSUME_LATENCY,
    CONSUMED,
    PROCESS_LATENCY,
    PROCESSED,
    SAMPLED_TIMING_BELOW_S,
    TIMING_STRIDE,
    ConsumerObserver,
)
from ykafka.consumer.offsets import PartitionTracker, Task
from ykafka.consumer.ordering import FAST_HANDLER_S, Dispatcher, Ordering
from ykafka.consumer.pool import AsyncPool, Pool, WorkerPool
from ykafka.consumer.retry import RetryPolicy, RetryRouter, Routed
from ykafka.consumer.settings import ConsumerSettings
from ykafka.errors import InvalidConfigValue, KafkaError
from ykafka.metrics import Metrics
from ykafka.throttle import TokenBucket
from ykafka.transport import KafkaException, Message, TopicPartition, from_kafka_error, is_auth_error
from ykafka.transport import RawKafkaError as CKError

log = structlog.get_logger(__name__)

Handler = Callable[[Message], Any]
AsyncHandler = Callable[[Message], Coroutine[Any, Any, Any]]

_IGNORED_ERRORS = (CKError._PARTITION_EOF, CKError.UNKNOWN_TOPIC_OR_PART, CKError._UNKNOWN_PARTITION,
                   CKError._UNKNOWN_TOPIC)



def retry_policy(effective: Mapping[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        backoff_ms=tuple(catalog.value(effective, "consumer.retry.backoff.ms")),
        max_attempts=int(catalog.value(effective, "consumer.retry.max.attempts")),
        dlq_enabled=bool(catalog.value(effective, "consumer.dlq.enabled")),
    )


def migration_strategy(new: str, current: str) -> str:
    """The ``partition.assignment.strategy`` list to rejoin with when the strategy changes.

    Between eager strategies the old one stays as a fallback (``roundrobin,range``): members that already
    switched still agree with members that have not, and once every member prefers the new strategy the
    coordinator selects it. librdkafka cannot mix eager and cooperative assignors, so a switch to or from
    ``cooperative-sticky`` names the new one alone; the coordinator admits it once the old members left.
    """
    previous = current.split(",")[0].strip()
    if not previous or previous == new or "cooperative" in new or "cooperative" in previous:
        return new
    return f"{new},{previous}"


class Engine:
    """Runs a handler over a :class:`~ykafka.consumer.session.ConsumerSession` until stopped."""

    def __init__(self, session: S.ConsumerSession, group: str, effective: Mapping[str, Any], settings: ConsumerSettings,
                 router: RetryRouter | None, observer: ConsumerObserver | None = None) -> None:
        self.session = session
        self.group = group
        self.observer = observer  # message trace and handler metrics (None: neither)
        self.effective: dict[str, Any] = dict(effective)
        self.settings = settings
        self.router = router
        self.trackers: dict[S.TP, PartitionTracker] = {}
        self.pool: Pool | None = None
        self.dispatcher: Dispatcher | None = None
        self.bucket = TokenBucket.for_dispatch(float(catalog.value(self.effective, "consumer.rate.limit.msgs")))
        self.processed = 0  # messages the handler returned from (approximate under concurrency)
        self.msg_cost = 1e-3  # seconds per message, a moving average measured by the workers
        self._inline: Callable[[Task], None] | None = None  # set per batch: run tasks on the fetch thread
        self.failed = 0
        self._handler: Handler | None = None
        self._async_handler: AsyncHandler | None = None  # run_async: tasks run as coroutines (AsyncPool)
        self._stop = threading.Event()
        self._running = threading.Event()
        self._pending: dict[str, Any] = {}  # changed catalog keys, applied on the polling thread
        self._pending_switch: tuple[dict[str, Any], Callable[[], RetryRouter] | None] | None = None
        self._pending_lock = threading.Lock()
        self._holds: dict[S.TP, int] = {}  # retry partition -> not-before (epoch ms) of its held copy
        self._ordering_change: tuple[Ordering, float] | None = None  # (new mode, drain deadline)
        self._retry_levels = 0
        self._retry_topics: list[str] = []
        self._next_commit = 0.0
        # Flow control: when the workers fall behind the fetch thread, it waits (releasing the GIL) for
        # them instead of fetching more; a worker finishing a task wakes it.
        self._waiting = False
        self._wake = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fatal: KafkaError | None = None  # a fatal client error ended run(): it raises this
        self.on_fatal: Callable[[KafkaError], None] | None = None  # the owner reports it
        #: a broker refused the consumer's credentials or ACL (error, topic): the owner names app and cluster
        self.on_refused: Callable[[Any, str | None], None] | None = None

    # -- control ----------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running.is_set()

    def stop(self) -> None:
        """Ask ``run`` to stop: no more fetching, in-flight work finishes, offsets commit, group left."""
        self._stop.set()

    def apply(self, changes: Mapping[str, Any]) -> dict[str, InvalidConfigValue]:
        """Validate raw hot-config values (``Consumer.apply``) and apply the valid ones; returns the rejected
        ones (previous values stay)."""
        accepted: dict[str, Any] = {}
        rejected: dict[str, InvalidConfigValue] = {}
        for name, raw in changes.items():
            try:
                accepted[name] = catalog.parse(name, raw)
            except InvalidConfigValue as exc:
                rejected[name] = exc
                log.warning("hot config rejected", key=name, value=raw, reason=exc.reason)
        if accepted:
            self.apply_valid(accepted)
        return rejected

    def apply_valid(self, accepted: Mapping[str, Any]) -> None:
        """Apply values the catalog already parsed (the runtime's effective config): in-place keys now,
        the rest queued for the polling thread, which dispatches on each key's ``catalog.Apply``."""
        self.effective.update(accepted)
        if "consumer.workers" in accepted and self.pool is not None:
            self.pool.resize(accepted["consumer.workers"])
        if "consumer.rate.limit.msgs" in accepted:
            self.bucket.set_rate(accepted["consumer.rate.limit.msgs"])
        if self.router is not None and accepted.keys() & {"consumer.retry.backoff.ms", "consumer.retry.max.attempts",
                                                          "consumer.dlq.enabled"}:
            self.router.policy = retry_policy(self.effective)
        with self._pending_lock:
            self._pending.update(accepted)

    def switch_cluster(self, props: Mapping[str, Any], router_factory: Callable[[], RetryRouter] | None) -> None:
        """Move to another cluster (``route.cluster`` changed): finish and commit here, rejoin there."""
        with self._pending_lock:
            self._pending_switch = (dict(props), router_factory)

    def has_pending(self) -> bool:
        return bool(self._pending) or self._pending_switch is not None

    def apply_pending(self) -> None:
        """Apply queued live changes; must run on the thread that polls the consumer."""
        self._apply_pending()

    # -- run --------------------------------------------------------------------------------------------

    def run(self, handler: Handler) -> None:
        """Blocking: fetch, dispatch and commit until :meth:`stop`; raises the typed error when a fatal
        client error ended it (after the same orderly shutdown as a stop)."""
        if self._running.is_set():
            raise RuntimeError("this consumer is already running")
        self._handler = handler
        self._fatal = None
        self._stop.clear()
        self._running.set()
        workers = int(catalog.value(self.effective, "consumer.workers"))
        if self._async_handler is not None and self._loop is not None:
            self.pool = AsyncPool(self._run_task_async, workers, self._loop)
        else:
            self.pool = WorkerPool(self._run_task, workers)
        self.dispatcher = Dispatcher(self.pool, catalog.value(self.effective, "consumer.ordering"))
        self.session.hooks = self
        try:
            self._setup_retry_topics()  # adds the retry topics to the subscription
            session = self.session
            session.props["enable.auto.commit"] = False  # commits follow completion, never the fetch position
            # The fetch loop holds back when the workers are behind, which fills librdkafka's prefetch
            # queue; its default 1 s fetch back-off then stalls partitions long after the workers caught up.
            session.props.setdefault("fetch.queue.backoff.ms", 20)
            if session.consumer is not None and session.client_config.get("enable.auto.commit") is not False:
                session.rebuild({})
            elif not session.left:
                session.open()
            self._main_loop()
        finally:
            try:
                self.session.close()  # revoke hook: drain in-flight, commit
                self._drain_all(self.settings.revoke_timeout_ms / 1000)
                if self.router is not None:
                    self.router.flush()
            finally:
                self.pool.close()
                self.session.hooks = None
                self._running.clear()
                log.info("consumer stopped", processed=self.processed, failed=self.failed)
        if self._fatal is not None:
            raise self._fatal

    def run_async(self, handler: Callable[[Message], Coroutine[Any, Any, Any]],
                  loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Like :meth:`run` for an ``async def`` handler; at most ``consumer.workers`` run at once.

        The coroutines run on ``loop`` (the application's, for the asyncio consumer) or on a private loop
        thread. A worker waits for its coroutine, so ordering, retries and contiguous commits are the
        sync path's, and ``consumer.workers`` is the in-flight limit, live.
        """
        own = loop is None
        if loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="ykafka-async-handlers", daemon=True)
            thread.start()
        self._loop = loop
        self._async_handler = handler
        target = loop

        def bridge(msg: Message) -> Any:  # the handler as a plain call, for paths that run one synchronously
            return asyncio.run_coroutine_threadsafe(handler(msg), target).result()

        try:
            self.run(bridge)
        finally:
            self._async_handler = None
            if own:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(5)
                loop.close()

    def _setup_retry_topics(self) -> None:
        if self.router is None or not self.settings.retry_topics:
            return
        levels = int(catalog.value(self.effective, "consumer.retry.max.attempts"))
        self._retry_levels = 0
        self._subscribe_retry_levels(max(levels, 1))

    def _subscribe_retry_levels(self, levels: int) -> None:
        assert self.router is not None
        sources = [t for t in self._source_topics() if not t.startswith("^")]
        patterns = [t for t in self._source_topics() if t.startswith("^")]
        self.router.ensure_topics(sources, levels)
        retry = self.router.retry_topics(sources, levels)
        if patterns:
            retry.append(self.router.retry_pattern())
        self._retry_levels = levels
        topics = [*self._source_topics(), *retry]
        self._retry_topics = retry
        self.session.resubscribe(topics)

    def _source_topics(self) -> list[str]:
        retry = set(self._retry_topics)
        return [t for t in self.session.topics if t not in retry]

    def _main_loop(self) -> None:
        session = self.session
        settings = self.settings
        router = self.router
        poll_timeout = settings.poll_timeout_ms / 1000
        batch = settings.batch_size
        pool = self.pool
        assert pool is not None
        busy = False  # the last batch came back full
        bucket = self.bucket
        while not self._stop.is_set():
            max_backlog = 2 * pool.size + 2
            if self._pending or self._pending_switch is not None:  # a route switch waits in its own slot
                self._apply_pending()
            consumer = session.consumer
            if consumer is None:  # left the group
                if router is not None:
                    router.poll(0)
                self._stop.wait(poll_timeout)
                continue
            if router is not None:
                router.poll(0)
            now = time.monotonic()
            if self._holds:
                self._release_holds()
            self._backpressure()
            if now >= self._next_commit:
                self._commit(list(self.trackers.values()), sync=False)
                self._next_commit = now + settings.commit_interval_ms / 1000
            if self._ordering_change is not None and not self._try_switch_ordering(now):
                self._stop.wait(0.01)
                continue
            if pool.backlog() > max_backlog and self._wait_for_workers(pool, max_backlog, poll_timeout):
                continue
            wanted = bucket.allowance(batch)
            if wanted < 1:
                self._stop.wait(min(poll_timeout, bucket.wait_time()))
                continue
            if busy:
                # Under load one call fills the batch: every return from librdkafka has to win the GIL
                # back from the workers, so fewer calls per message is what keeps the fetcher fed.
                msgs = consumer.consume(wanted, poll_timeout)
                if not msgs:
                    busy = False
                    continue
            else:
                # Light traffic: return as soon as one message is there (no waiting to fill a batch).
                first = consumer.poll(poll_timeout)
                if first is None:
                    continue
                msgs = consumer.consume(wanted - 1, 0) if wanted > 1 else []
                msgs.insert(0, first)
            busy = len(msgs) >= wanted
            bucket.take(len(msgs))
            self._dispatch(msgs)

    # -- dispatch ---------------------------------------------------------------------------------------

    def _dispatch(self, msgs: list[Any]) -> None:
        assert self.dispatcher is not None
        chunk = self.dispatcher.chunk_size(len(msgs), self.msg_cost)
        # A handler of a few microseconds is bound by the GIL: handing it to a worker only adds thread
        # switches. When nothing else is pending (so order cannot be overtaken) it runs right here.
        self._inline = (self._run_task if self._async_handler is None and self.msg_cost < FAST_HANDLER_S
                        and self._all_idle() else None)
        run: list[Any] = []
        last_p = -1
        last_t: Any = None
        for m in msgs:
            if m.error() is not None:
                self._on_error(m)
                continue
            p = m.partition()
            t = m.topic()
            if p != last_p or t != last_t:
                if run:
                    self._dispatch_run(last_t, last_p, run, chunk)
                run = [m]
                last_p = p
                last_t = t
            else:
                run.append(m)
        if run:
            self._dispatch_run(last_t, last_p, run, chunk)

    def _dispatch_run(self, topic: str, partition: int, run: list[Any], chunk: int) -> None:
        assert self.dispatcher is not None
        tp = (topic, partition)
        if tp in self.session.rewound:
            return  # fetched before a rewind took effect; it comes again from the rewound offset
        tracker = self.trackers.get(tp)
        if tracker is None:
            is_retry = self.router is not None and self.router.parse_retry_topic(topic) is not None
            tracker = self.trackers[tp] = PartitionTracker(topic, partition, is_retry)
        cap = 2 * self.settings.max_inflight_per_partition
        if tracker.inflight + len(run) > cap:
            tracker.position()  # drop finished tasks from the window first
            room = max(0, cap - tracker.inflight)
            if room < len(run):
                # Hard memory bound: the window never holds more than twice the limit; the rest of the
                # batch is dropped and fetched again once the partition resumes.
                self.session.rewind(tp, run[room].offset(), S.BACKPRESSURE)
                run = run[:room]
                if not run:
                    return
        if not tracker.is_retry:
            self.dispatcher.dispatch_run(tracker, run, chunk, inline=self._inline)
            return
        assert self.router is not None
        now_ms = time.time() * 1000
        due: list[Any] = []
        for raw in run:
            not_before = self.router.not_before(raw)
            if not_before > now_ms:
                self._hold(tp, raw.offset(), not_before)
                break
            due.append(raw)
        if due:
            self.dispatcher.dispatch_run(tracker, due, chunk, [self.router.view(raw) for raw in due],
                                         inline=self._inline)

    def _hold(self, tp: S.TP, offset: int, not_before: int) -> None:
        """Keep a retry copy back until due: pause its partition and rewind to it (no worker waits)."""
        self._holds[tp] = not_before
        self.session.rewind(tp, offset, S.HOLD)

    def _release_holds(self) -> None:
        now_ms = time.time() * 1000
        for tp, not_before in list(self._holds.items()):
            if not_before <= now_ms:
                del self._holds[tp]
                self.session.resume([tp], S.HOLD)

    def _on_error(self, msg: Any) -> None:
        err = msg.error()
        if err.code() in _IGNORED_ERRORS:
            log.debug("consumer notice", error=err.str(), topic=msg.topic())
        elif err.fatal():
            log.error("fatal consumer error; stopping", error=err.str())
            self._fatal = from_kafka_error(err)
            if self.on_fatal is not None:
                self.on_fatal(self._fatal)
            self._stop.set()
        elif is_auth_error(err) and self.on_refused is not None:
            self.on_refused(err, msg.topic())
        else:
            log.warning("consumer error", error=err.str(), topic=msg.topic(), partition=msg.partition())

    # -- workers ----------------------------------------------------------------------------------------

    def _task_started(self, task: Task) -> bool:
        """Mark a task started; False when it was given up on revoke before it started (not done: the
        partition's next owner handles it)."""
        task.started = True
        if task.skipped:
            if task.lane is not None:
                assert self.dispatcher is not None
                self.dispatcher.task_done(task)
            return False
        return True

    def _task_finished(self, task: Task, spent: float | None) -> None:
        """Count a task's messages (``spent``: handler seconds; None when cancelled) and release its lane."""
        if spent is not None:
            # moving average of the handler's cost per message (steers chunking); races only blur it
            self.msg_cost = 0.8 * self.msg_cost + 0.2 * spent / (len(task.msgs) or 1)
            self.processed += len(task.msgs)
        task.finished = True
        if task.lane is not None:
            assert self.dispatcher is not None
            self.dispatcher.task_done(task)
        if self._waiting:
            self._wake.set()
            if self._async_handler is None:  # a worker thread: hand the GIL to the waiting fetch thread now,
                time.sleep(0)  # not after the switch interval (the event loop must not stall on it)

    async def _run_task_async(self, task: Task) -> None:
        """:meth:`_run_task` for an ``async def`` handler, on the event loop (the :class:`AsyncPool`'s runner):
        messages of a task are awaited one after the other, with the same timings, trace steps and failure
        routing as the observed thread loop."""
        if not self._task_started(task):
            return
        spent: float | None = None
        if not task.tracker.cancelled:
            handler = self._async_handler
            assert handler is not None
            observer = self.observer
            watch = self._watch(task.tracker.topic)
            rate = watch.rate if watch is not None else 0.0
            raws = task.msgs if task.raws is None else task.raws
            took: list[float] = []
            errors = 0
            spent = 0.0
            clock = time.perf_counter
            for msg, raw in zip(task.msgs, raws, strict=True):
                if rate and observer is not None:
                    observer.trace(CONSUMED, raw, rate)
                began = clock()
                try:
                    await handler(msg)
                except Exception as exc:
                    errors += 1
                    routed = self._failed(task, msg, exc)
                    if rate and observer is not None and routed is not None:
                        observer.trace(routed[0], raw, rate, error=routed[2], detail=routed[1])
                else:
                    if rate and observer is not None:
                        observer.trace(PROCESSED, raw, rate, latency_ms=(clock() - began) * 1000)
                finally:
                    took.append((clock() - began) * 1000)
                    spent += took[-1] / 1000
            if observer is not None and observer.metrics is not None:
                observer.metrics.observe_many(PROCESS_LATENCY, took, task.tracker.topic, self.group)
                if errors:
                    observer.metrics.count(CONSUME_ERRORS, errors, task.tracker.topic, self.group)
        self._task_finished(task, spent)

    def _watch(self, topic: str) -> Any:
        """The observer's per-topic trace / metrics state (None without an observer)."""
        observer = self.observer
        return None if observer is None else (observer.watches.get(topic) or observer.watch(topic))

    def _run_task(self, task: Task) -> None:
        msgs = task.msgs
        if not self._task_started(task):
            return
        spent: float | None = None
        if not task.tracker.cancelled:
            handler = self._handler
            assert handler is not None
            observer = self.observer
            watch = self._watch(task.tracker.topic)
            if watch is not None and observer is not None and not watch.rate and observer.metrics is not None \
                    and task.raws is None and self.msg_cost < SAMPLED_TIMING_BELOW_S:
                spent = self._run_sampled(task, handler, observer.metrics, watch.topic)
            elif watch is not None and observer is not None and (watch.rate or observer.metrics is not None):
                # timed per message; the cost average counts the handler alone: trace / metrics work is
                # bound by the GIL like a fast handler, so it must not push runs onto more threads
                spent = self._run_observed(task, handler, observer, watch.rate, watch.topic)
            else:
                started = time.perf_counter()
                for msg in msgs:
                    try:
                        handler(msg)
                    except Exception as exc:
                        self._failed(task, msg, exc)
                spent = time.perf_counter() - started
        self._task_finished(task, spent)

    def _run_observed(self, task: Task, handler: Handler, observer: ConsumerObserver, rate: float,
                      topic: str) -> float:
        """The handler loop with timings (``consume.latency_ms``, ``process.latency_ms``, ``consume.errors``)
        and, when the topic's rate asks for it, the trace steps of sampled messages; returns the seconds
        spent in the handler."""
        group = self.group
        metrics = observer.metrics
        ages: list[float] = []  # handed to the metrics once per task: one lock, not two per message
        took: list[float] = []
        note_age, note_took = ages.append, took.append
        msgs = task.msgs
        raws = task.raws  # retry copies: the fetched messages behind the views the handler gets
        clock = time.perf_counter
        now = clock()
        to_wall_ms = time.time() * 1000 - now * 1000  # wall-clock ms = to_wall_ms + clock() * 1000
        spent = 0.0
        errors = 0
        try:
            for msg, raw in zip(msgs, msgs if raws is None else raws, strict=True):
                ts_type, ts = raw.timestamp()
                age = to_wall_ms + now * 1000 - ts if ts_type and ts > 0 else None  # now: the previous one's end
                if age is not None:
                    note_age(age)
                if rate:
                    observer.trace(CONSUMED, raw, rate, latency_ms=age)
                began = clock()
                try:
                    handler(msg)
                except Exception as exc:
                    now = clock()
                    spent += now - began
                    note_took((now - began) * 1000)
                    errors += 1
                    routed = self._failed(task, msg, exc)
                    if rate and routed is not None:
                        observer.trace(routed[0], raw, rate, error=routed[2], detail=routed[1])
                    now = clock()  # routing may have waited for the retry producer's queue
                    continue
                now = clock()
                spent += now - began
                note_took((now - began) * 1000)
                if rate:
                    observer.trace(PROCESSED, raw, rate, latency_ms=(now - began) * 1000)
        finally:
            if metrics is not None:
                metrics.observe_many(CONSUME_LATENCY, ages, topic, group)
                metrics.observe_many(PROCESS_LATENCY, took, topic, group)
                if errors:
                    metrics.count(CONSUME_ERRORS, errors, topic, group)
        return spent

    def _run_sampled(self, task: Task, handler: Handler, metrics: Metrics, topic: str) -> float:
        """The handler loop for a fast handler without tracing: one message in ``TIMING_STRIDE`` is timed
        (its age and its handler time), the rest run bare. Counts and the handler's total time stay exact;
        percentiles and max come from the timed sample. Timing each message would cost more than such a
        handler does."""
        msgs = task.msgs
        clock = time.perf_counter
        origin = clock()
        to_wall_ms = time.time() * 1000 - origin * 1000  # wall-clock ms = to_wall_ms + clock() * 1000
        ages: list[float] = []
        took: list[float] = []
        errors = 0
        routing = 0.0  # time spent routing failures (retry / DLQ), not the handler's
        for first in range(0, len(msgs), TIMING_STRIDE):
            msg = msgs[first]
            ts_type, ts = msg.timestamp()
            began = clock()
            if ts_type and ts > 0:
                ages.append(to_wall_ms + began * 1000 - ts)
            try:
                handler(msg)
                took.append((clock() - began) * 1000)
            except Exception as exc:
                took.append((clock() - began) * 1000)
                errors += 1
                routed_at = clock()
                self._failed(task, msg, exc)
                routing += clock() - routed_at
            for msg in msgs[first + 1:first + TIMING_STRIDE]:
                try:
                    handler(msg)
                except Exception as exc:
                    errors += 1
                    routed_at = clock()
                    self._failed(task, msg, exc)
                    routing += clock() - routed_at
        spent = clock() - origin - routing
        timed = len(took)
        metrics.observe_many(PROCESS_LATENCY, took, topic, self.group, count=len(msgs), total=spent * 1000)
        if ages:  # messages without a timestamp have no age: scale the count by the timed share of those
            metrics.observe_many(CONSUME_LATENCY, ages, topic, self.group, count=round(len(ages) * len(msgs) / timed),
                                 total=sum(ages) * len(msgs) / timed)
        if errors:
            metrics.count(CONSUME_ERRORS, errors, topic, self.group)
        return spent

    def _all_idle(self) -> bool:
        return all(tracker.idle() for tracker in self.trackers.values())

    def _wait_for_workers(self, pool: Pool, max_backlog: int, timeout: float) -> bool:
        """Runnable tasks pile up: block (the workers get the GIL) until half of them were taken.

        Tasks waiting in an ordering lane are not runnable and do not count, so one slow key or partition
        never holds the others back (its own window pauses it instead). Returns True when housekeeping is
        due before the next fetch.
        """
        deadline = time.monotonic() + timeout
        self._waiting = True
        try:
            while pool.backlog() > max_backlog // 2:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self._wake.clear()
                if pool.backlog() <= max_backlog // 2:
                    break
                self._wake.wait(left)
            return False
        finally:
            self._waiting = False

    def _failed(self, task: Task, msg: Any, exc: Exception) -> Routed | None:
        self.failed += 1
        if self.router is None:
            log.error("handler failed; no retry topics configured, message counted as done",
                      topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), error=repr(exc))
            return None
        return self.router.route(task, msg, exc)

    # -- offsets ----------------------------------------------------------------------------------------

    def _backpressure(self) -> None:
        """Pause partitions whose in-flight window is full; resume them once it is half drained.

        The window is what lies between a partition's commit position and its last dispatched offset. The
        batch being dispatched may overshoot the limit; at twice the limit the dispatch itself stops and
        rewinds the partition (see ``_dispatch_run``), so memory stays bounded.
        """
        limit = self.settings.max_inflight_per_partition
        session = self.session
        for tp, tracker in self.trackers.items():
            tracker.position()
            inflight = tracker.inflight
            if inflight >= limit:
                if not session.paused_for(tp, S.BACKPRESSURE):
                    session.pause([tp], S.BACKPRESSURE)
            elif inflight <= limit // 2 and session.paused_for(tp, S.BACKPRESSURE):
                session.resume([tp], S.BACKPRESSURE)

    def _commit(self, trackers: Sequence[PartitionTracker], sync: bool) -> None:
        """Commit what moved; a synchronous commit (revoke, shutdown) re-sends every position, because an
        asynchronous commit still in flight is not guaranteed to land once the handle closes."""
        consumer: Any = self.session.consumer
        if consumer is None:
            return
        offsets: list[TopicPartition] = []
        moved: list[tuple[PartitionTracker, int]] = []
        for tracker in trackers:
            pos = tracker.position() if sync else tracker.pending_commit()
            if pos is not None:
                offsets.append(TopicPartition(tracker.topic, tracker.partition, pos))
                moved.append((tracker, pos))
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=not sync)
        except KafkaException as exc:
            log.warning("offset commit failed; uncommitted messages will be redelivered", error=str(exc))
            return
        for tracker, pos in moved:
            tracker.committed = pos

    def _drain(self, trackers: Sequence[PartitionTracker], timeout: float, skip: bool = False) -> bool:
        """Wait for the work of ``trackers`` (and its retry / DLQ acks); ``skip`` gives up unstarted tails."""
        deadline = time.monotonic() + timeout
        if skip:
            for tracker in trackers:
                tracker.skip_unstarted_tail()
        while True:
            if self.router is not None:
                self.router.poll(0)
            if all(tracker.settled() for tracker in trackers):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def _drain_all(self, timeout: float) -> None:
        trackers = list(self.trackers.values())
        if trackers and not self._drain(trackers, timeout, skip=True):
            log.warning("in-flight work did not finish before shutdown; it will be redelivered")

    # -- rebalance hooks (called by the session on the polling thread) ----------------------------------

    def assigned(self, partitions: list[TopicPartition]) -> None:
        return None

    def revoked(self, partitions: list[TopicPartition]) -> None:
        trackers = [t for t in (self.trackers.get((tp.topic, tp.partition)) for tp in partitions) if t is not None]
        # Work a worker already started finishes; queued work not yet started stays for the next owner.
        if trackers and not self._drain(trackers, self.settings.revoke_timeout_ms / 1000, skip=True):
            log.warning("revoked partitions still had in-flight work; it will be redelivered",
                        partitions=[f"{t.topic}[{t.partition}]" for t in trackers if not t.settled()])
        self._commit(trackers, sync=True)
        self._forget(partitions)

    def lost(self, partitions: list[TopicPartition]) -> None:
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            tracker = self.trackers.pop(key, None)
            if tracker is not None:
                tracker.cancelled = True
            self._holds.pop(key, None)

    # -- live changes on the polling thread -------------------------------------------------------------

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            switch, self._pending_switch = self._pending_switch, None
        session = self.session
        if switch is not None:  # Apply.SWITCH (route.cluster): finish and commit here, rejoin there
            self._switch(*switch)
        if "consumer.leave" in pending:
            if pending["consumer.leave"]:
                session.leave()
            else:
                session.rejoin()
        kinds = catalog.by_apply(pending, "consumer.")
        changed = kinds[catalog.Apply.REBUILD] + kinds[catalog.Apply.REJOIN]  # both need a new handle
        if changed:
            props = catalog.rdkafka_properties({k: pending[k] for k in changed}, "consumer.")
            if "partition.assignment.strategy" in props:
                props["partition.assignment.strategy"] = migration_strategy(
                    str(props["partition.assignment.strategy"]),
                    str(session.props.get("partition.assignment.strategy", "")))
            removed = [str(catalog.KEYS[k].rdkafka) for k in changed if catalog.KEYS[k].rdkafka not in props]
            session.rebuild(props, removed)
        if "consumer.paused" in pending:
            session.set_operator_paused(bool(pending["consumer.paused"]))
        if "consumer.ordering" in pending and self.dispatcher is not None:
            new = pending["consumer.ordering"]
            if new != self.dispatcher.ordering:
                self._ordering_change = (new, time.monotonic() + self.settings.drain_timeout_ms / 1000)
        if "consumer.retry.max.attempts" in pending and self.router is not None and self.settings.retry_topics:
            levels = int(pending["consumer.retry.max.attempts"])
            if levels > self._retry_levels:
                self._subscribe_retry_levels(levels)

    def _switch(self, props: dict[str, Any], router_factory: Callable[[], RetryRouter] | None) -> None:
        session = self.session
        had_handle = session.consumer is not None
        session.close()  # revoke hook drains and commits on the old cluster
        if self.router is not None:
            self.router.flush()
            self.router = router_factory() if router_factory is not None and self.running else None
        session.props = props
        if self.router is not None and self.settings.retry_topics:
            self._subscribe_retry_levels(max(self._retry_levels, 1))
        if had_handle and not session.left:
            session.open()

    def _try_switch_ordering(self, now: float) -> bool:
        """Switch the ordering mode once in-flight work drained (or the drain deadline passed)."""
        assert self._ordering_change is not None and self.dispatcher is not None
        new, deadline = self._ordering_change
        if self.router is not None:
            self.router.poll(0)
        drained = all(tracker.idle() for tracker in self.trackers.values())
        if not drained and now < deadline:
            return False
        if not drained:
            log.warning("ordering switched before in-flight work drained", ordering=new)
        log.info("ordering changed", previous=self.dispatcher.ordering, ordering=new)
        self.dispatcher.ordering = new
        self._ordering_change = None
        return True
