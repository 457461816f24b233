"""Memory: RSS of a ykafka Producer / Consumer with defaults versus raw confluent-kafka, and RSS while
1,000,000 messages sit in the disk spill.

Every figure comes from its own child process (RSS is per process), all in the same run against the same
stack (a Tansu broker, the config service and the MetaServer on free ports, stopped by pid at the end):

* ``baseline``: the interpreter with confluent-kafka and ykafka imported, no client;
* ``raw_producer`` / ``ykafka_producer``: one client with defaults after 1,000 acknowledged sends;
* ``raw_consumer`` / ``ykafka_consumer``: one client subscribed, after its first poll returned a message;
* ``spill``: the DR engine with its cluster DOWN, RSS idle and after ``--spill`` messages of 100 B went
  into the spill (target: at most 100 MB above idle for 1,000,000).

    python bench/capacity_memory.py [--spill 1000000] [--quick]

Last line: RESULT {"ykafka_producer_mb": ..., "raw_producer_mb": ..., "spill_growth_mb": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPILL_TARGET_MB = 100


def rss_mb() -> float:
    """Resident set size of this process, MiB (from /proc: what the kernel charges it now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# --- child side: one measurement per process ------------------------------------------------------------

def child_client(mode: str, conf: dict[str, Any], topic: str) -> dict[str, Any]:
    import confluent_kafka

    import ykafka
    from ykafka.logs import configure

    configure("warning")
    if mode == "baseline":
        return {"rss_mb": rss_mb()}
    if mode.endswith("producer"):
        producer: Any = (confluent_kafka.Producer(conf) if mode == "raw_producer" else ykafka.Producer(conf))
        for i in range(1000):
            producer.produce(topic, b"x" * 100, key=str(i).encode())
            producer.poll(0)
        left = producer.flush(30)
        if left:
            raise RuntimeError(f"{left} messages not acknowledged")
        rss = rss_mb()
        producer.close() if mode == "ykafka_producer" else None
        return {"rss_mb": rss}
    consumer: Any = (confluent_kafka.Consumer(conf) if mode == "raw_consumer" else ykafka.Consumer(conf))
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while True:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("consumer got no message within 30 s")
    rss = rss_mb()
    consumer.close()
    return {"rss_mb": rss}


def child_spill(directory: Path, messages: int) -> dict[str, Any]:
    from tests.dr_fixtures import make_engine
    from ykafka.dr.engine import RouteSpec
    from ykafka.dr.health import ClusterState
    from ykafka.logs import configure

    configure("warning")
    engine = make_engine({"solo": "127.0.0.1:9"}, RouteSpec("solo"), directory, spill_commit="sync")
    engine.health.cluster("solo").force(ClusterState.DOWN, "bench: cluster down")
    payload = b"x" * 96
    engine.produce("bench-spill", b"warm" + payload, key=b"0")
    idle = rss_mb()
    start = time.perf_counter()
    for i in range(messages):
        engine.produce("bench-spill", b"%08d" % i + payload, key=str(i % 100).encode())
    elapsed = time.perf_counter() - start
    full = rss_mb()
    disk = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    engine.close()
    return {"idle_mb": idle, "full_mb": full, "messages": messages, "spill_msgs_s": messages / elapsed,
            "disk_mb": disk / 2**20}


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- parent side -------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spill", type=int, default=1_000_000, help="messages held in the spill")
    parser.add_argument("--quick", action="store_true", help="100,000 messages in the spill")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode = args.child[0]
        if mode == "spill":
            result = child_spill(Path(args.child[1]), int(args.child[2]))
        else:
            result = child_client(mode, json.loads(args.child[1]), args.child[2])
        print(json.dumps(result))
        return

    from tests.support import local_stack
    from ykafka.logs import configure

    configure("warning")
    spill_n = 100_000 if args.quick else args.spill
    result: dict[str, Any] = {}
    with local_stack(["dc-a", "control"]) as bench:
        topic = f"bench-mem-{uuid.uuid4().hex[:6]}"
        raw_p = {"bootstrap.servers": bench.bootstrap()}
        result["baseline_mb"] = run_child("baseline", "{}", topic)["rss_mb"]
        for mode, conf in (("raw_producer", raw_p), ("ykafka_producer", bench.client_config())):
            result[f"{mode}_mb"] = run_child(mode, json.dumps(conf), topic)["rss_mb"]
        consumer = {"group.id": f"bench-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        for mode, conf in (("raw_consumer", {**raw_p, **consumer}),
                           ("ykafka_consumer", bench.client_config(**consumer))):
            result[f"{mode}_mb"] = run_child(mode, json.dumps(conf), topic)["rss_mb"]
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-mem-"))
    try:
        spill = run_child("spill", str(work / "spill"), str(spill_n))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update({k: round(v, 1) for k, v in result.items()})
    result["producer_ratio"] = round(result["ykafka_producer_mb"] / result["raw_producer_mb"], 2)
    result["consumer_ratio"] = round(result["ykafka_consumer_mb"] / result["raw_consumer_mb"], 2)
    result["spill_messages"] = spill_n
    result["spill_idle_mb"] = round(spill["idle_mb"], 1)
    result["spill_growth_mb"] = round(spill["full_mb"] - spill["idle_mb"], 1)
    result["spill_disk_mb"] = round(spill["disk_mb"], 1)
    result["spill_msgs_s"] = round(spill["spill_msgs_s"])
    result["spill_target_mb"] = SPILL_TARGET_MB
    result["spill_within_target"] = result["spill_growth_mb"] <= SPILL_TARGET_MB
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
