"""Spill and replay throughput: N messages of 100 bytes spilled to disk while the cluster is down, then
replayed into it when it comes up; every record read back and counted.

Starts its own Tansu broker on a free port (after the spill: the cluster is "down" until then). The peer
is raw ``diskcache.Cache.set``, one message per set, on the same disk in the same run: that is what a
spill costs without group commit. Spill figures:

* ``spill_msgs_s``: one producing thread, ``ykafka.spill.commit=async`` (commits grouped by the writer,
  produce blocks only beyond ``ykafka.spill.async.max.pending``);
* ``spill_sync_1t_msgs_s`` / ``spill_sync_8t_msgs_s``: ``sync`` commit (produce returns once its message is
  on disk) from 1 and 8 threads: concurrent callers share a commit.

``replay_msgs_s`` runs from the moment the cluster is seen UP to the last record acknowledged and
removed from the spill.

    python bench/spill_replay.py [--messages 100000]

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import diskcache  # noqa: E402

from tests.dr_fixtures import Broker, create_topic, make_engine, read_all, tally  # noqa: E402
from ykafka.failover import RouteSpec  # noqa: E402
from ykafka.health import ClusterState  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sync-messages", type=int, default=10_000)
    args = parser.parse_args()
    configure("warning")
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-spill-"))
    broker = Broker("bench", work / "logs")  # not started yet: the cluster is down while we spill
    topic = "bench-spill"
    try:
        peer = peer_diskcache(work / "peer", min(n, 20_000))

        # sync spill figures (separate spill dirs, smaller counts; never replayed)
        sync_rates: dict[int, float] = {}
        for threads in (1, 8):
            engine = make_engine({"solo": broker.bootstrap}, RouteSpec("solo"), work / f"sync{threads}",
                                 spill_commit="sync")
            engine.health.cluster("solo").force(ClusterState.DOWN, "bench: cluster not started")
            per = args.sync_messages // threads

            def spill(t: int, engine: object = engine, per: int = per) -> None:
                for i in range(per):
                    engine.produce(topic, value(t * per + i), key=str(i % 100).encode())  # type: ignore[attr-defined]

            workers = [threading.Thread(target=spill, args=(t,)) for t in range(threads)]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            sync_rates[threads] = per * threads / (time.perf_counter() - start)
            engine.close()
            shutil.rmtree(work / f"sync{threads}", ignore_errors=True)

        engine = make_engine({"solo": broker.bootstrap}, RouteSpec("solo"), work / "spill", spill_commit="async",
                             progress_interval_s=2.0)
        engine.health.cluster("solo").force(ClusterState.DOWN, "bench: cluster not started")
        acked = [0]

        def on_delivery(err: object, _msg: object) -> None:
            if err is None:
                acked[0] += 1

        start = time.perf_counter()
        for i in range(n):
            engine.produce(topic, value(i), key=str(i % 100).encode(), on_delivery=on_delivery)
        engine.flush(60)  # every spilled message committed
        spill_s = time.perf_counter() - start
        depth = engine.status()["spill"]["solo"]["depth"]

        broker.start()
        create_topic(broker.bootstrap, topic, 3)
        up_at = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if up_at is None and engine.health.is_up("solo"):
                up_at = time.perf_counter()
            if up_at is not None and engine.status()["spill"]["solo"]["depth"] == 0:
                break
            time.sleep(0.005)
        replay_s = time.perf_counter() - (up_at or time.perf_counter())
        status = engine.status()
        engine.close()
        records = read_all(broker.bootstrap, topic, expect=n)
        counts = tally(range(n), [int((m.value() or b"0:").split(b":")[0]) for m in records])
        result = {
            "messages": n,
            "spill_msgs_s": round(n / spill_s),
            "spill_sync_1t_msgs_s": round(sync_rates[1]),
            "spill_sync_8t_msgs_s": round(sync_rates[8]),
            "replay_msgs_s": round(n / replay_s) if replay_s > 0 else None,
            "diskcache_set_s": round(peer),
            "spill_vs_peer": round(n / spill_s / peer, 1),
            "spilled_depth": depth,
            "callbacks_fired": acked[0],
            "replay_rounds": status["replay"]["solo"]["rounds"],
            "lost": counts["lost"],
            "duplicated": counts["duplicated"],
        }
        print(f"spilled {n} in {spill_s:.2f}s, replayed in {replay_s:.2f}s; peer diskcache.set {peer:.0f}/s")
        print("RESULT " + json.dumps(result))
    finally:
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
