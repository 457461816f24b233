"""Dual-DC failover under load on durable clusters: the primary (dc-a) is SIGKILLed while a thread produces,
then restarted.

Starts two durable clusters (two Tansu brokers each on the S3 engine over a local S3 server; dc-a primary, dc-b
standby, ``route.failover=auto``). A thread produces at a steady rate; every dc-a broker is SIGKILLed, later
restarted on the same addresses and bucket (what it acknowledged is still there).

* ``failover_s``: from the kill to the first message acknowledged by the standby;
* ``failback_s``: from the restart to the first message acknowledged by the primary again; of which
  ``primary_start_s`` is the brokers' own start (until they answer on their ports) and ``failback_after_start_s``
  the engine's part (health probe, route back, first acknowledgement);
* ``handover_ms``: how long the first send to dc-b waited until what dc-a's client held at the switch was
  re-routed there (so no key is overtaken);
* ``longest_send_ms``: the longest ``produce()`` call (``longest_send_after_kill_s``: when it started, from the
  kill; a send that sees the move before the engine's maintenance thread also waits for dc-b's end offsets).

Counting is strict over what dc-a holds at the end (what it took directly plus the outage synced back from dc-b)
and, while the sync still runs, the outage messages only on dc-b (``not_yet_synced``): ``lost`` and
``duplicated`` must be 0. ``retried``: messages in flight at the kill, stored by dc-a but their
acknowledgement lost, so sent again through dc-b and synced back (two copies, never acknowledged before the
kill). ``key_order``: each key's messages in send order within what was written directly, on the standby and
within what was synced back; ``overtaken``: how many messages broke it (must be 0: what dc-a's client held at the
switch is re-routed to dc-b ahead of every newer write of its key).

Health settings: the top-level figures use the **defaults** (``health.probe.interval.ms=500``,
``health.down.failures=3``, ``health.down.after.ms=2000``, ``spill.after.ms=10000``); a full run also reports
``tight`` (200 ms probes, 2 failures, 1 s, ``spill.after.ms=2000``, what the tests use), ``--health`` picks.

    python bench/failover.py [--rate 3000] [--outage 3] [--health both|default|tight] [--quick] [--broker tansu|kafka]

``--broker kafka``: each cluster is one Apache Kafka KRaft node (logs on disk: what it acknowledged survives the
SIGKILL); ``failback_s`` then includes the JVM's start and log recovery.

Last line: RESULT {"failover_s": ..., "failback_s": ..., "sent": ..., "delivered": ..., "lost": 0, ...}
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

from tests.dr_fixtures import (  # noqa: E402
    DEFAULT_HEALTH,
    create_topic,
    key_overtakes,
    make_engine,
    read_all,
    strict_count,
)
from tests.support import Broker, brokers  # noqa: E402
from ykafka import headers as H  # noqa: E402
from ykafka.dr.engine import RouteSpec  # noqa: E402
from ykafka.logs import configure  # noqa: E402

HEALTH: dict[str, dict[str, Any]] = {
    "default": DEFAULT_HEALTH,
    "tight": {"probe_s": 0.2, "down_failures": 2, "down_after_s": 1.0, "spill_after_ms": 2000},
}


def run(a: Broker, b: Broker, work: Path, health: str, rate: int, outage: float) -> dict[str, Any]:
    topic = f"bench-failover-{health}"
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    # plain clients on Tansu's S3 engine, as `ykafka dev up` seeds them (docs/disaster-recovery.md, *Guarantees and
    # limits*: an idempotent client's batch in flight at a kill can be answered as a duplicate and lost)
    plain = {"enable.idempotence": False} if a.stack.cfg.clusters[a.name].shared_bucket else {}
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "auto"),
                         work / f"dr-{health}", progress_interval_s=2.0, client_conf=plain, **HEALTH[health])
    sent: list[int] = []
    acked_at: dict[int, float] = {}
    stop = threading.Event()
    longest = [0.0, 0.0]  # the longest produce() call (s) and when it started, relative to the kill (s)
    killed_at: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked_at.setdefault(int(msg.value()), time.perf_counter())

    def produce() -> None:
        interval = 1.0 / rate
        next_at = time.perf_counter()
        while not stop.is_set():
            i = len(sent)
            started = time.perf_counter()
            engine.produce(topic, str(i).encode(), key=str(i % 16).encode(), on_delivery=on_delivery)
            took = time.perf_counter() - started
            if took > longest[0]:
                longest[0], longest[1] = took, started - killed_at[0] if killed_at else -1.0
            sent.append(i)
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    def delivered(cluster: str) -> int:
        return int(engine.status()["links"].get(cluster, {}).get("delivered", 0))

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(2.0)
    standby_before = delivered("dc-b")
    a.kill()
    killed = time.perf_counter()
    killed_at.append(killed)
    while delivered("dc-b") == standby_before and time.perf_counter() - killed < 60:
        time.sleep(0.005)
    failover_s = time.perf_counter() - killed
    time.sleep(max(0.0, outage - failover_s))
    primary_before = delivered("dc-a")
    restarted = time.perf_counter()  # from launching the broker processes (includes their own start-up)
    a.start()
    answering = time.perf_counter()  # start() returns once the restarted brokers answer on their ports
    while delivered("dc-a") == primary_before and time.perf_counter() - restarted < 60:
        time.sleep(0.005)
    failback_s = time.perf_counter() - restarted
    time.sleep(2.0)
    stop.set()
    producer.join(10)
    idle = engine.wait_idle(120)
    status = engine.status()
    engine.close()
    on_a = read_all(a.bootstrap, topic, expect=len(sent))
    on_b = read_all(b.bootstrap, topic)
    a_values = [int(m.value() or b"0") for m in on_a]
    b_values = {int(m.value() or b"0") for m in on_b}
    pending = sorted(b_values - set(a_values))  # on the standby, not synced back yet (the sync still running)
    counts = strict_count(sent, a_values + pending, {i for i, at in acked_at.items() if at < killed})
    synced = [m for m in on_a if H.synced_from(m.headers())]
    direct = [m for m in on_a if not H.synced_from(m.headers())]
    overtaken = key_overtakes(direct) + key_overtakes(on_b) + key_overtakes(synced)
    return {
        "failover_s": round(failover_s, 3),
        "failback_s": round(failback_s, 3),
        "primary_start_s": round(answering - restarted, 3),
        "failback_after_start_s": round(failback_s - (answering - restarted), 3),
        "sent": counts["sent"],
        "delivered": counts["delivered"],
        "lost": counts["lost"],
        "duplicated": counts["duplicated"],
        "retried": counts["retried"],
        "unacknowledged": len(sent) - len(acked_at),
        "key_order": not overtaken,
        "overtaken": len(overtaken),
        "handover_ms": status["links"].get("dc-a", {}).get("longest_handover_ms", 0.0),
        "longest_send_ms": round(longest[0] * 1000, 1),
        "longest_send_after_kill_s": round(longest[1], 2),
        "on_standby": len(b_values),
        "synced_to_primary": len(synced),
        "not_yet_synced": len(pending),
        "sync_done": idle and bool(status["sync"]) and status["sync"][-1]["state"] == "done",
        "spilled": status["spill"].get("dc-a", {}).get("spilled", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=3000, help="messages per second")
    parser.add_argument("--outage", type=float, default=3.0, help="seconds dc-a stays down")
    parser.add_argument("--health", choices=["both", "default", "tight"], default=None,
                        help="health settings (default: both; --quick: default only)")
    parser.add_argument("--quick", action="store_true", help="500 msgs/s, a 1 s outage (the suite's check)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                        help="tansu: two durable Tansu brokers per cluster; kafka: one Apache Kafka KRaft node each")
    args = parser.parse_args()
    if args.quick:
        args.rate, args.outage = 500, 1.0
    health = args.health or ("default" if args.quick else "both")
    configure("warning")
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-failover-"))
    try:
        with brokers(["dc-a", "dc-b"], work / "clusters", storage="durable", broker=args.broker) as started:
            a, b = started["dc-a"], started["dc-b"]
            first = "tight" if health == "tight" else "default"
            result = {**run(a, b, work, first, args.rate, args.outage), "health": first, "storage": "durable",
                      "broker": args.broker, "rate": args.rate}
            if health == "both":
                result["tight"] = run(a, b, work, "tight", args.rate, args.outage)
        print("RESULT " + json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
