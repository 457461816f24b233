"""A producer process for the SIGKILL test: ``python -m tests.dr_child BOOTSTRAP SPILL_DIR TOPIC MODE [producer]``.

``produce``: 100 messages acknowledged, ``READY``; after ``GO`` on stdin (the broker is gone) produce
forever, printing ``A <i>`` once ``produce`` returned for message i, and ``SPILLING`` once the cluster is
marked down and everything earlier is on disk. The parent SIGKILLs it mid-spill.
``recover``: open the same spill dir, wait until it replayed, print ``REPLAYED <n>``. Logs go to stdout in
``recover`` (the parent waits for ``spill.replay_start``), to stderr in ``produce``.
With ``producer`` it goes through ``ykafka.Producer`` + ``failover.attach`` instead of a bare engine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.dr_fixtures import make_engine
from ykafka.dr.engine import RouteSpec
from ykafka.logs import configure

KEYS = 8


def main() -> int:
    bootstrap, spill, topic, mode = sys.argv[1:5]
    if mode == "produce":
        # the engine's threads log while the main thread prints its A lines: on one stream a log line's two writes
        # (text, newline) can take an A line in between ("...reason='cluster down'A 540"), and the parent misses it
        configure("info")
    via_producer = len(sys.argv) > 5 and sys.argv[5] == "producer"
    producer = None
    if via_producer:  # the drop-in Producer with the engine attached (spill dir from ykafka.cache.dir)
        from ykafka import Producer
        from ykafka.dr.attach import attach

        producer = Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": spill, "log_level": 0,
                             "ykafka.report.enabled": False, "spill.after.ms": 2000,
                             "health.probe.interval.ms": 200, "health.down.failures": 2})
        engine = attach(producer)
        cluster = "default"
    else:
        engine = make_engine({"solo": bootstrap}, RouteSpec("solo"), Path(spill))
        cluster = "solo"
    if mode == "recover":
        ok = engine.wait_idle(90)
        replayed = engine.status()["replay"][cluster]["replayed"]
        engine.close()
        if producer is not None:
            producer.close()
        print(f"REPLAYED {replayed} idle={ok}", flush=True)
        return 0 if ok else 1
    send = producer.produce if producer is not None else engine.produce
    for i in range(100):
        send(topic, str(i).encode(), key=str(i % KEYS).encode())
        print(f"A {i}", flush=True)
    if (producer.flush(30) if producer is not None else engine.flush(30)):
        return 2
    print("READY", flush=True)
    sys.stdin.readline()  # GO: the parent killed the broker
    link = engine.link(cluster)
    announced = False
    i = 100
    while True:
        send(topic, str(i).encode(), key=str(i % KEYS).encode())
        print(f"A {i}", flush=True)
        i += 1
        if not announced and not link.available:
            engine.flush(10)  # purged messages re-routed and committed to the spill
            print("SPILLING", flush=True)
            announced = True
        time.sleep(0.001)


if __name__ == "__main__":
    sys.exit(main())
