"""Resources and threads under change: live swaps and replay rounds leave no librdkafka client behind, and
delivery callbacks run only on the thread that calls ``poll()`` / ``flush()`` (issue 32 items 1 and 2).

Counted from the kernel: the process's threads (``/proc/self/task``) and open descriptors (``/proc/self/fd``).
Each librdkafka producer holds a handful of each, so a leaked client shows at once.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers import create_topic, unique, wait_until
from tests.sdk_fixtures import check_stream, read_topic
from ykafka import Producer
from ykafka.dr.engine import DisasterRecovery

#: a librdkafka producer costs 3-4 threads and ~5 descriptors here (100 swaps on the unfixed code: 21 -> 325
#: threads, 33 -> 538 descriptors); the slack allows for a client the engine opens meanwhile (a health probe)
THREAD_SLACK = 8
FD_SLACK = 10


def resources() -> tuple[int, int]:
    gc.collect()
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def settle(predicate: Any, timeout: float = 20.0) -> None:
    wait_until(predicate, timeout, message="the process's threads and descriptors to settle")


def _conf(bootstrap: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "cache"), "log_level": 0, **extra}


def test_live_swaps_leave_threads_and_descriptors_where_they_were(brokers: dict[str, str], tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("leak-swap")
    create_topic(bootstrap, topic, 1)
    ns = f"ykafka.topic.{topic}"
    delivered: list[Any] = []
    # not idempotent: a swapped-in idempotent client waits ~0.5 s for its producer id (librdkafka's timer)
    with Producer(_conf(bootstrap, tmp_path, **{"producer.idempotence": False})) as producer:
        assert producer.disaster_recovery is not None  # the default: every swap also passes the DR engine

        def swap(i: int) -> None:
            producer.runtime.hot.apply(ns, {"producer.linger.ms": str(i % 5 + 1)}, f"r{i}")
            producer.produce(topic, str(i).encode(), on_delivery=lambda err, m: delivered.append(err))
            assert producer.flush(10) == 0  # delivered: the next change swaps again (not merged into this one)

        for i in range(3):  # warm up: the engine's link, replayer and first clients exist
            swap(i)
        assert producer.flush(30) == 0
        settle(lambda: producer.poll(0.05) >= 0 and len(producer.clients()) == 1)
        threads0, fds0 = resources()
        for i in range(3, 103):
            swap(i)
        assert producer.flush(30) == 0
        assert producer.swaps >= 100
        settle(lambda: producer.poll(0.05) >= 0 and len(producer.clients()) == 1)
        with contextlib.suppress(AssertionError):  # measured below either way
            settle(lambda: producer.poll(0.05) >= 0 and resources()[0] <= threads0 + THREAD_SLACK
                   and resources()[1] <= fds0 + FD_SLACK, 15)
        threads1, fds1 = resources()
    print(f"100 swaps: threads {threads0} -> {threads1}, descriptors {fds0} -> {fds1}")
    assert delivered == [None] * 103
    assert threads1 <= threads0 + THREAD_SLACK, (threads0, threads1)
    assert fds1 <= fds0 + FD_SLACK, (fds0, fds1)
    records = read_topic(bootstrap, topic, 103)
    assert len(records) == 103


def _flap(engine: DisasterRecovery, cluster: str) -> None:
    """The link goes down (its clients purged and retired) and, the probe reaching the cluster, up again."""
    link = engine.link(cluster)
    link.mark_unavailable("test: flapping")
    assert not link.available


def _replayed(engine: DisasterRecovery, cluster: str, after_round: int | None) -> bool:
    """The spill is empty and no replay runs, and (unless None) a replay round after ``after_round`` ended."""
    status = engine.status()
    replay = status["replay"][cluster]
    return (after_round is None or replay["rounds"] > after_round) and status["spill"][cluster]["depth"] == 0 \
        and not replay["active"]


def test_replay_rounds_of_a_flapping_cluster_leave_no_client_behind(brokers: dict[str, str], tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("leak-replay")
    create_topic(bootstrap, topic, 1)
    delivered: list[Any] = []
    with Producer(_conf(bootstrap, tmp_path)) as producer:
        engine = producer.disaster_recovery
        assert engine is not None
        cluster = producer.route(topic)
        sent = 0
        spilled_rounds = 0

        def round_trip(rounds: int) -> None:
            nonlocal sent, spilled_rounds
            for _ in range(rounds):
                replayer_rounds = engine.status()["replay"].get(cluster, {}).get("rounds", 0)
                spilled = engine.status()["spill"][cluster]["spilled"]
                _flap(engine, cluster)
                for _ in range(5):  # the link is down: these spill to disk
                    producer.produce(topic, f"k:{sent}".encode(), on_delivery=lambda err, m: delivered.append(err))
                    sent += 1
                producer.flush(30)
                # the probe may find the cluster up before the first of the five is sent: then all went direct,
                # nothing spilled and no replay round comes (stop 52's CI waited 30 s for one; passed rerun)
                spilled_now = engine.status()["spill"][cluster]["spilled"] > spilled
                spilled_rounds += spilled_now
                wait_until(functools.partial(_replayed, engine, cluster, replayer_rounds if spilled_now else None), 30,
                           message="the spill replayed")
                wait_until(lambda: engine.link(cluster).available, 30, message="the link back up")

        round_trip(2)
        settle(lambda: producer.poll(0.05) >= 0 and len(delivered) == sent)
        threads0, fds0 = resources()
        round_trip(20)
        settle(lambda: producer.poll(0.05) >= 0 and len(delivered) == sent)
        with contextlib.suppress(AssertionError):  # measured below either way
            settle(lambda: producer.poll(0.05) >= 0 and resources()[0] <= threads0 + THREAD_SLACK
                   and resources()[1] <= fds0 + FD_SLACK, 15)
        threads1, fds1 = resources()
        print(f"20 replay rounds: threads {threads0} -> {threads1}, descriptors {fds0} -> {fds1}")
        replayed = engine.status()["replay"][cluster]["replayed"]
    # every round that spilled replayed (each waited for its replay round above), nearly all 110 through the spill:
    # the link probes at once when it goes down, so a send the test thread makes after that probe answered goes
    # direct (106 of 110 on both attempts of one CI run on 2 loaded cores; a whole round of five, rarely); what this
    # test holds is no client left behind, over rounds most of which really replayed
    assert 15 <= spilled_rounds <= replayed <= sent, (spilled_rounds, replayed, sent)
    assert delivered == [None] * sent
    assert threads1 <= threads0 + THREAD_SLACK, (threads0, threads1)
    assert fds1 <= fds0 + FD_SLACK, (fds0, fds1)
    records = read_topic(bootstrap, topic, sent)
    assert check_stream(records, sent)["lost"] == 0


def test_callbacks_of_an_outage_and_its_replay_run_on_the_polling_thread(brokers: dict[str, str],
                                                                         tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("cb-thread")
    create_topic(bootstrap, topic, 1)
    me = threading.get_ident()
    threads: list[tuple[int, str]] = []
    errors: list[Any] = []

    def callback(err: Any, msg: Any) -> None:
        threads.append((threading.get_ident(), threading.current_thread().name))
        errors.append(err)

    sent = 0
    with Producer(_conf(bootstrap, tmp_path, **{"producer.linger.ms": 50})) as producer:
        engine = producer.disaster_recovery
        assert engine is not None
        cluster = producer.route(topic)
        for _round in range(3):
            for _ in range(200):  # in the client's queue (linger) when the link goes down: purged, re-routed
                producer.produce(topic, f"k:{sent}".encode(), on_delivery=callback)
                sent += 1
            _flap(engine, cluster)
            for _ in range(200):  # spilled while the link is down, replayed by the replayer's thread
                producer.produce(topic, f"k:{sent}".encode(), on_delivery=callback)
                sent += 1
            deadline = time.monotonic() + 30
            while len(threads) < sent and time.monotonic() < deadline:
                producer.poll(0.05)
            assert producer.flush(10) == 0
        assert engine.status()["replay"][cluster]["replayed"] > 0
        assert engine.status()["links"][cluster]["spilled"] > 0
    assert len(threads) == sent
    assert errors == [None] * sent
    foreign = {name for ident, name in threads if ident != me}
    assert not foreign, f"callbacks ran on {foreign}"
    assert check_stream(read_topic(bootstrap, topic, sent), sent)["lost"] == 0
