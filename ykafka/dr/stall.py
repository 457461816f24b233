"""The link's own stall detection: ``spill.after.ms`` without librdkafka's per-message timeout.

A cluster that stops acknowledging must give its messages back to the link (spill, or the standby) after
``spill.after.ms``. librdkafka's ``message.timeout.ms`` did that one message at a time, and an idempotent
producer then bumps its epoch and goes on: the next messages of a partition are sent with new sequence
numbers to the partition's new leader and stored, while the older ones, timed out, wait in the spill behind
them. A three-node soak (issue 38, a node SIGSTOPped longer than ``spill.after.ms`` and shorter than Kafka's
fencing plus the client's request timeout) stored 3,132 direct records behind newer records of their key
that way (docs/reliability.md).

So the direct clients get a per-message timeout well past ``spill.after.ms`` (a backstop for a client whose
owner never polls), and :class:`StallWatch` watches their statistics instead: a partition holding messages
(queued, in transmission or in flight) whose last acknowledged message has not moved for ``spill.after.ms``
is a stalled cluster, and the link purges the whole client at once
(:meth:`ykafka.dr.link.ClusterLink.stalled`). Nothing timed out inside librdkafka, so no epoch was bumped and
no newer message of the partition can have been stored before the older ones: the purge gives every message
back in produce order. It costs nothing per message: librdkafka counts, and one statistics document per
``spill.after.ms`` (at most every 10 s, the metrics' cadence) is read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: a client that reported nothing this long is gone (closed, retired): its partitions are forgotten
FORGET_AFTER_US = 300 * 1_000_000


def stats_interval_ms(stall_ms: int) -> int:
    """One document per ``stall_ms``, at most the metrics' 10 s: a stall is seen within two of them. Not more
    often: a statistics event counts in the client's ``len()`` until its owner polls, and callers that wait for
    ``len()`` to reach 0 without polling (``DisasterRecovery.wait_idle``) never saw it at one a second."""
    return max(100, min(10_000, stall_ms))


def backstop_timeout_ms(stall_ms: int) -> int:
    """librdkafka's ``message.timeout.ms`` for a watched client: only reached when its statistics are never
    served (its owner never polls), long after the watch would have purged it."""
    return stall_ms + max(stall_ms, 30_000)


class StallWatch:
    """A librdkafka ``stats_cb`` that calls ``on_stall(reason)`` when a partition of a client holds messages
    and none of them was done for ``stall_ms``. One object per cluster and threshold (it is part of the
    clients' settings, so it must compare equal across resolutions); clients are told apart by their
    statistics' ``name``."""

    def __init__(self, cluster: str, stall_ms: int, on_stall: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.stall_ms = int(stall_ms)
        self.on_stall = on_stall
        self._lock = threading.Lock()
        #: client name -> (its last document's ts, {(topic, partition): (last acknowledged msgid, since, in us)})
        self._clients: dict[str, tuple[int, dict[tuple[str, str], tuple[int, int]]]] = {}
        #: clients whose stall was reported (one report each: the purge retires them) -> their last document's ts;
        #: forgotten like any client once they report nothing for :data:`FORGET_AFTER_US` (closed), so a
        #: long-lived process on a flapping cluster does not keep one name per stall for ever
        self._fired: dict[str, int] = {}
        self.stalls = 0

    def __call__(self, stats_json: str) -> None:
        try:
            reason = self.observe(json.loads(stats_json))
        except Exception as exc:  # never raise into librdkafka's callback
            log.warning("cluster.stall_watch_error", cluster=self.cluster, error=str(exc))
            return
        if reason is not None:
            self.stalls += 1
            log.warning("cluster.stalled", cluster=self.cluster, reason=reason)
            self.on_stall(reason)

    def observe(self, doc: Mapping[str, Any]) -> str | None:
        """Take one statistics document; the stall it shows (the longest-waiting partition), else None.

        A partition holds messages while any sit in its queues or in a request in flight (librdkafka's counts
        leave out batches built and waiting for the connection, so they can read 0 while messages wait: that
        only restarts the clock, never calls a stall early); it made progress when its last acknowledged message
        id (``acked_msgid``, kept by the idempotent producer, the only kind watched) moved."""
        name = str(doc.get("name", ""))
        now = int(doc.get("ts", 0))
        stall_us = self.stall_ms * 1000
        worst: tuple[int, str, str, int] | None = None
        with self._lock:
            if name in self._fired:  # purged and retired at its stall: what it still reports is not news
                self._fired[name] = now
                return None
            _last, previous = self._clients.get(name, (now, {}))
            current: dict[tuple[str, str], tuple[int, int]] = {}
            for topic, tdoc in (doc.get("topics") or {}).items():
                for partition, pdoc in (tdoc.get("partitions") or {}).items():
                    if partition == "-1":  # not partitioned yet (no metadata): the cluster's probe judges that
                        continue
                    held = int(pdoc.get("msgq_cnt", 0)) + int(pdoc.get("xmit_msgq_cnt", 0)) \
                        + int(pdoc.get("msgs_inflight", 0))
                    if held <= 0:
                        continue
                    acked = int(pdoc.get("acked_msgid", 0))
                    seen = previous.get((topic, partition))
                    since = seen[1] if seen is not None and seen[0] == acked else now
                    current[(topic, partition)] = (acked, since)
                    if now - since >= stall_us and (worst is None or now - since > worst[0]):
                        worst = (now - since, topic, partition, held)
            self._clients[name] = (now, current)
            for other, (ts, _parts) in list(self._clients.items()):
                if now - ts > FORGET_AFTER_US:
                    del self._clients[other]
            for other, ts in list(self._fired.items()):
                if now - ts > FORGET_AFTER_US:
                    del self._fired[other]
            if worst is not None:
                self._fired[name] = now
                self._clients.pop(name, None)
        if worst is None:
            return None
        waited_us, topic, partition, held = worst
        return (f"stalled: {topic} [{partition}] holds {held} messages and acknowledged none for "
                f"{waited_us // 1000} ms (spill.after.ms {self.stall_ms})")
