"""Message trace, end to end: a ykafka Producer and Consumer with tracing on send and handle a few messages
(one handler call fails once and the message is retried), the pipeline runs once, then one key's lifecycle is
printed the way ``ykafka trace KEY`` does.

Run against the local stack:  ykafka dev up && source .ykafka/dev.env && python samples/trace_lookup.py
(the cluster comes from YKAFKA_BOOTSTRAP_DC_A or --bootstrap; the store defaults to a temporary folder).
Tracing is a hot-config key like any other: here it is set in the clients' configuration; in production an
operator turns it on for a topic (``ykafka admin config set topic:orders trace.enabled=true``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import uuid
from typing import Any

from confluent_kafka import Message

from pipeline.cli import trace
from pipeline.runner import Pipeline, PipelineConfig
from ykafka import Consumer, Producer
from ykafka.logs import configure
from ykafka.oneline import run

TRACE_ALL = {"trace.enabled": True, "trace.sample.rate": 1.0, "ykafka.trace.linger.ms": 20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("YKAFKA_BOOTSTRAP_DC_A"))
    parser.add_argument("--store", default=None, help="pipeline store (default: a temporary folder)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--count", type=int, default=5)
    args = parser.parse_args()
    if not args.bootstrap:
        parser.error("no cluster: pass --bootstrap or source .ykafka/dev.env")
    configure("warning")
    store = args.store or tempfile.mkdtemp(prefix="ykafka-trace-")
    cache = tempfile.mkdtemp(prefix="ykafka-trace-cache-")
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    local = {"bootstrap.servers": args.bootstrap, "ykafka.cache.dir": cache, **TRACE_ALL}

    # producer side: the Producer traces `produced` and `acked` for every sampled message
    producer = Producer({**local, "producer.linger.ms": 5})
    failed: list[Any] = []
    for i in range(args.count):
        producer.produce(topic, f"order #{i}".encode(), f"order-{i}".encode(),
                         on_delivery=lambda err, msg: failed.append(err) if err else None)
    left = producer.close()
    print(f"produced {args.count} messages to {topic}: {len(failed) + left} not acknowledged")

    # consumer side: `consumed` / `retried` / `processed`; order-1's handler fails once, its retry copy succeeds
    handled: set[str] = set()
    failed_once: list[str] = []
    done = threading.Event()

    def handle(msg: Message) -> None:
        key = (msg.key() or b"").decode()
        if key == "order-1" and not failed_once:
            failed_once.append(key)
            raise TimeoutError("payment service")  # the Consumer schedules a retry copy
        handled.add(key)
        if len(handled) == args.count:
            done.set()

    # session.timeout.ms: only for a Tansu stack (`--broker tansu`), whose joins wait out the session timeout
    consumer = Consumer({**local, "group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "consumer.retry.backoff.ms": "200", "consumer.workers": 2})
    watchdog = threading.Thread(target=lambda: (done.wait(90), consumer.stop()), daemon=True)
    watchdog.start()
    consumer.run(handle, topics=[topic])  # returns once stopped, work finished and offsets committed
    consumer.close()
    print(f"handled {len(handled)} messages ({', '.join(failed_once)} after one retry)")

    print(f"running the pipeline once (Spark {args.master}), store {store} ...")
    pipeline = Pipeline(PipelineConfig(bootstrap=args.bootstrap, store=store, master=args.master))
    result = pipeline.run_once()
    pipeline.close()
    print(f"pipeline done in {result['seconds']}s: {result['queries']['trace']['rows']} trace events stored, "
          f"{len(result['inventory'])} clients in the inventory")

    print("\n$ ykafka trace order-1 --topic", topic)
    trace.main(["order-1", "--topic", topic, "--store", store], standalone_mode=False)


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
