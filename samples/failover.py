"""Dual-DC failover you can watch: produce continuously while you stop and restart dc-a.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``):

    python samples/failover.py [--topic orders] [--rate 200] [--seconds 0]

then, in another shell, ``ykafka dev stop dc-a`` and a little later ``ykafka dev start dc-a``. Every second
the sample prints where writes go, each cluster's health, the spill depth and the failback sync; at the end
(Ctrl-C or ``--seconds``) it waits for spill and sync to finish and prints the final count: every message
sent must have its delivery callback fire without error. Local mode works too:
``python samples/failover.py --bootstrap-a 127.0.0.1:19092 --bootstrap-b 127.0.0.1:29092``.

``--strict-order`` sets ``route.failback.order=strict`` (new writes wait for the failback sync, per-key order kept
on dc-a). ``route.failover=auto`` is set here as a local default; operators set it (and ``route.standby``) per
cluster or topic in the config center. dc-a's standby comes from the cluster registry (dc-b).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any

from ykafka import Producer
from ykafka.dr.attach import attach
from ykafka.logs import configure
from ykafka.oneline import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0 = until Ctrl-C)")
    parser.add_argument("--strict-order", action="store_true",
                        help="route.failback.order=strict: at failback, new writes wait in the spill until the "
                             "outage's records are synced back, so every key stays in order on dc-a")
    parser.add_argument("--bootstrap-a", help="local mode: dc-a bootstrap servers (no MetaServer)")
    parser.add_argument("--bootstrap-b", help="local mode: dc-b bootstrap servers")
    args = parser.parse_args()
    configure("warning")

    conf: dict[str, Any] = {"route.failover": "auto", "spill.after.ms": 3000, "health.probe.interval.ms": 250,
                            "log_level": 0}
    if args.strict_order:
        conf["route.failback.order"] = "strict"
    if args.bootstrap_a:
        conf.update({"ykafka.local.clusters": f"dc-a={args.bootstrap_a};dc-b={args.bootstrap_b}",
                     "ykafka.local.default.cluster": "dc-a", "route.standby": "dc-b"})
    producer = Producer(conf)
    engine = attach(producer)
    counts = {"sent": 0, "acked": 0, "failed": 0}
    lock = threading.Lock()

    def on_delivery(err: Any, _msg: Any) -> None:
        with lock:
            counts["acked" if err is None else "failed"] += 1

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"producing to {args.topic} at {args.rate:g} msg/s. In another shell try:\n"
          "    ykafka dev stop dc-a      # writes fail over to dc-b (or spill to disk with no standby)\n"
          "    ykafka dev start dc-a     # writes return to dc-a; dc-b's outage writes are synced back\n"
          "Ctrl-C to finish and count.")
    started = time.monotonic()
    last_print = started
    interval = 1.0 / args.rate
    while not stop.is_set() and not (args.seconds and time.monotonic() - started > args.seconds):
        i = counts["sent"]
        producer.produce(args.topic, f"{i}".encode(), key=f"k{i % 16}".encode(), on_delivery=on_delivery)
        counts["sent"] += 1
        producer.poll(0)
        time.sleep(interval)
        if time.monotonic() - last_print >= 1.0:
            last_print = time.monotonic()
            st = engine.status()
            route = st["routes"].get(args.topic, {})
            health = " ".join(f"{c}={h['state']}" for c, h in sorted(st["clusters"].items()))
            spill = sum(q["depth"] for q in st["spill"].values())
            sync = "; ".join(f"{j['from']}->{j['to']} {j['state']} {j['copied']} copied" for j in st["sync"][-1:])
            held = " held for the sync" if any(h["topic"] == args.topic for h in st["held"]) else ""
            print(f"[{time.monotonic() - started:5.0f}s] sent={counts['sent']} acked={counts['acked']} "
                  f"writes->{route.get('active', '?')}{held} {health} spill={spill} {sync}")

    print("stopping: flushing, waiting for replay and failback sync ...")
    producer.flush(30)
    idle = engine.wait_idle(120)
    producer.flush(10)
    st = engine.status()
    engine.close()
    producer.close()
    synced = sum(j["copied"] for j in st["sync"])
    replayed = sum(r["replayed"] for r in st["replay"].values())
    print(f"final: sent={counts['sent']} acked={counts['acked']} failed={counts['failed']} "
          f"lost={counts['sent'] - counts['acked'] - counts['failed']} replayed_from_spill={replayed} "
          f"synced_back={synced} idle={idle}")
    return 0 if counts["acked"] == counts["sent"] else 1


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
