"""Dual-DC failover under load: the primary (dc-a) is killed while a thread produces, then restarted.

Starts two Tansu brokers on free ports (dc-a primary, dc-b standby, ``route.failover=auto``). A thread
produces at a steady rate; dc-a is SIGKILLed, later restarted on the same port (empty: memory storage).

* ``failover_s``: from the kill to the first message acknowledged by the standby;
* ``failback_s``: from the restart to the first message acknowledged by the primary again.

Counting (Tansu forgets everything when killed): a message is delivered when it was acknowledged by a
broker and is present on the cluster that acknowledged it at the end, or was synced to the primary; for
dc-a before the kill "present" means seen there by a live tail reader, or acknowledged to us just before
the kill (``acked_lost_with_broker``: the broker's loss, not the client's).

    python bench/failover.py [--rate 3000] [--outage 3] [--quick]

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

from tests.dr_fixtures import Broker, TailReader, create_topic, make_engine, read_all, tally  # noqa: E402
from ykafka import headers as H  # noqa: E402
from ykafka.dr.engine import RouteSpec  # noqa: E402
from ykafka.logs import configure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=3000, help="messages per second")
    parser.add_argument("--outage", type=float, default=3.0, help="seconds dc-a stays down")
    parser.add_argument("--quick", action="store_true", help="500 msgs/s, a 1 s outage (the suite's check)")
    args = parser.parse_args()
    if args.quick:
        args.rate, args.outage = 500, 1.0
    configure("warning")
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-failover-"))
    a, b = Broker("dc-a", work / "logs"), Broker("dc-b", work / "logs")
    topic = "bench-failover"
    try:
        a.start()
        b.start()
        for broker in (a, b):
            create_topic(broker.bootstrap, topic, 3)
        tail_a = TailReader(a.bootstrap, topic, 3)
        engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "auto"),
                             work / "dr", progress_interval_s=2.0)
        sent: list[int] = []
        acked: set[int] = set()
        stop = threading.Event()

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked.add(int(msg.value()))

        def produce() -> None:
            interval = 1.0 / args.rate
            next_at = time.perf_counter()
            while not stop.is_set():
                i = len(sent)
                engine.produce(topic, str(i).encode(), key=str(i % 16).encode(), on_delivery=on_delivery)
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
        while delivered("dc-b") == standby_before and time.perf_counter() - killed < 60:
            time.sleep(0.005)
        failover_s = time.perf_counter() - killed
        before_kill = tail_a.stop()
        time.sleep(max(0.0, args.outage - failover_s))
        primary_before = delivered("dc-a")
        restarted = time.perf_counter()  # from launching the broker process (includes its own start-up)
        a.start()
        while delivered("dc-a") == primary_before and time.perf_counter() - restarted < 60:
            time.sleep(0.005)
        failback_s = time.perf_counter() - restarted
        time.sleep(2.0)
        stop.set()
        producer.join(10)
        idle = engine.wait_idle(120)
        status = engine.status()
        engine.close()
        on_a, on_b = read_all(a.bootstrap, topic), read_all(b.bootstrap, topic)
        pre = [int(r[3] or b"0") for r in before_kill]
        a_final = [int(m.value() or b"0") for m in on_a]
        b_values = {int(m.value() or b"0") for m in on_b}
        landed = pre + a_final
        acked_lost = acked - set(landed) - b_values
        landed += sorted(b_values - set(landed)) + sorted(acked_lost)
        counts = tally(sent, landed)
        synced = sum(1 for m in on_a if H.synced_from(m.headers()))
        result = {
            "failover_s": round(failover_s, 3),
            "failback_s": round(failback_s, 3),
            "sent": counts["sent"],
            "delivered": counts["delivered"],
            "lost": counts["lost"],
            "duplicated": counts["duplicated"],
            "on_standby": len(b_values),
            "synced_to_primary": synced,
            "outage_missing_on_primary": len(b_values - set(a_final)),
            "acked_lost_with_broker": len(acked_lost),
            "sync_done": idle and bool(status["sync"]) and status["sync"][-1]["state"] == "done",
            "rate": args.rate,
        }
        print("RESULT " + json.dumps(result))
    finally:
        a.kill()
        b.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
