"""Contiguous-completion offset tracking: commit only up to the lowest offset not yet finished.

Work is handed to workers in :class:`Task` units (a run of one partition's messages, or one key's
messages of a run). Tasks of a partition enter its :class:`PartitionTracker` in offset order; the commit
position is the first offset of the oldest task that is not complete, so a crash or rebalance
re-delivers unfinished work and never skips it. Only the fetch thread touches a tracker; workers only
flip flags on their task, which keeps the hot path free of locks.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

# A worker taking a task and a revoke giving it up decide together: without the lock a worker could see the task
# not given up while the revoke saw it not started, so a message was both handled here and left to the next owner
# (handled twice; seen under load in the rebalance test)
_CLAIM = threading.Lock()
_NONE: list[Any] = []  # a released task's messages (never appended to)


class Ack:
    """A retry / DLQ copy that the broker has not yet acknowledged; pins the commit until it is."""

    __slots__ = ("acked",)

    def __init__(self) -> None:
        self.acked = False


class Task:
    """Messages of one partition that one worker processes in order.

    ``msgs`` is what the handler receives (for retry topics: views carrying the original coordinates);
    ``raws`` the fetched messages behind such views (None when ``msgs`` are the fetched ones: the trace
    names where a retry copy was read); ``first`` / ``last`` are the offsets in the partition the messages
    were fetched from.
    """

    __slots__ = ("tracker", "msgs", "count", "first", "last", "finished", "acks", "lane", "started", "skipped", "raws")

    def __init__(self, tracker: PartitionTracker, msgs: list[Any], first: int, last: int) -> None:
        self.tracker = tracker
        self.msgs = msgs
        self.count = len(msgs)  # kept when a finished task lets its messages go (:meth:`release`)
        self.first = first
        self.last = last
        self.finished = False
        self.acks: list[Ack] | None = None
        self.lane: Any = None
        self.started = False  # a worker took it
        self.skipped = False  # given up before it started (partition revoked): redelivered, never done here
        self.raws: list[Any] | None = None

    def release(self) -> None:
        """Let go of the messages once the handler is done with them. A finished task stays in its tracker's
        window until the commit position passes it (behind a slower task of its partition, for as long as that
        one runs); holding its batch meanwhile kept up to twice the fetched messages alive, and CPython's cyclic
        GC, which runs whenever live container objects grow by 700, then traversed them every batch (~200
        instructions a message in ``Consumer.run``: docs/benchmarks.md)."""
        self.msgs = _NONE
        self.raws = None

    def claim(self) -> bool:
        """Mark the task started by a worker; False when a revoke gave it up first (the next owner handles it)."""
        with _CLAIM:
            if self.skipped:
                return False
            self.started = True
            return True

    def add_ack(self) -> Ack:
        ack = Ack()
        if self.acks is None:
            self.acks = [ack]
        else:
            self.acks.append(ack)
        return ack

    def complete(self) -> bool:
        if not self.finished:
            return False
        acks = self.acks
        return acks is None or all(ack.acked for ack in acks)


class PartitionTracker:
    """In-flight window of one partition: dispatched tasks in offset order and the commit position."""

    __slots__ = ("topic", "partition", "tasks", "inflight", "next_offset", "committed", "cancelled", "lanes",
                 "is_retry")

    def __init__(self, topic: str, partition: int, is_retry: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.tasks: deque[Task] = deque()
        self.inflight = 0  # messages between the commit position and the last dispatched offset
        self.next_offset: int | None = None  # last dispatched offset + 1
        self.committed: int | None = None  # last position handed to commit()
        self.cancelled = False  # partition revoked / lost: queued work of it is skipped
        self.lanes: dict[Any, Any] = {}  # ordering lanes (per partition or per key) owned by the dispatcher
        self.is_retry = is_retry

    def add(self, msgs: list[Any], first: int, last: int) -> Task:
        task = Task(self, msgs, first, last)
        self.tasks.append(task)
        self.inflight += task.count
        nxt = self.next_offset
        if nxt is None or last >= nxt:
            self.next_offset = last + 1
        return task

    def position(self) -> int | None:
        """Offset to commit: first offset of the oldest incomplete task, else last dispatched + 1."""
        tasks = self.tasks
        while tasks and tasks[0].complete():
            done = tasks.popleft()
            self.inflight -= done.count
        if tasks:
            return tasks[0].first
        return self.next_offset

    def idle(self) -> bool:
        """No dispatched work of this partition is still unfinished or unacknowledged."""
        self.position()
        return not self.tasks

    def skip_unstarted_tail(self) -> int:
        """Give up the tasks at the end of the window that no worker started yet; returns how many.

        A task is given up only if every task before it ends below its first offset (key tasks interleave),
        so all that runs here stays below the commit position: nothing handled is handled again by the
        next owner, and everything given up is past the position.
        """
        tasks = list(self.tasks)
        prefix_last: list[int] = []
        highest = -1
        for task in tasks:
            prefix_last.append(highest)
            highest = max(highest, task.last)
        skipped = 0
        with _CLAIM:
            for index in range(len(tasks) - 1, -1, -1):
                task = tasks[index]
                if task.started or task.finished or task.first <= prefix_last[index]:
                    break
                task.skipped = True
                skipped += 1
        return skipped

    def settled(self) -> bool:
        """Every task is complete or skipped: nothing more will happen to this window."""
        self.position()
        return all(task.skipped or task.complete() for task in self.tasks)

    def pending_commit(self) -> int | None:
        """The position if it moved since the last commit, else None."""
        pos = self.position()
        if pos is None or pos == self.committed:
            return None
        return pos
