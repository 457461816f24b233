"""A handler-only consumer that operators steer live: worker count, pause, rate, ordering, leave.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``) it needs nothing else:

    python samples/worker_consumer.py [--topic orders] [--group workers-demo] [--work-ms 20] [--fail-every 0]

It produces a steady trickle into the topic (``--produce-rate``) so there is always work, runs a handler
that sleeps ``--work-ms`` per message on the worker pool, and prints once a second: messages handled per
second, workers alive, ordering, paused / left, rate limit, retries and dead letters. The commands to try
from another shell are printed at start. Ctrl-C (or SIGTERM) stops it gracefully: in-flight work
finishes, offsets commit, the group is left. Local mode works too:
``python samples/worker_consumer.py --bootstrap 127.0.0.1:19092 --configcenter http://127.0.0.1:8080``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ykafka import Consumer
from ykafka.logs import configure
from ykafka.oneline import run


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(15)
    except Exception as exc:  # another run created it meanwhile
        print(f"(topic {topic}: {exc})")


def feed(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    """Background load so the consumer always has something to do."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    while not stop.is_set():
        producer.produce(topic, key=f"k{n % 50}", value=str(n))
        producer.poll(0)
        n += 1
        stop.wait(1.0 / rate)
    producer.flush(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="workers-demo")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--work-ms", type=float, default=20.0, help="handler time per message")
    parser.add_argument("--fail-every", type=int, default=0, help="fail every Nth message (0 = never)")
    parser.add_argument("--produce-rate", type=float, default=300.0, help="messages per second fed in")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0 = until Ctrl-C)")
    parser.add_argument("--bootstrap", help="local mode: bootstrap servers (no MetaServer)")
    parser.add_argument("--configcenter", help="local mode: config-center URL for hot config")
    args = parser.parse_args()
    configure("warning")

    # session.timeout.ms 6000: a stopped worker's partitions move in seconds (and Tansu's joins are not ~23 s)
    conf: dict[str, Any] = {"group.id": args.group, "auto.offset.reset": "latest", "session.timeout.ms": 6000,
                            "consumer.workers": 2, "consumer.retry.backoff.ms": "2000,10000"}
    if args.bootstrap:
        conf["bootstrap.servers"] = args.bootstrap
        if args.configcenter:
            conf["ykafka.configcenter.url"] = args.configcenter
    elif not os.environ.get("YKAFKA_METASERVER"):
        print("no identity: `source .ykafka/dev.env` after `ykafka dev up`, or pass --bootstrap", file=sys.stderr)
        return 2

    consumer = Consumer(conf)
    bootstrap = consumer.runtime.rdkafka_config(consumer.runtime.route(topic=args.topic, group=args.group))[
        "bootstrap.servers"]
    ensure_topic(bootstrap, args.topic, args.partitions)
    handled = [0]
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        time.sleep(args.work_ms / 1000)
        value = int(msg.value() or b"0")
        if args.fail_every and value % args.fail_every == 0:
            raise RuntimeError(f"sample failure on {value}")
        with lock:
            handled[0] += 1

    print(f"consuming {args.topic} as group {args.group} on cluster {consumer.cluster} (host {consumer.runtime.ip})")
    print("try, from another shell (source .ykafka/dev.env first):")
    for change in (f"group:{args.group} consumer.workers=8", f"group:{args.group} consumer.paused=true",
                   f"group:{args.group} consumer.paused=false", f"group:{args.group} consumer.rate.limit.msgs=50",
                   f"group:{args.group} consumer.rate.limit.msgs=0", f"group:{args.group} consumer.ordering=key",
                   f"group:{args.group} consumer.leave=true", f"group:{args.group} consumer.leave=false",
                   f"group:{args.group} consumer.max.partition.fetch.bytes=65536",
                   f"topic:{args.topic} consumer.workers=3"):
        print(f"  ykafka admin config set {change}")
    print(f"  ykafka admin config set group:{args.group} consumer.paused=true --ip {consumer.runtime.ip}"
          "   # this host only (gray release)")
    print(f"  ykafka admin dlq replay {args.group} {args.topic}   # after --fail-every N: re-publish dead letters")

    stop = threading.Event()
    threading.Thread(target=feed, args=(bootstrap, args.topic, args.produce_rate, stop), daemon=True).start()

    def report() -> None:
        last = 0
        engine = consumer.engine
        while not stop.wait(1.0):
            with lock:
                now = handled[0]
            router = engine.router
            print(f"{now - last:5d} msg/s  workers={engine.pool.alive if engine.pool else 0:<3d}"
                  f" ordering={engine.effective.get('consumer.ordering'):<9}"
                  f" paused={consumer._session.operator_paused!s:<5} left={consumer._session.left!s:<5}"
                  f" rate={engine.bucket.rate:g} fetch.bytes={consumer.client_config.get('max.partition.fetch.bytes')}"
                  f" retried={router.sent_retry if router else 0} dlq={router.sent_dlq if router else 0}",
                  flush=True)
            last = now

    threading.Thread(target=report, daemon=True).start()
    if args.seconds:
        threading.Timer(args.seconds, consumer.stop).start()  # as Ctrl-C would: finish, commit, return
    try:
        consumer.run(handler, topics=[args.topic])  # returns after Ctrl-C / SIGTERM, work finished and committed
    finally:
        stop.set()
        consumer.close()
    print(f"stopped; handled {handled[0]} messages")
    return 0


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
