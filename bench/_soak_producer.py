"""One producer process of the soak (``bench/soak.py``).

    python bench/_soak_producer.py BOOTSTRAP_A BOOTSTRAP_B SPILL TOPIC INDEX RATE OUT [FAILBACK_ORDER [SPILL_AFTER_MS]]

Sends keyed records ``INDEX * 10**9 + i`` (key ``INDEX-<i % 16>``) through a DR engine (dc-a primary, dc-b standby,
``route.failover=auto``, ``route.failback.order`` FAILBACK_ORDER (writes-first), default health settings,
``spill.after.ms`` SPILL_AFTER_MS (10,000)) at RATE a
second until a line arrives on stdin, then waits until
spills are replayed, every outage ended and its failback sync finished, and prints ``DONE {status}``. Each send
appends ``S <value>`` to OUT before the call, each delivery callback ``<value> <ok|error> <time>`` (one ``write``
on an O_APPEND descriptor each).

With ``YKAFKA_SOAK_CLIENT`` set (a JSON object of ykafka client settings: app id and secret, the MetaServer), the
process is a drop-in ``ykafka.Producer`` of that app instead, its route (dc-a, standby dc-b, failover auto) and
every other setting from the MetaServer and the config service the soak runs (and kills, and pushes changes
through); its DR engine is the one the Producer attaches. Every second it then writes ``OUT.applied`` (JSON,
replaced whole): the hot-config values the topic's sends use now and the settings of the librdkafka client in
force for dc-a, which is how the soak checks that a pushed value reached the process.
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
from ykafka import Producer, SpillFullError, catalog  # noqa: E402
from ykafka.dr.attach import attach  # noqa: E402
from ykafka.dr.engine import RouteSpec  # noqa: E402
from ykafka.logs import configure  # noqa: E402

KEYS = 16
#: the producer keys the soak's config pushes change (bench/soak.py PUSHES), reported in OUT.applied
WATCHED = ("producer.acks", "producer.linger.ms", "producer.batch.size", "producer.partitioner",
           "producer.rate.limit.msgs", "producer.partitions.exclude", "route.active")


def report_applied(producer: Producer, topic: str, path: Path, stop: threading.Event) -> None:
    """Every second, what the topic's sends use now (``in_force``: no resolution from this thread) and the
    settings of the non-retiring client of dc-a, written whole to ``path`` (a rename: never read half-written)."""
    while not stop.wait(1.0):
        effective = producer.in_force(topic) or {}
        applied = {k: catalog.render(k, effective[k]) for k in WATCHED if k in effective}
        clients = [c for c in producer.clients() if c["cluster"] == "dc-a" and not c["retiring"]]
        state = {"t": time.time(), "applied": applied, "settings": clients[-1]["settings"] if clients else {},
                 "swaps": producer.swaps}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, default=str))
        tmp.replace(path)


def main() -> int:
    a, b, spill, topic, index, rate, out = sys.argv[1:8]
    order = sys.argv[8] if len(sys.argv) > 8 else "writes-first"
    spill_after_ms = int(sys.argv[9]) if len(sys.argv) > 9 else DEFAULT_HEALTH["spill_after_ms"]
    configure("info")
    base = int(index) * 10**9
    client = os.environ.get("YKAFKA_SOAK_CLIENT")
    producer: Producer | None = None
    stop = threading.Event()
    if client:
        producer = Producer({**json.loads(client), "ykafka.spill.dir": spill, "ykafka.client.id": f"soak-p{index}",
                             "ykafka.cache.dir": out + ".cache", "log_level": 0})
        engine = attach(producer)
        threading.Thread(target=report_applied, args=(producer, topic, Path(out + ".applied"), stop),
                         daemon=True).start()
    else:
        engine = make_engine({"dc-a": a, "dc-b": b}, RouteSpec("dc-a", "dc-b", "auto", failback_order=order),
                             Path(spill), **{**DEFAULT_HEALTH, "spill_after_ms": spill_after_ms})
    send = producer.produce if producer is not None else engine.produce
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def delivered(err: Any, msg: Any) -> None:
        os.write(fd, f"{int(msg.value())} {'ok' if err is None else 'error'} {time.time():.3f}\n".encode())

    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    gap = 1.0 / float(rate)
    i = 0
    next_at = time.monotonic()
    while not stop.is_set():
        value = base + i
        os.write(fd, f"S {value}\n".encode())
        try:
            send(topic, str(value).encode(), key=f"{index}-{i % KEYS}".encode(), on_delivery=delivered)
        except SpillFullError:
            # refused at the call, as documented (a full spill disk, docs/disaster-recovery.md): no callback comes;
            # an application gives up on the record or tries later, as on confluent-kafka's BufferError. Before,
            # this killed the soak's producer, and its standby writes were never synced back (12,929 'lost')
            os.write(fd, f"R {value}\n".encode())
        if producer is not None:
            producer.poll(0)  # the Producer's callbacks (its own client's and the engine's) run in its poll()
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
        if producer is not None:  # the owner serves its own clients' queues: the engine never polls them
            producer.poll(0.1)
            idle = engine.wait_idle(1.0) and not engine.status()["outages"]
            continue
        idle = engine.wait_idle(max(1.0, deadline - time.monotonic())) and not engine.status()["outages"]
        if not idle:
            time.sleep(0.5)
    status = engine.status()
    if producer is not None:
        producer.flush(10)
        producer.close()
    else:
        engine.close()
    os.close(fd)
    print("DONE " + json.dumps({"idle": idle, "sent": i, "sync": status["sync"], "outages": status["outages"],
                                "links": status["links"]}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
