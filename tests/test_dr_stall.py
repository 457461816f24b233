"""The link's stall watch (ykafka.dr.stall): a partition holding messages with none acknowledged for
``spill.after.ms`` is a stall; an acknowledgement, or nothing held, is not. Pure logic over librdkafka statistics
documents, plus the settings it gives a direct client."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ykafka.dr.stall import StallWatch, backstop_timeout_ms, stats_interval_ms
from ykafka.observability import ChainedStats, merge_statistics


def _doc(ts_ms: int, parts: dict[str, tuple[int, int, int, int]], name: str = "rdkafka#producer-1") -> dict[str, Any]:
    """parts: partition -> (acked_msgid, msgq_cnt, xmit_msgq_cnt, msgs_inflight)"""
    return {"name": name, "ts": ts_ms * 1000, "topics": {"t": {"partitions": {
        p: {"acked_msgid": a, "msgq_cnt": q, "xmit_msgq_cnt": x, "msgs_inflight": f}
        for p, (a, q, x, f) in parts.items()}}}}


def test_a_partition_holding_messages_with_none_acknowledged_for_the_threshold_is_a_stall() -> None:
    stalls: list[str] = []
    watch = StallWatch("dc-a", 10_000, stalls.append)
    watch(json.dumps(_doc(0, {"0": (100, 0, 0, 0), "1": (100, 0, 0, 0)})))
    watch(json.dumps(_doc(1_000, {"0": (100, 40, 5, 5), "1": (150, 0, 0, 0)})))  # p0 holds 50
    for t in range(2_000, 11_000, 1_000):  # p0 acknowledges nothing more (new sends queue up); p1 keeps delivering
        watch(json.dumps(_doc(t, {"0": (100, 40 + t // 100, 5, 5), "1": (150 + t // 10, 0, 0, 0)})))
    assert stalls == []  # 9 s since p0 was first seen holding: not yet
    watch(json.dumps(_doc(11_000, {"0": (100, 190, 5, 5), "1": (1250, 0, 0, 0)})))
    assert len(stalls) == 1 and "t [0] holds 200 messages" in stalls[0] and "10000 ms" in stalls[0], stalls
    for t in range(12_000, 30_000, 1_000):
        watch(json.dumps(_doc(t, {"0": (100, 200, 5, 5)})))
    assert len(stalls) == 1  # once per client: the purge retires it, whatever it reports afterwards


def test_a_stalled_client_is_remembered_while_it_reports_and_forgotten_once_it_is_gone() -> None:
    watch = StallWatch("dc-a", 1_000, lambda _r: None)
    stalled = [watch.observe(_doc(t, {"0": (10, 10, 0, 0)}, name=f"retired-{n}"))
               for n in range(3) for t in (0, 1_500)]
    assert sum(r is not None for r in stalled) == 3
    # retired-0 still reports (its purge is under way) for 10 minutes: never a second stall, still remembered
    for t in range(2_000, 600_000, 10_000):
        assert watch.observe(_doc(t, {"0": (10, 10, 0, 0)}, name="retired-0")) is None
        watch.observe(_doc(t, {"0": (t, 1, 0, 0)}, name="live"))
    # retired-1 and -2 said nothing for 5 minutes: forgotten, as a closed client's partitions are
    assert sorted(watch._fired) == ["retired-0"]


def test_progress_nothing_held_or_the_unpartitioned_queue_is_no_stall() -> None:
    stalls: list[str] = []
    watch = StallWatch("dc-a", 2_000, stalls.append)
    for t in range(0, 20_000, 500):
        # p0 acknowledges every half second; p1 holds nothing; -1 (no metadata yet) holds for ever
        watch(json.dumps(_doc(t, {"0": (t, 900, 0, 1), "1": (7, 0, 0, 0), "-1": (0, 50, 0, 0)})))
    # counts that read 0 while messages wait (a built batch behind a stuck request) restart the clock only
    for t in range(20_000, 40_000, 500):
        watch(json.dumps(_doc(t, {"0": (20_000, 0 if t % 1_500 == 0 else 5, 0, 0)})))
    assert stalls == []


def test_two_clients_of_one_cluster_are_told_apart_by_name() -> None:
    watch = StallWatch("dc-a", 1_000, lambda _r: None)
    # client a delivers, client b does not: interleaved documents must not let a's progress hide b's stall
    found = []
    for t in range(0, 3_000, 250):
        found.append(watch.observe(_doc(t, {"0": (t, 1, 0, 0)}, name="a")))
        found.append(watch.observe(_doc(t, {"0": (10, 10, 0, 0)}, name="b")))
    reasons = [r for r in found if r]
    assert len(reasons) == 1 and "holds 10 messages" in reasons[0], reasons


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 50)), min_size=1, max_size=40))
def test_a_partition_acknowledging_between_any_two_documents_never_stalls(steps: list[tuple[int, int]]) -> None:
    watch = StallWatch("dc-a", 1_000, lambda _r: None)
    ts = 0
    for acked, (gap_s, held) in enumerate(steps, start=1):  # at least one acknowledgement between two documents
        ts += gap_s * 1000
        assert watch.observe(_doc(ts, {"0": (acked, held, 0, 1)})) is None


def test_a_watched_client_gets_a_backstop_timeout_and_the_watch_beside_the_metrics_and_the_applications() -> None:
    def app_cb(_s: str) -> None:
        return None

    def metrics_cb(_s: str) -> None:
        return None

    watch = StallWatch("dc-a", 10_000, lambda _r: None)
    props: dict[str, Any] = {"stats_cb": app_cb, "statistics.interval.ms": 5_000}
    merge_statistics(props, {"stats_cb": metrics_cb, "statistics.interval.ms": 10_000})
    merge_statistics(props, {"stats_cb": watch, "statistics.interval.ms": stats_interval_ms(10_000)})
    chained = props["stats_cb"]
    assert isinstance(chained, ChainedStats)
    assert chained.callbacks == ((watch, 10_000), (metrics_cb, 10_000), (app_cb, 5_000))  # one flat chain
    assert props["statistics.interval.ms"] == 5000
    assert backstop_timeout_ms(10_000) == 40_000 and backstop_timeout_ms(120_000) == 240_000
    assert stats_interval_ms(2_000) == 2_000 and stats_interval_ms(60_000) == 10_000 and stats_interval_ms(50) == 100


class _EventfulClient:
    """A librdkafka producer stand-in whose ``len()`` counts one pending event (a statistics document) and no
    message, as a real client's does between two polls once statistics are on (``pending=0``: one that holds
    nothing, its reports served)."""

    def __init__(self, pending: int = 1) -> None:
        self.produced: list[tuple[bytes, Any]] = []
        self.pending = pending

    def __len__(self) -> int:
        return self.pending

    def produce(self, topic: str, value: bytes, key: Any, partition: int, callback: Any, *_rest: Any) -> None:
        self.produced.append((value, callback))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def purge(self, **_kwargs: Any) -> None:
        return None

    def close(self) -> bool:
        return True


def test_a_statistics_event_in_the_links_own_client_does_not_pull_a_callers_sends_into_it() -> None:
    """The link keeps a caller's sends of a key behind messages re-routed into its own client until those are
    reported. It judged that by ``len()``, which counts events too: with the stall watch's statistics every second
    a caller's newer sends went into the link's own client while older ones of their key waited in the caller's,
    and a node killed under load then stored the two interleaved (three-node soak, ``kill+control``: 163 records
    overtaken)."""
    from ykafka.dr.health import ClusterHealth, HealthPolicy
    from ykafka.dr.link import ClusterLink, Outgoing

    own, callers = _EventfulClient(), _EventfulClient()
    health = ClusterHealth("c", {"bootstrap.servers": "127.0.0.1:1"}, HealthPolicy(probe_interval_s=3600))
    try:
        link = ClusterLink("c", lambda: own, health, None, lambda *_a: None)
        link.send(Outgoing("t", b"re-routed", b"k", -1, 0, None, None))  # no caller's client: the link's own
        assert [v for v, _cb in own.produced] == [b"re-routed"]
        assert link.direct_sender("t", callers) is None  # not reported yet: the caller's sends stay behind it
        link.send(Outgoing("t", b"newer", b"k", -1, 0, None, None), client=callers)
        assert [v for v, _cb in own.produced] == [b"re-routed", b"newer"] and not callers.produced
        for _value, callback in own.produced:
            callback(None, None)  # both delivered; the own client's len() still counts an event
        link.send(Outgoing("t", b"newest", b"k", -1, 0, None, None), client=callers)
        assert [v for v, _cb in callers.produced] == [b"newest"]
        assert link.direct_sender("t", callers) is not None
    finally:
        health.close()


def test_a_message_re_routed_into_the_links_own_client_stops_the_callers_direct_senders() -> None:
    """A caller holding a direct sender (built while the link's own client was empty) must drop it once a message is
    re-routed into that client, or its newer sends of the key go straight to the cluster ahead of the re-routed one.
    The 10-minute soak of seed 101 (2026-12-01) had one such record: re-routed from dc-b at a failback, it waited in
    dc-a's link client while the Producer's direct path stored a newer record of its key first (overtaken_direct 1).
    The link now tells its owner (``on_change``, which drops cached direct senders) at the first message into its own
    client while callers may send directly; not again while that client still holds one, and not when no caller
    sends directly."""
    from ykafka.dr.health import ClusterHealth, HealthPolicy
    from ykafka.dr.link import ClusterLink, Outgoing

    own, callers = _EventfulClient(), _EventfulClient()
    health = ClusterHealth("c", {"bootstrap.servers": "127.0.0.1:1"}, HealthPolicy(probe_interval_s=3600))
    changes: list[int] = []
    try:
        link = ClusterLink("c", lambda: own, health, None, lambda *_a: None)
        link.on_change = lambda: changes.append(len(own.produced))
        link.send(Outgoing("t", b"own-first", b"k", -1, 0, None, None))  # nobody sends directly yet: nothing to stop
        own.produced[0][1](None, None)  # reported: the own client is empty again
        assert changes == []
        assert link.direct_sender("t", callers) is not None  # the caller sends directly from here
        link.send(Outgoing("t", b"re-routed", b"k", -1, 0, None, None))
        assert changes == [1]  # told before the message went in
        assert link.direct_sender("t", callers) is None  # the caller's next sends come through send(), behind it
        link.send(Outgoing("t", b"re-routed-2", b"k", -1, 0, None, None))
        link.send(Outgoing("t", b"newer", b"k", -1, 0, None, None), client=callers)
        assert [v for v, _cb in own.produced] == [b"own-first", b"re-routed", b"re-routed-2", b"newer"]
        assert changes == [1] and not callers.produced
    finally:
        health.close()


def test_messages_given_back_count_as_outstanding_until_each_is_re_routed(monkeypatch: Any) -> None:
    """What a failed client gave back is outstanding until it is in the spill (or with the standby, or called back):
    ``flush`` and ``wait_idle`` wait on that count. The batch used to leave the list before it was counted, with a
    pass over it and a log line in between, and in that gap the link said 0: a standalone engine's ``wait_idle``
    returned True, the spill then filled with 7,783 records, and the test reading the topic back found 635 missing
    (tests/test_failover_chaos.py, fresh partitions, 2026-12-01). Measured at that log line: every message counts."""
    from confluent_kafka import KafkaError

    from ykafka.dr import link as link_module
    from ykafka.dr.health import ClusterHealth, HealthPolicy
    from ykafka.dr.link import ClusterLink, Outgoing

    own = _EventfulClient(pending=0)
    health = ClusterHealth("c", {"bootstrap.servers": "127.0.0.1:1"}, HealthPolicy(probe_interval_s=3600))
    rerouted: list[bytes] = []
    seen_at_log: list[int] = []
    try:
        link = ClusterLink("c", lambda: own, health, None, lambda _c, msg, _err: rerouted.append(msg.value))
        real_info = link_module.log.info

        def info(event: str, **kw: Any) -> None:
            if event == "cluster.rerouting":
                seen_at_log.append(link.outstanding())
            real_info(event, **kw)

        monkeypatch.setattr(link_module.log, "info", info)
        for i in range(5):
            link.send(Outgoing("t", f"m{i}".encode(), b"k", -1, 0, None, None))
        timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
        for _value, callback in own.produced:
            callback(timed_out, None)  # each comes back: the link takes its client out of service, to re-route
        assert link.outstanding() == 5
        link.poll(0)
    finally:
        health.close()
    assert seen_at_log == [5], seen_at_log
    assert rerouted == [b"m0", b"m1", b"m2", b"m3", b"m4"] and link.outstanding() == 0
