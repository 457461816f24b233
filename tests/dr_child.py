"""A producer process for the SIGKILL test: ``python -m tests.dr_child BOOTSTRAP SPILL_DIR TOPIC MODE``.

``produce``: 100 messages acknowledged, ``READY``; after ``GO`` on stdin (the broker is gone) produce
forever, printing ``A <i>`` once ``produce`` returned for message i, and ``SPILLING`` once the cluster is
marked down and everything earlier is on disk. The parent SIGKILLs it mid-spill.
``recover``: open the same spill dir, wait until it replayed, print ``REPLAYED <n>``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.dr_fixtures import make_engine
from ykafka.failover import RouteSpec

KEYS = 8


def main() -> int:
    bootstrap, spill, topic, mode = sys.argv[1:5]
    engine = make_engine({"solo": bootstrap}, RouteSpec("solo"), Path(spill))
    if mode == "recover":
        ok = engine.wait_idle(90)
        replayed = engine.status()["replay"]["solo"]["replayed"]
        engine.close()
        print(f"REPLAYED {replayed} idle={ok}", flush=True)
        return 0 if ok else 1
    for i in range(100):
        engine.produce(topic, str(i).encode(), key=str(i % KEYS).encode())
        print(f"A {i}", flush=True)
    if engine.flush(30):
        return 2
    print("READY", flush=True)
    sys.stdin.readline()  # GO: the parent killed the broker
    link = engine.link("solo")
    announced = False
    i = 100
    while True:
        engine.produce(topic, str(i).encode(), key=str(i % KEYS).encode())
        print(f"A {i}", flush=True)
        i += 1
        if not announced and not link.available:
            engine.flush(10)  # purged messages re-routed and committed to the spill
            print("SPILLING", flush=True)
            announced = True
        time.sleep(0.001)


if __name__ == "__main__":
    sys.exit(main())
