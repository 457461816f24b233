"""Spill and replay throughput: N messages of 100 bytes spilled to disk while the cluster is down, then
replayed into it when it comes up; every record read back and counted.

Starts its own durable cluster (two Tansu brokers on the S3 engine over a local S3 server) after the spill: the
cluster is "down" until then. Counts are strict: ``lost`` and ``duplicated`` 0, ``key_order`` each key's
records in send order. The peer
is raw ``diskcache.Cache.set``, one message per set, on the same disk in the same run: that is what a
spill costs when each message waits for its own commit. Spill figures (all through ``engine.produce``):

* ``spill_msgs_s``: one producing thread, the default ``ykafka.spill.commit=sync``: ``produce`` returns
  once its message is in the spill journal (survives SIGKILL); these are the messages then replayed;
* ``spill_sync_8t_msgs_s``: the same from 8 threads;
* ``spill_async_msgs_s``: one thread, ``ykafka.spill.commit=async`` (in memory until the writer's
  commit; ``produce`` blocks only beyond ``ykafka.spill.async.max.pending``);
* ``spill_fsync_1t_msgs_s`` / ``spill_fsync_8t_msgs_s``: ``sync`` with ``ykafka.spill.fsync=true``
  (``produce`` journals and returns; the writer's chunk commits are the group fsyncs), ``--fsync-messages``
  each.

``replay_msgs_s`` runs from the moment the cluster is seen UP to the last record acknowledged and
removed from the spill. ``journal_bytes_after_replay``: what the journal holds once all is replayed.

    python bench/spill_replay.py [--messages 100000] [--async-messages 100000] [--fsync-messages 100000] [--quick]

Last line: RESULT {"spill_msgs_s": ..., "replay_msgs_s": ..., "diskcache_set_s": ..., "lost": 0, ...}
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import diskcache  # noqa: E402

from tests.dr_fixtures import create_topic, in_key_order, make_engine, read_all, tally  # noqa: E402
from tests.support import Broker  # noqa: E402
from ykafka.dr.engine import RouteSpec  # noqa: E402
from ykafka.dr.health import ClusterState  # noqa: E402
from ykafka.logs import configure  # noqa: E402

PAD = 100


def value(i: int) -> bytes:
    head = f"{i}:".encode()
    return head + b"x" * (PAD - len(head))


def peer_diskcache(directory: Path, n: int) -> float:
    cache = diskcache.Cache(str(directory))
    start = time.perf_counter()
    for i in range(n):
        cache.set(i, value(i))
    rate = n / (time.perf_counter() - start)
    cache.close()
    return rate


def spill_rate(broker: Broker, directory: Path, topic: str, n: int, threads: int, durable: list[float] | None = None,
               **options: Any) -> float:
    """Messages per second through ``engine.produce`` into the spill of a DOWN cluster (never replayed);
    ``durable`` gets the rate up to the last record committed (with fsync: on stable storage)."""
    engine = make_engine({"solo": broker.bootstrap}, RouteSpec("solo"), directory, **options)
    engine.health.cluster("solo").force(ClusterState.DOWN, "bench: cluster not started")
    per = n // threads

    def spill(t: int) -> None:
        for i in range(per):
            engine.produce(topic, value(t * per + i), key=str(i % 100).encode())

    workers = [threading.Thread(target=spill, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    rate = per * threads / (time.perf_counter() - start)
    if durable is not None:
        engine.flush(60)  # every spilled message committed to the store (fsynced in fsync mode)
        durable.append(per * threads / (time.perf_counter() - start))
    engine.close()
    shutil.rmtree(directory, ignore_errors=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--async-messages", type=int, default=100_000)
    parser.add_argument("--fsync-messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 500 with fsync (the suite's check)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.async_messages, args.fsync_messages = 10_000, 10_000, 500
    configure("warning")
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-spill-"))
    # not started yet: down while we spill
    broker = Broker("bench", work / "logs", storage="durable", broker=args.broker)
    topic = "bench-spill"
    try:
        peer = peer_diskcache(work / "peer", min(n, 20_000))
        # side figures (separate spill dirs; never replayed)
        async_rate = spill_rate(broker, work / "async", topic, args.async_messages, 1, spill_commit="async")
        sync_8t = spill_rate(broker, work / "sync8", topic, n, 8, spill_commit="sync")
        fsync_durable: list[float] = []
        fsync_1t = spill_rate(broker, work / "fsync1", topic, args.fsync_messages, 1, fsync_durable,
                              spill_commit="sync", spill_fsync=True)
        fsync_8t = spill_rate(broker, work / "fsync8", topic, args.fsync_messages, 8, spill_commit="sync",
                              spill_fsync=True)

        # the headline: default (sync) spill from one thread, then replayed and counted
        engine = make_engine({"solo": broker.bootstrap}, RouteSpec("solo"), work / "spill", spill_commit="sync",
                             progress_interval_s=2.0)
        engine.health.cluster("solo").force(ClusterState.DOWN, "bench: cluster not started")
        acked = [0]

        def on_delivery(err: object, _msg: object) -> None:
            if err is None:
                acked[0] += 1

        start = time.perf_counter()
        for i in range(n):
            engine.produce(topic, value(i), key=str(i % 100).encode(), on_delivery=on_delivery)
        spill_s = time.perf_counter() - start  # each produce returned with its message in the journal
        engine.flush(60)  # every spilled message committed to the store too
        committed_s = time.perf_counter() - start
        spill_status = engine.status()["spill"]["solo"]
        depth = spill_status["depth"]

        broker.start()
        create_topic(broker.bootstrap, topic, 3, exact=False)  # the replay may have auto-created it
        up_at = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if up_at is None and engine.health.is_up("solo"):
                up_at = time.perf_counter()
            if up_at is not None and engine.status()["spill"]["solo"]["depth"] == 0:
                break
            time.sleep(0.005)
        replay_s = time.perf_counter() - (up_at or time.perf_counter())
        time.sleep(0.3)  # the writer's idle tick drops the spent journal segment
        status = engine.status()
        engine.close()
        records = read_all(broker.bootstrap, topic, expect=n)
        counts = tally(range(n), [int((m.value() or b"0:").split(b":")[0]) for m in records])
        result = {
            "messages": n,
            "spill_msgs_s": round(n / spill_s),
            "spill_committed_msgs_s": round(n / committed_s),
            "spill_sync_8t_msgs_s": round(sync_8t),
            "spill_async_msgs_s": round(async_rate),
            "spill_fsync_1t_msgs_s": round(fsync_1t),
            "spill_fsync_1t_durable_msgs_s": round(fsync_durable[0]),  # until the last group fsync
            "spill_fsync_8t_msgs_s": round(fsync_8t),
            "replay_msgs_s": round(n / replay_s) if replay_s > 0 else None,
            "diskcache_set_s": round(peer),
            "spill_vs_peer": round(n / spill_s / peer, 1),
            "spilled_depth": depth,
            "spill_commits": spill_status["commits"],
            "journal_bytes_after_replay": status["spill"]["solo"]["journal_bytes"],
            "callbacks_fired": acked[0],
            "replay_rounds": status["replay"]["solo"]["rounds"],
            "lost": counts["lost"],
            "duplicated": counts["duplicated"],
            "key_order": in_key_order(records),
            "storage": "durable",
        }
        print(f"spilled {n} in {spill_s:.2f}s (committed after {committed_s:.2f}s), replayed in {replay_s:.2f}s; "
              f"peer diskcache.set {peer:.0f}/s")
        print("RESULT " + json.dumps({**result, "broker": args.broker}))
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
