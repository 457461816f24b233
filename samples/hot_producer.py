"""A producer that operators steer live: run it, push config from another shell, watch it change.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``) it needs nothing else:

    python samples/hot_producer.py [--topic orders] [--rate 200] [--partitions 4] [--seconds 0]

Every second it prints what it sent and where: the partition distribution (from the delivery reports),
the acks / partitioner / cluster in force, and each hot-config change or rejection as it arrives. The
commands to try are printed at start. Local mode (no MetaServer) works too:
``python samples/hot_producer.py --bootstrap 127.0.0.1:19092 --configcenter http://127.0.0.1:8080``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from ykafka import Producer, ThrottledError
from ykafka.hotconfig import ConfigChange
from ykafka.logs import configure
from ykafka.oneline import run


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(15)
    except Exception as exc:  # another run created it meanwhile
        print(f"(topic {topic}: {exc})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--partitions", type=int, default=4, help="partitions when the topic is created")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0 = until Ctrl-C)")
    parser.add_argument("--bootstrap", help="local mode: bootstrap servers (no MetaServer)")
    parser.add_argument("--configcenter", help="local mode: config-center URL for hot config")
    args = parser.parse_args()
    configure("warning")

    conf: dict[str, Any] = {}
    if args.bootstrap:
        conf["bootstrap.servers"] = args.bootstrap
        if args.configcenter:
            conf["ykafka.configcenter.url"] = args.configcenter
    elif not os.environ.get("YKAFKA_METASERVER"):
        print("no identity: `source .ykafka/dev.env` after `ykafka dev up`, or pass --bootstrap", file=sys.stderr)
        return 2

    producer = Producer(conf)
    topic = args.topic
    scope = f"topic:{topic}"
    clusters = sorted(producer.runtime.clusters())
    other = next((c for c in clusters if c != producer.route(topic)), producer.route(topic))
    ensure_topic(producer.runtime.cluster(producer.route(topic)).bootstrap_servers, topic, args.partitions)
    print(f"producing to {topic} at {args.rate:g} msg/s as app {producer.runtime.app_id!r} "
          f"(clusters: {', '.join(clusters)}). In another shell, try:\n")
    for command in (f"ykafka admin config set {scope} producer.acks=1",
                    f"ykafka admin config set {scope} producer.partitioner=round_robin",
                    f"ykafka admin config set {scope} producer.partitions.exclude=0,1",
                    f"ykafka admin config set {scope} producer.rate.limit.msgs=50",
                    f"ykafka admin config set {scope} route.cluster={other}",
                    f"ykafka admin config set {scope} --delete producer.acks --delete producer.partitioner "
                    f"--delete producer.partitions.exclude --delete producer.rate.limit.msgs --delete route.cluster"):
        print(f"    {command}")
    print()

    lock = threading.Lock()
    partitions: Counter[tuple[str, int]] = Counter()
    failures: Counter[str] = Counter()

    def on_delivery(cluster: str, err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                failures[err.name()] += 1
            else:
                partitions[(cluster, msg.partition())] += 1

    def on_change(change: ConfigChange) -> None:
        for key, (old, new) in sorted(change.changed.items()):
            print(f"  >> {change.namespace}: {key} {old!r} -> {new!r}")
        for rej in change.rejected:
            print(f"  !! rejected {change.namespace}: {rej.key}={rej.value!r} ({rej.reason}); old value kept")

    producer.on_config_change(on_change)
    started = time.monotonic()
    next_report = started + 1
    sent = throttled = 0
    try:
        while not args.seconds or time.monotonic() - started < args.seconds:
            key = f"user-{sent % 16}"
            try:
                # the cluster this message is routed to (held messages of a switch go to the new one)
                producer.produce(topic, f"{key}:{sent}".encode(), key.encode(),
                                 on_delivery=functools.partial(on_delivery, producer.route(topic)))
                sent += 1
            except ThrottledError:
                throttled += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
            now = time.monotonic()
            if now >= next_report:
                eff = producer.applied_config(topic)
                with lock:
                    dist = " ".join(f"{c}/p{p}={n}" for (c, p), n in sorted(partitions.items()))
                    fails = dict(failures)
                    partitions.clear()
                    failures.clear()
                print(f"[{now - started:5.0f}s] cluster={producer.route(topic)} acks={eff['producer.acks']} "
                      f"partitioner={eff['producer.partitioner']} exclude={list(eff['producer.partitions.exclude'])} "
                      f"limit={eff['producer.rate.limit.msgs']:g}/s | delivered: {dist or '-'}"
                      + (f" | failed: {fails}" if fails else "") + (f" | throttled: {throttled}" if throttled else ""))
                throttled = 0
                next_report = now + 1
            time.sleep(max(0.0, sent / args.rate - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        left = producer.close()
        print(f"sent {sent} messages; {left} undelivered at close")
    return 0


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
