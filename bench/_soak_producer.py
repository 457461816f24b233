"""One producer process of the soak (``bench/soak.py``).

    python bench/_soak_producer.py BOOTSTRAP_A BOOTSTRAP_B SPILL TOPIC INDEX RATE OUT [FAILBACK_ORDER]

Sends keyed records ``INDEX * 10**9 + i`` (key ``INDEX-<i % 16>``) through a DR engine (dc-a primary, dc-b standby,
``route.failover=auto``, ``route.failback.order`` FAILBACK_ORDER (writes-first), default health settings) at RATE a
second until a line arrives on stdin, then waits until
spills are replayed, every outage ended and its failback sync finished, and prints ``DONE {status}``. Each send
appends ``S <value>`` to OUT before the call, each delivery callback ``<value> <ok|error> <time>`` (one ``write``
on an O_APPEND descriptor each).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dr_fixtures import DEFAULT_HEALTH, make_engine  # noqa: E402
from ykafka.dr.engine import RouteSpec  # noqa: E402
from ykafka.logs import configure  # noqa: E402

KEYS = 16


def main() -> int:
    a, b, spill, topic, index, rate, out = sys.argv[1:8]
    order = sys.argv[8] if len(sys.argv) > 8 else "writes-first"
    configure("info")
    base = int(index) * 10**9
    engine = make_engine({"dc-a": a, "dc-b": b}, RouteSpec("dc-a", "dc-b", "auto", failback_order=order), Path(spill),
                         **DEFAULT_HEALTH)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def delivered(err: Any, msg: Any) -> None:
        os.write(fd, f"{int(msg.value())} {'ok' if err is None else 'error'} {time.time():.3f}\n".encode())

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    gap = 1.0 / float(rate)
    i = 0
    next_at = time.monotonic()
    while not stop.is_set():
        value = base + i
        os.write(fd, f"S {value}\n".encode())
        engine.produce(topic, str(value).encode(), key=f"{index}-{i % KEYS}".encode(), on_delivery=delivered)
        i += 1
        next_at += gap
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        elif pause < -1.0:
            next_at = time.monotonic()  # a send waited (hand-over, offsets): no burst to catch up
    # an outage still open (the primary not back yet) does not keep wait_idle() waiting: wait for the failback too
    deadline = time.monotonic() + 240
    idle = False
    while time.monotonic() < deadline and not idle:
        idle = engine.wait_idle(max(1.0, deadline - time.monotonic())) and not engine.status()["outages"]
        if not idle:
            time.sleep(0.5)
    status = engine.status()
    engine.close()
    os.close(fd)
    print("DONE " + json.dumps({"idle": idle, "sent": i, "sync": status["sync"], "outages": status["outages"],
                                "links": status["links"]}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
