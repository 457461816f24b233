"""Quickstart: produce N keyed messages through ykafka and consume them back.

Run against the local stack:  ykafka dev up && source .ykafka/dev.env && python samples/quickstart.py
The identity (YKAFKA_APP_ID / YKAFKA_APP_SECRET / YKAFKA_METASERVER) comes from the environment; the
MetaServer's grant says which cluster the topic lives on, so no bootstrap servers appear here.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections import Counter

from ykafka import Consumer, Producer
from ykafka.logs import configure
from ykafka.oneline import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="messages to produce")
    parser.add_argument("--keys", type=int, default=10, help="distinct keys")
    parser.add_argument("--topic", default=f"quickstart-{uuid.uuid4().hex[:6]}")
    args = parser.parse_args()
    configure(os.environ.get("YKAFKA_LOG_LEVEL", "warning"))  # structlog to stderr; info shows the SDK at work

    delivered: Counter[str] = Counter()
    first_error: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        delivered["ok" if err is None else "failed"] += 1
        if err is not None and not first_error:
            first_error.append(err)

    started = time.monotonic()
    with Producer({}) as producer:
        for i in range(args.count):
            producer.produce(args.topic, key=f"key-{i % args.keys}", value=f"message {i}", on_delivery=on_delivery)
            producer.poll(0)
        producer.flush(30)
    print(f"produced {args.count} messages to {args.topic!r}: {delivered['ok']} acknowledged, "
          f"{delivered['failed']} failed ({time.monotonic() - started:.2f}s)")
    if not delivered["ok"]:
        # on a secured cluster (YKAFKA_DEV_SECURITY=sasl_ssl) an app may write topics but not create them: the
        # broker answers a write to a topic that does not exist yet with "Topic authorization failed"
        print(f"nothing was acknowledged: {first_error[0] if first_error else 'no delivery report'}\n"
              "on a secured cluster the topic must exist first: ykafka admin topics create TOPIC --app "
              "$YKAFKA_APP_ID, then pass --topic TOPIC")
        raise SystemExit(1)

    # session.timeout.ms: only for `ykafka dev up --broker tansu`, whose group joins wait out the session timeout
    # (~23 s at the default); Apache Kafka joins at once either way
    consumer = Consumer({"group.id": f"quickstart-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    consumer.subscribe([args.topic])
    per_key: Counter[str] = Counter()
    deadline = time.monotonic() + 60
    try:
        while sum(per_key.values()) < delivered["ok"] and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    per_key[msg.key().decode()] += 1
        if per_key:
            consumer.commit(asynchronous=False)  # nothing consumed: nothing to commit (confluent-kafka would raise)
    finally:
        consumer.close()
    total = sum(per_key.values())
    print(f"consumed {total} messages back over {len(per_key)} keys "
          f"({', '.join(f'{k}={n}' for k, n in sorted(per_key.items()))})")
    print("OK" if total == delivered["ok"] == args.count else "MISMATCH")
    raise SystemExit(0 if total == args.count else 1)


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
