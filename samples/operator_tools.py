"""Operator tools: browse a topic's messages and reset a consumer group's offsets through the MetaServer.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``):

    python samples/operator_tools.py [--topic tools-xxxx] [--shift -2]

It produces 10 messages, reads them with a consumer group, shows three of them as ``ykafka admin messages``
would, then shifts the (now empty) group back by ``--shift`` per partition: first the dry run's plan, then
the reset, which the audit log records.
"""

from __future__ import annotations

import argparse
import os
import uuid

from ykafka import Consumer, Producer
from ykafka.admin import AdminClient
from ykafka.logs import configure
from ykafka.oneline import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default=f"tools-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--shift", type=int, default=-2)
    args = parser.parse_args()
    configure(os.environ.get("YKAFKA_LOG_LEVEL", "warning"))
    admin = AdminClient(os.environ["YKAFKA_METASERVER"], os.environ["YKAFKA_ADMIN_TOKEN"],
                        operator="samples/operator_tools")
    group = f"{args.topic}-readers"

    with Producer({}) as producer:
        for i in range(10):
            producer.produce(args.topic, key=f"key-{i % 2}", value=f'{{"n": {i}}}', partition=0,
                             headers=[("source", b"operator_tools")])
            producer.flush(10)
    consumer = Consumer({"group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([args.topic])
    read = 0
    while read < 10:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    print(f"group {group} read {read} messages of {args.topic}")

    shown = admin.messages(args.topic, partition=0, offset=7, limit=3)
    for m in shown["messages"]:
        print(f"  {m['partition']}:{m['offset']} key={m['key']} headers={m['headers']} value={m['value']}")

    body = {"to": "shift", "value": args.shift, "topic": args.topic, "partitions": [0]}
    plan = admin.reset_offsets(group, {**body, "dry_run": True})
    for r in plan["rows"]:
        print(f"dry run: partition {r['partition']}: {r['current']} -> {r['new']} (lag after {r['lag']})")
    job = admin.reset_offsets(group, body)
    print(f"reset {job['mode']}: {job['state']}; {job['steps'][-1]['detail']}")
    print("OK" if job["state"] == "done" else "FAILED")


if __name__ == "__main__":
    run(main)
