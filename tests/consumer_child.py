"""A framework consumer in its own process, for kill / signal tests.

Usage: python -m tests.consumer_child BOOTSTRAP TOPIC GROUP OUT_FILE CACHE_DIR [DELAY_S] [WORKERS]

``YKAFKA_CHILD_LOG=info`` (or another level) renders the framework's structlog output to stderr (the soak keeps it
in a file per consumer); unset, nothing is configured (a caller reading stderr through a pipe it never drains must
not fill it).

``YKAFKA_CHILD_CLIENT`` (a JSON object of ykafka settings: app id and secret, the MetaServer) makes it a consumer
of that app, its cluster and hot config from the MetaServer and the config service (BOOTSTRAP ``-``: none given);
``YKAFKA_CHILD_APPLIED`` names a file it replaces every second with ``{"workers": <the pool's threads>,
"applied": {"consumer.workers": ...}}`` (what the soak checks a pushed value against).

Each handled message appends ``<value> <partition> <offset>`` to OUT_FILE with one ``write`` on an
O_APPEND descriptor, so the record survives SIGKILL of this process. Exits 0 after a graceful stop.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Message

from ykafka import catalog
from ykafka.consumer import Consumer
from ykafka.logs import configure


def report_applied(consumer: Consumer, path: Path, stop: threading.Event) -> None:
    """Every second: the worker pool's threads and the consumer.workers value in force, replaced whole."""
    while not stop.wait(1.0):
        engine = consumer.engine
        state = {"t": time.time(), "workers": engine.pool.alive if engine.pool is not None else 0,
                 "applied": {"consumer.workers": catalog.render("consumer.workers",
                                                                catalog.value(engine.effective, "consumer.workers"))}}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)


def main(argv: list[str]) -> int:
    bootstrap, topic, group, out_file, cache_dir = argv[:5]
    delay = float(argv[5]) if len(argv) > 5 else 0.005
    workers = int(argv[6]) if len(argv) > 6 else 4
    if os.environ.get("YKAFKA_CHILD_LOG"):
        configure(os.environ["YKAFKA_CHILD_LOG"])
    fd = os.open(out_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def handler(msg: Message) -> None:
        time.sleep(delay)
        os.write(fd, f"{int(msg.value())} {msg.partition()} {msg.offset()}\n".encode())

    client = json.loads(os.environ.get("YKAFKA_CHILD_CLIENT") or "{}")
    consumer = Consumer({
        **({"bootstrap.servers": bootstrap} if bootstrap != "-" else {}), **client,
        "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "ykafka.cache.dir": cache_dir,
        "consumer.workers": workers, "consumer.ordering": "partition",
        "ykafka.consumer.commit.interval.ms": 200, "ykafka.consumer.max.inflight.per.partition": 50,
    })
    applied = os.environ.get("YKAFKA_CHILD_APPLIED")
    stop = threading.Event()
    if applied:
        threading.Thread(target=report_applied, args=(consumer, Path(applied), stop), daemon=True).start()
    try:
        consumer.run(handler, topics=[topic])  # returns after SIGTERM / SIGINT: drained and committed
    finally:
        stop.set()
        consumer.close()
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
