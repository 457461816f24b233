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
from itertools import compress, groupby, islice, pairwise
from operator import ne
from typing import Any

import structlog

from ykafka import catalog
from ykafka.consumer import session as S
from ykafka.consumer.live import LiveChanges
from ykafka.consumer.observe import ConsumerObserver
from ykafka.consumer.offsets import PartitionTracker, Task
from ykafka.consumer.ordering import FAST_HANDLER_S, Dispatcher, Ordering
from ykafka.consumer.pool import AsyncPool, Pool, WorkerPool
from ykafka.consumer.retry import RetryRouter, Routed
from ykafka.consumer.settings import ConsumerSettings
from ykafka.errors import KafkaError
from ykafka.events import MetricName
from ykafka.throttle import TokenBucket
from ykafka.transport import (
    KafkaException,
    Message,
    TopicPartition,
    from_kafka_error,
    is_auth_error,
)
from ykafka.transport import RawKafkaError as CKError

log = structlog.get_logger(__name__)

Handler = Callable[[Message], Any]
AsyncHandler = Callable[[Message], Coroutine[Any, Any, Any]]

# a fetched message (never an error: those are dropped first) has its topic and partition
_error: Callable[[Message], Any] = Message.error
_partition: Callable[[Message], Any] = Message.partition
_topic: Callable[[Message], Any] = Message.topic
#: added to a bounded close's wait (librdkafka's own leave-group and final commit)
CLOSE_GRACE_S = 10.0
UNANSWERED = "this client's requests fail"  # the watchdog's verdict on a handle the cluster no longer answers
UNANSWERED_CLOSE_S = 2.0
#: settings a watchdog probe leaves out: callbacks that report into this consumer (its errors, statistics, commits)
_PROBE_DROPPED = frozenset({"error_cb", "stats_cb", "throttle_cb", "on_commit", "statistics.interval.ms"})
_IGNORED_ERRORS = (CKError._PARTITION_EOF, CKError.UNKNOWN_TOPIC_OR_PART, CKError._UNKNOWN_PARTITION,
                   CKError._UNKNOWN_TOPIC)


class Engine(LiveChanges):
    """Runs a handler over a :class:`~ykafka.consumer.session.ConsumerSession` until stopped (live changes:
    :class:`~ykafka.consumer.live.LiveChanges`)."""

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
        # the watchdog (:meth:`_watchdog`): when the fetch loop last saw progress, and how many rebuilds it made
        self._progress_at = 0.0
        self._processed_seen = 0
        #: per assigned partition: (its fetch mark, when it last moved); a partition that fetches nothing while the
        #: others do is invisible to the consumer-wide progress count
        self._part_marks: dict[S.TP, tuple[tuple[int | None, int | None], float]] = {}
        self._unassigned_seen: dict[S.TP, int] | None = None  # committed offsets at the last unassigned look
        self._probe_answers = 0  # consecutive looks our handle failed while a fresh client's were answered
        self.watchdog_rebuilds = 0

    # -- control ----------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running.is_set()

    def stop(self) -> None:
        """Ask ``run`` to stop: no more fetching, in-flight work finishes, offsets commit, group left."""
        self._stop.set()

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
                # revoke hook: drain in-flight, commit; bounded, so a stop always ends (a handle whose group state
                # broke was seen to block in close for 40 s and more)
                self.session.close(self.settings.revoke_timeout_ms / 1000 + CLOSE_GRACE_S)
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
        watchdog_s = settings.watchdog_ms / 1000
        self._progress_at = time.monotonic()
        next_watch = self._progress_at + 1.0
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
            if watchdog_s and now >= next_watch:
                next_watch = now + 1.0
                self._watchdog(now, watchdog_s)
                if session.consumer is not consumer:
                    continue  # rebuilt
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
            del msgs  # not alive during the next fetch: see Task.release

    # -- watchdog ---------------------------------------------------------------------------------------

    def _watchdog(self, now: float, bound_s: float) -> None:
        """Rebuild a client that stalled: subscribed, and for ``bound_s`` either without an assignment the group
        confirms (we are not a member of a STABLE group) or assigned but handling nothing while its partitions hold
        records beyond the committed offsets. Issue 38: after a broker was frozen past the session timeout a
        consumer logged ``partitions lost`` and was never assigned again (the group EMPTY, nothing handled); a
        plain confluent-kafka consumer stalled the same way once. A fresh handle rejoins from the committed
        offsets. One check per ``bound_s`` at most, whatever the verdict."""
        session = self.session
        stuck = self._stuck_partitions(now, bound_s)
        if not session.subscribed or session.consumer is None or (not stuck and (
                session.pauses or self.processed != self._processed_seen)):
            self._processed_seen = self.processed
            self._progress_at = now
            return
        if not stuck and now - self._progress_at < bound_s:
            return
        reason = self._stall_reason(stuck)
        stalled_s = round(now - min([self._progress_at, *(self._part_marks[tp][1] for tp in stuck)]), 1)
        self._progress_at = time.monotonic()
        for tp in stuck:  # judged: each is looked at again only after another bound
            self._part_marks[tp] = (self._part_marks[tp][0], self._progress_at)
        if reason is None:
            return
        log.warning("consumer.watchdog_rebuild", group=self.group, reason=reason, stalled_s=stalled_s,
                    generation=session.generation, assigned=len(session.assigned))
        self.watchdog_rebuilds += 1
        metrics = self.observer.metrics if self.observer is not None else None
        if metrics is not None:
            metrics.count(str(MetricName.CONSUME_REJOINS), 1, None, self.group)
        # a handle that answers nothing would only spend the whole bound in close: its commits cannot land (what it
        # held is handled again from the committed offsets, at-least-once)
        close_s = UNANSWERED_CLOSE_S if reason.startswith(UNANSWERED) else \
            min(self.settings.revoke_timeout_ms / 1000, 10.0) + CLOSE_GRACE_S
        session.rebuild({}, close_timeout=close_s)
        self._progress_at = time.monotonic()
        self._part_marks.clear()
        self._unassigned_seen = None

    def _stuck_partitions(self, now: float, bound_s: float) -> list[S.TP]:
        """Assigned partitions the framework does not pause whose fetch position has not moved for ``bound_s``.

        Issue 38's 25-minute soak: three of six partitions fetched nothing for its last 14 minutes while the
        consumers kept handling the other three, so the consumer-wide progress count never stalled and the watchdog
        never looked (librdkafka held them paused or stopped fetching them behind the framework's back). Whether
        they are behind is asked of the cluster (:meth:`_stall_reason`)."""
        session = self.session
        marks = self._part_marks
        assigned = session.assigned
        for tp in [tp for tp in marks if tp not in assigned]:
            del marks[tp]
        stuck = []
        for tp in assigned:
            tracker = self.trackers.get(tp)
            mark = (None, None) if tracker is None else (tracker.next_offset, tracker.committed)
            seen = marks.get(tp)
            if seen is None or seen[0] != mark or tp in session.pauses:
                marks[tp] = (mark, now)
            elif now - seen[1] >= bound_s:
                stuck.append(tp)
        return sorted(stuck)

    def _stall_reason(self, stuck: Sequence[S.TP] = ()) -> str | None:
        """Why the client counts as stalled, or None (it is idle for a good reason, or the cluster cannot tell).
        ``stuck``: only these partitions are judged (they fetched nothing while others may have)."""
        session = self.session
        consumer = session.consumer
        if consumer is None:
            return None
        try:
            look = self._assigned_reason if session.assigned else self._unassigned_reason
            reason = look(consumer, stuck)
        except Exception as exc:
            return self._failed_look(exc)
        self._probe_answers = 0
        return reason

    def _assigned_reason(self, consumer: Any, stuck: Sequence[S.TP]) -> str | None:
        session = self.session
        self._unassigned_seen = None
        parts = [TopicPartition(t, p) for t, p in (stuck or sorted(session.assigned))]
        behind = 0
        for tp in consumer.committed(parts, timeout=5):
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=2,
                                                       cached=False)
            behind += max(0, high - max(tp.offset, low))
        if not behind:
            return None
        if stuck:
            return (f"partitions fetching nothing ({', '.join(f'{t}[{p}]' for t, p in stuck)}: {behind} records "
                    "behind the committed offsets)")
        return f"no progress ({behind} records behind the committed offsets)"

    def _failed_look(self, exc: Exception) -> str | None:
        """Our handle's look failed. Issue 38's seed-1 soak: a consumer's coordinator requests sat in its out-queue
        after the brokers came back (the group EMPTY, 713,218 records unhandled) and every look timed out, which
        the watchdog read as "the cluster does not answer, a new client would not either" for the rest of the run.
        Whether the cluster answers is asked of a fresh client: when it answers the same questions at two looks in
        a row while ours does not, the fault is in our handle and it is rebuilt; when the fresh client fails too,
        the cluster is down and rebuilding would only churn (docs/reliability.md, "The consumer watchdog")."""
        if self._fresh_client_answers():
            self._probe_answers += 1
            log.warning("consumer.watchdog_handle_unanswered", group=self.group, error=str(exc),
                        looks=self._probe_answers)
            if self._probe_answers >= 2:
                self._probe_answers = 0
                return f"{UNANSWERED} ({exc}) while a new client's are answered"
            return None
        self._probe_answers = 0
        log.info("consumer.watchdog_unknown", group=self.group, error=str(exc))
        return None

    def _fresh_client_answers(self) -> bool:
        """A short-lived client with our settings (no callbacks that report into this consumer, no group join)
        asks the cluster what the watchdog's look asks: the topics' metadata and the group's committed offsets,
        which go to the group coordinator."""
        conf = {k: v for k, v in self.session.client_config.items() if k not in _PROBE_DROPPED}
        conf["enable.auto.commit"] = False
        probe = None
        try:
            probe = self.session.factory(conf)
            parts = self._subscribed_partitions(probe)
            if parts:
                probe.committed(parts, timeout=5)
            else:
                probe.list_topics(timeout=5)
            return True
        except Exception as exc:
            log.debug("consumer.watchdog_probe_failed", group=self.group, error=str(exc))
            return False
        finally:
            if probe is not None:
                try:
                    probe.close()
                except Exception as exc:  # a probe that cannot close is dropped with its handle
                    log.debug("consumer.watchdog_probe_close_failed", error=str(exc))

    def _subscribed_partitions(self, client: Any) -> list[TopicPartition]:
        """Every partition of the subscribed topics, from ``client``'s metadata (a pattern is left out: its topics
        are not known without an assignment)."""
        parts: list[TopicPartition] = []
        for topic in self.session.topics:
            if topic.startswith("^"):
                continue
            meta = client.list_topics(topic, timeout=5).topics.get(topic)
            if meta is not None and meta.error is None:
                parts += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        return parts

    def _unassigned_reason(self, consumer: Any, _stuck: Sequence[S.TP] = ()) -> str | None:
        """A client without an assignment is stalled when its topics hold records beyond the group's committed
        offsets and those offsets have not moved since the watchdog's last look: nobody in the group consumes
        them. A member with nothing to do (more members than partitions) sees the others' offsets move, or none
        behind. The first look only notes the offsets, so this verdict takes two bounds.

        Asked through the consumer's own requests (metadata, ``committed()``, watermarks), never
        ``AdminClient.describe_consumer_groups``: librdkafka's coordinator admin requests can abort the whole
        process when a connection drops under them (librdkafka issue 4605, open in 2.16), and this check runs
        exactly when connections are failing (docs/architecture.md, "Coordinator admin requests")."""
        parts = self._subscribed_partitions(consumer)
        behind: dict[S.TP, int] = {}
        for tp in consumer.committed(parts, timeout=5) if parts else []:
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=2,
                                                       cached=False)
            if high > max(tp.offset, low):
                behind[(tp.topic, tp.partition)] = tp.offset
        seen, self._unassigned_seen = self._unassigned_seen, behind
        if not behind or seen is None or any(seen.get(tp) != offset for tp, offset in behind.items()):
            return None
        return (f"no assignment while the group consumes nothing: {len(behind)} partitions hold records beyond "
                "committed offsets that did not move")

    # -- dispatch ---------------------------------------------------------------------------------------

    def _dispatch(self, msgs: list[Any]) -> None:
        assert self.dispatcher is not None
        chunk = self.dispatcher.chunk_size(len(msgs), self.msg_cost)
        # A handler of a few microseconds is bound by the GIL: handing it to a worker only adds thread
        # switches. When nothing else is pending (so order cannot be overtaken) it runs right here.
        self._inline = (self._run_task if self._async_handler is None and self.msg_cost < FAST_HANDLER_S
                        and self._all_idle() else None)
        if any(map(_error, msgs)):  # errors are reported and dropped; they never cut a partition's run
            kept = []
            for m in msgs:
                if m.error() is not None:
                    self._on_error(m)
                else:
                    kept.append(m)
            msgs = kept
        if not msgs:
            return
        # Runs of consecutive messages of one partition, cut with C-level calls (map, count, compress): a Python
        # loop over the batch cost more than the handler loop itself. A batch of one partition (the common case
        # under load: librdkafka queues a fetch response's messages of a partition together) is one run as it is.
        parts = list(map(_partition, msgs))
        first = parts[0]
        n = len(parts)
        if parts.count(first) == n:
            runs: Any = ((first, msgs),)
        else:
            cuts = [0, *compress(range(1, n), map(ne, parts, islice(parts, 1, None))), n]
            runs = ((parts[start], msgs[start:end]) for start, end in pairwise(cuts))
        # A run's topic: the one topic the handle may deliver with that partition number (session.topic_of,
        # kept across rebalances and subscription changes until the handle closes), else asked of its messages.
        # Without that check a run of two topics' partition 0 (or a revoked topic's messages next to a new
        # one's) would land in one tracker: wrong offsets committed for one, none for the other.
        topic_of = self.session.topic_of
        for partition, run in runs:
            topic = topic_of.get(partition)
            if topic is not None:
                self._dispatch_run(topic, partition, run, chunk)
                continue
            topics = list(map(_topic, run))
            topic = topics[0]
            if topics.count(topic) == len(run):
                self._dispatch_run(topic, partition, run, chunk)
            else:  # one partition number of several topics in a row
                for topic, part in groupby(run, _topic):
                    self._dispatch_run(topic, partition, list(part), chunk)

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
        elif err.fatal() or err.code() == CKError._FATAL:  # a fenced static member arrives as a _FATAL event
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
        if not task.claim():
            if task.lane is not None:
                assert self.dispatcher is not None
                self.dispatcher.task_done(task)
            return False
        return True

    def _task_finished(self, task: Task, spent: float | None) -> None:
        """Count a task's messages (``spent``: handler seconds; None when cancelled) and release its lane."""
        if spent is not None:
            # moving average of the handler's cost per message (steers chunking); races only blur it
            self.msg_cost = 0.8 * self.msg_cost + 0.2 * spent / (task.count or 1)
            self.processed += task.count
        task.release()
        task.finished = True
        if task.lane is not None:
            assert self.dispatcher is not None
            self.dispatcher.task_done(task)
        if self._waiting:
            self._wake.set()
            if self._async_handler is None:  # a worker thread: hand the GIL to the waiting fetch thread now,
                time.sleep(0)  # not after the switch interval (the event loop must not stall on it)

    def _run_task(self, task: Task) -> None:
        """A worker thread's task: :meth:`_run` with the handler called plainly (the coroutine never suspends,
        so one ``send`` runs it to the end)."""
        handler = self._handler
        assert handler is not None
        try:
            self._run(task, handler, False).send(None)
        except StopIteration:
            return
        raise RuntimeError("the handler loop of a synchronous handler suspended")  # cannot happen

    async def _run_task_async(self, task: Task) -> None:
        """An ``async def`` handler's task, on the event loop (the :class:`AsyncPool`'s runner): :meth:`_run`
        awaiting each message in turn."""
        handler = self._async_handler
        assert handler is not None
        await self._run(task, handler, True)

    async def _run(self, task: Task, call: Callable[[Message], Any], awaits: bool) -> None:
        """The one handler loop, whichever way the handler is called (``awaits``: an ``async def`` handler) and
        timed (:meth:`ConsumerObserver.timing`: every message, one in a stride, or none). Failures go to the
        retry topics / DLQ; the handler's seconds (routing excluded) steer chunking."""
        if not self._task_started(task):
            return
        spent: float | None = None
        if not task.tracker.cancelled:
            msgs = task.msgs
            raws = msgs if task.raws is None else task.raws  # retry copies: the fetched messages behind the views
            observer = self.observer
            timing = None if observer is None else observer.timing(
                task.tracker.topic, self.group, self.msg_cost if task.raws is None else None)
            count = len(msgs)
            stride = timing.stride if timing is not None else count or 1
            clock = time.perf_counter
            now = clock()
            spent = 0.0
            errors = 0
            for first in range(0, count, stride):
                rest = first
                if timing is not None:  # the timed (and maybe traced) message of this stride
                    msg, raw = msgs[first], raws[first]
                    timing.consumed(raw, now)
                    began = clock()
                    try:
                        result = call(msg)
                        if awaits:
                            await result
                    except Exception as exc:
                        now = clock()
                        spent += now - began
                        errors += 1
                        timing.failed(raw, now - began, self._failed(task, msg, exc))
                        now = clock()  # routing may have waited for the retry producer's queue
                    else:
                        now = clock()
                        spent += now - began
                        timing.processed(raw, now - began)
                    rest = first + 1
                end = first + stride
                if rest < end and rest < count:  # the rest of the stride: untimed, one bare call each
                    untimed = iter(msgs if not rest and end >= count else msgs[rest:end])
                    routing = 0.0
                    while True:
                        try:  # the loop resumes after a failed message (the iterator keeps its place)
                            if awaits:
                                for msg in untimed:
                                    await call(msg)
                            else:
                                for msg in untimed:
                                    call(msg)
                            break
                        except Exception as exc:
                            errors += 1
                            routed_at = clock()
                            self._failed(task, msg, exc)
                            routing += clock() - routed_at
                    ended = clock()
                    spent += ended - now - routing
                    now = ended
            if timing is not None:
                timing.finish(count, spent, errors)
        self._task_finished(task, spent)

    def _all_idle(self) -> bool:
        # a tracker without tasks is idle without a call (the common case)
        return all(tracker.idle() for tracker in self.trackers.values() if tracker.tasks)

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
        paused = session.pauses
        for tp, tracker in self.trackers.items():
            if tracker.tasks:  # position() of an empty window changes nothing
                tracker.position()
            inflight = tracker.inflight
            if inflight >= limit:
                if not session.paused_for(tp, S.BACKPRESSURE):
                    session.pause([tp], S.BACKPRESSURE)
            elif paused and inflight <= limit // 2 and session.paused_for(tp, S.BACKPRESSURE):
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
