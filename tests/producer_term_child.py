"""A producing service stopped by SIGTERM, for tests/test_client_term.py:
``python -m tests.producer_term_child BOOTSTRAP TOPIC CACHE_DIR OUT_FILE``.

Sends ``n:<seq>`` as fast as the producer takes them (polling as it goes) until SIGTERM; the handler only sets a
flag; the loop then calls ``close()``, which flushes what is queued, or, for a cluster that is down (BOOTSTRAP where
no broker listens), leaves it journaled in the disk spill for the app's next producer. Writes one JSON line to
OUT_FILE: how many were sent, acknowledged and failed, what close() returned and the spill's depth at close.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ykafka import Producer


def main(bootstrap: str, topic: str, cache: str, out: str) -> None:
    stop = {"at": 0.0}

    def on_term(_signum: int, _frame: Any) -> None:
        stop["at"] = time.monotonic()

    signal.signal(signal.SIGTERM, on_term)
    acked: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": cache, "log_level": 0,
                         "on_delivery": lambda err, _msg: acked.append(err)})
    engine = producer.disaster_recovery
    assert engine is not None
    cluster = producer.route(topic)
    sent = 0
    spilling = False
    Path(out + ".ready").write_text("ready")
    while not stop["at"]:
        producer.produce(topic, f"n:{sent}".encode())
        sent += 1
        if sent % 100 == 0:
            producer.poll(0)
            time.sleep(0.005)
            if not spilling and engine.status()["spill"].get(cluster, {}).get("depth", 0):
                spilling = True
                Path(out + ".spilling").write_text("spilling")  # the cluster was declared down
    depth = engine.status()["spill"].get(cluster, {}).get("depth", 0)
    left = producer.close(30)
    ok = sum(1 for err in acked if err is None)  # not acked.count(None): KafkaError == None raises in confluent-kafka
    Path(out).write_text(json.dumps({"sent": sent, "acked": ok, "failed": len(acked) - ok,
                                     "left": left, "spilled_at_stop": depth,
                                     "close_s": round(time.monotonic() - stop["at"], 2)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
