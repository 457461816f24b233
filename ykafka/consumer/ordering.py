"""Dispatch of fetched messages to the worker pool under an ordering mode.

* ``none``: any worker, any order; a partition's run is cut into chunks so every worker gets work.
* ``partition``: one task of a partition at a time (the seed-002 "single-thread executor per partition"),
  but on the shared pool, so idle partitions hold no thread.
* ``key``: messages with the same key never run concurrently and keep their order; different keys of
  one partition run in parallel. Messages without a key carry no constraint.

Serial execution uses *lanes*: a lane has at most one task on the pool; the rest wait in the lane and the
worker that finishes one task queues the next one at the back of the pool (fair to other lanes).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from ykafka.consumer.offsets import PartitionTracker, Task
from ykafka.consumer.pool import Pool

Ordering = Literal["none", "partition", "key"]
ORDERINGS: tuple[Ordering, ...] = ("none", "partition", "key")
FAST_HANDLER_S = 20e-6  # below this per message, a handler gains nothing from more threads
_PARTITION_LANE = object()  # lane key of the single lane a partition has in "partition" mode


class Lane:
    __slots__ = ("key", "waiting", "active")

    def __init__(self, key: Any) -> None:
        self.key = key
        self.waiting: deque[Task] = deque()
        self.active = False


class Dispatcher:
    """Cuts fetched runs into tasks, registers them with their tracker and submits them to the pool."""

    def __init__(self, pool: Pool, ordering: Ordering, max_chunk: int = 256) -> None:
        self.pool = pool
        self.ordering: Ordering = ordering
        self.max_chunk = max_chunk
        self._lock = threading.Lock()

    def chunk_size(self, batch_len: int, msg_cost_s: float = 1.0) -> int:
        """Chunk length for ``none`` / ``partition``: enough tasks for every worker, few enough to be cheap.

        A handler that takes only microseconds is bound by the GIL, not by waiting, so spreading it over
        workers buys nothing and costs thread hand-offs: such runs go out whole.
        """
        if msg_cost_s < FAST_HANDLER_S:
            return max(batch_len, 1)
        per_worker = batch_len // (2 * self.pool.size) or 1
        return min(per_worker, self.max_chunk)

    def dispatch_run(self, tracker: PartitionTracker, msgs: list[Any], chunk: int,
                     views: list[Any] | None = None, inline: Callable[[Task], None] | None = None) -> None:
        """Dispatch one run of consecutive messages of a partition (``views`` replace them for the handler).

        ``inline`` runs the run as one task on the calling thread instead; the caller only does so when no
        earlier work is pending, so offset order (hence every ordering guarantee) holds trivially.
        """
        handed = views if views is not None else msgs
        if inline is not None:
            task = tracker.add(handed, msgs[0].offset(), msgs[-1].offset())
            if views is not None:
                task.raws = msgs
            inline(task)
            return
        ordering = self.ordering
        if ordering == "key":
            self._dispatch_keys(tracker, msgs, views)
            return
        n = len(msgs)
        submit = self.pool.submit
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            whole = not start and end >= n
            task = tracker.add(handed if whole else handed[start:end], msgs[start].offset(), msgs[end - 1].offset())
            if views is not None:
                task.raws = msgs if whole else msgs[start:end]
            if ordering == "none":
                submit(task)
            else:
                self._to_lane(tracker, _PARTITION_LANE, task)

    def _dispatch_keys(self, tracker: PartitionTracker, msgs: list[Any], views: list[Any] | None) -> None:
        # Grouped by key are the fetched messages; views (retry copies) replace them per task afterwards.
        groups: dict[Any, tuple[list[Any], int, int]] = {}
        free: list[Any] = []
        for raw in msgs:
            key = raw.key()
            if key is None:
                free.append(raw)
                continue
            offset = raw.offset()
            group = groups.get(key)
            if group is None:
                groups[key] = ([raw], offset, offset)
            else:
                group[0].append(raw)
                groups[key] = (group[0], group[1], offset)
        # Tasks must enter the tracker in order of their first offset.
        entries: list[tuple[int, Any, list[Any], int]] = [(first, key, items, last)
                                                         for key, (items, first, last) in groups.items()]
        entries.extend((raw.offset(), None, [raw], raw.offset()) for raw in free)
        if free:
            entries.sort(key=lambda entry: entry[0])
        by_raw = None if views is None else {id(raw): view for raw, view in zip(msgs, views, strict=True)}
        for first, key, items, last in entries:
            if by_raw is None:
                task = tracker.add(items, first, last)
            else:
                task = tracker.add([by_raw[id(raw)] for raw in items], first, last)
                task.raws = items
            if key is None:
                self.pool.submit(task)
            else:
                self._to_lane(tracker, key, task)

    def _to_lane(self, tracker: PartitionTracker, key: Any, task: Task) -> None:
        with self._lock:
            lane = tracker.lanes.get(key)
            if lane is None:
                lane = tracker.lanes[key] = Lane(key)
            task.lane = lane
            if lane.active:
                lane.waiting.append(task)
                return
            lane.active = True
        self.pool.submit(task)

    def task_done(self, task: Task) -> None:
        """Called by the worker after a laned task: start the lane's next task, or retire the lane."""
        lane = task.lane
        if not isinstance(lane, Lane):
            return
        with self._lock:
            nxt: Task | None = lane.waiting.popleft() if lane.waiting else None
            if nxt is None:
                lane.active = False
                key = lane.key
                lanes = task.tracker.lanes
                if key is not _PARTITION_LANE and lanes.get(key) is lane:
                    del lanes[key]
        if nxt is not None:
            self.pool.submit(nxt)
