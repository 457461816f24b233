"""Topic placements: the platform picks the cluster, the service only names the topic.

An operator places a topic on a cluster (``ykafka admin placements set TOPIC=CLUSTER``; here through the
admin client); a Producer that has never seen the topic asks the MetaServer once, at its first send, and
writes there. Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``):

    python samples/placements.py [--topic placed-demo] [--cluster dc-b] [--count 20]

The placement is removed at the end. Moving a placed topic that has traffic is a live route switch
(``route.cluster`` at topic scope), which wins over the placement.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from confluent_kafka import Consumer as RawConsumer

from ykafka import Producer
from ykafka.admin import AdminClient
from ykafka.logs import configure
from ykafka.oneline import run


def read_back(bootstrap: str, topic: str, expected: int) -> int:
    """Count the topic's messages straight from the cluster's brokers (not through ykafka)."""
    consumer = RawConsumer({"bootstrap.servers": bootstrap, "group.id": f"placements-{uuid.uuid4().hex[:6]}",
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for msg in consumer.consume(num_messages=100, timeout=1.0) if msg.error() is None)
    finally:
        consumer.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default=f"placed-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--cluster", default=None, help="where to place it (default: a cluster other than "
                                                        "the app's default)")
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    configure(os.environ.get("YKAFKA_LOG_LEVEL", "warning"))
    admin = AdminClient(os.environ.get("YKAFKA_METASERVER", "http://127.0.0.1:7070"),
                        os.environ.get("YKAFKA_ADMIN_TOKEN"), operator="samples/placements")
    registry = {c["name"]: c["bootstrap_servers"] for c in admin.list_clusters()}
    cluster = args.cluster or sorted(registry)[-1]
    admin.place({args.topic: cluster})  # before the Producer starts: its grant says placements exist
    print(f"placed {args.topic} on {cluster}")
    try:
        with Producer({}) as producer:
            for i in range(args.count):
                producer.produce(args.topic, f"message {i}".encode())
            failed = producer.flush(30)
            print(f"the producer routes {args.topic} to {producer.runtime.route(args.topic)} "
                  f"(its default cluster is {producer.runtime.default_cluster})")
    finally:
        admin.unplace(args.topic)
    seen = read_back(registry[cluster], args.topic, args.count)
    ok = failed == 0 and seen == args.count
    print(f"{args.count} sent, {seen} read back on {cluster}: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
