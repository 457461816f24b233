"""A ykafka Producer and a ykafka Consumer in one process with ``ykafka.prometheus.port`` set, as an operator runs
them, for the scrape test: ``python -m tests.prometheus_child BOOTSTRAP TOPIC PORT CACHE_DIR``.

Each line ``N`` on stdin produces N messages (flushed) and prints ``PRODUCED <total>``; the consumer handles the
topic in the background and the line ``HANDLED`` prints ``HANDLED <total>``. EOF stops both and exits 0.
"""

from __future__ import annotations

import sys
import threading

from confluent_kafka import Message

from ykafka import Producer
from ykafka.consumer import Consumer


def main() -> int:
    bootstrap, topic, port, cache = sys.argv[1:5]
    common = {"bootstrap.servers": bootstrap, "ykafka.report.enabled": False, "ykafka.prometheus.port": port,
              "ykafka.metrics.interval.ms": 200, "log_level": 0}
    producer = Producer({**common, "ykafka.cache.dir": f"{cache}/p"})
    consumer = Consumer({**common, "ykafka.cache.dir": f"{cache}/c", "group.id": f"prom-{topic}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    handled: list[int] = []
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            handled.append(int(msg.value()))

    runner = threading.Thread(target=consumer.run, args=(handler,), kwargs={"topics": [topic]}, daemon=True)
    runner.start()
    sent = 0
    print("READY", flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word == "HANDLED":
            with lock:
                print(f"HANDLED {len(handled)}", flush=True)
            continue
        for _ in range(int(word)):
            producer.produce(topic, str(sent).encode(), key=str(sent % 4).encode())
            sent += 1
        if producer.flush(30):
            return 2
        print(f"PRODUCED {sent}", flush=True)
    consumer.stop()
    runner.join(30)
    consumer.close()
    producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
