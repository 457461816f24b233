"""One process holding two ykafka Producers and a Consumer (the console's inventory test).

Usage: python -m tests.inventory_child TOPIC GROUP COUNT   (client config as JSON in YKAFKA_TEST_CONF)

Each producer sends COUNT messages to TOPIC; the consumer reads them all; one JSON line then says the clients'
ids and how many messages were read. The clients stay open (and keep reporting) until stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import time

from ykafka import Consumer, Producer


def main(argv: list[str]) -> int:
    topic, group, count = argv[0], argv[1], int(argv[2])
    conf = json.loads(os.environ["YKAFKA_TEST_CONF"])
    producers = [Producer(dict(conf)), Producer(dict(conf))]
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    for i, producer in enumerate(producers):
        for n in range(count):
            producer.produce(topic, f"{i}:{n}".encode(), f"k{n}".encode())
        producer.flush(30)
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 2 * count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.add(msg.value().decode())
    consumer.commit(asynchronous=False)
    ids = [p._runtime.client_id for p in producers] + [consumer.runtime.client_id]
    sys.stdout.write(json.dumps({"ids": ids, "consumed": len(seen), "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the test closes our stdin
    consumer.close()
    for producer in producers:
        producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
