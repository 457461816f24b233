"""Message trace, end to end: send a few traced messages, consume them (one fails once and is retried),
run the pipeline once, then print one key's lifecycle the way ``ykafka trace KEY`` does.

Run against the local stack:  ykafka dev up && source .ykafka/dev.env && python samples/trace_lookup.py
(the cluster comes from YKAFKA_BOOTSTRAP_DC_A or --bootstrap; the store defaults to a temporary folder).

Until the ykafka Producer / Consumer call the Tracer themselves, this sample does what their hooks do,
around plain confluent-kafka clients: decide sampling per message, wrap the delivery callback (which
emits ``produced`` + ``acked``), and trace each step on the consumer side.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer

from pipeline.cli import trace
from pipeline.runner import Pipeline, PipelineConfig
from ykafka.metrics import Metrics, local_versions
from ykafka.oneline import run
from ykafka.sink import EventSink
from ykafka.tracing import Tracer

TRACE_ALL = {"trace.enabled": True, "trace.sample.rate": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("YKAFKA_BOOTSTRAP_DC_A"))
    parser.add_argument("--store", default=None, help="pipeline store (default: a temporary folder)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--count", type=int, default=5)
    args = parser.parse_args()
    if not args.bootstrap:
        parser.error("no cluster: pass --bootstrap or source .ykafka/dev.env")
    store = args.store or tempfile.mkdtemp(prefix="ykafka-trace-")
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    sink = EventSink({"bootstrap.servers": args.bootstrap})
    tracer = Tracer.for_client("sample-app-1", "127.0.0.1", None, app="sample", cluster="dc-a", sink=sink)
    rate = tracer.rate(TRACE_ALL)

    # producer side: what the ykafka Producer's trace hooks do per message
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5})
    for i in range(args.count):
        key = f"order-{i}"
        headers = []
        callback = None
        mid = tracer.sample(rate, f"{topic}-{i}")  # the Producer passes its ykafka-id here
        if mid is not None:
            headers.append(("ykafka-id", mid))
            callback = tracer.wrap_delivery(None, topic, key, mid)
        producer.produce(topic, f"order #{i}".encode(), key.encode(), headers=headers, on_delivery=callback)
    producer.flush(30)
    print(f"produced {args.count} messages to {topic}")

    # consumer side: consumed / retried / processed, as the ykafka Consumer's hooks will report them
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "enable.auto.commit": False})
    consumer.subscribe([topic])
    handled, failed_once = 0, False
    deadline = time.monotonic() + 60
    while handled < args.count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        waited_ms = time.time() * 1000 - msg.timestamp()[1]
        tracer.trace_message("consumed", msg, rate=rate, group=group, latency_ms=waited_ms)
        if msg.key() == b"order-1" and not failed_once:  # the handler fails once: retried, delivered again
            failed_once = True
            tracer.trace_message("retried", msg, rate=rate, group=group, error="TimeoutError: payment service")
            time.sleep(0.2)  # the retry back-off
            tracer.trace_message("consumed", msg, rate=rate, group=group, detail="retry 1")
        started = time.monotonic()
        tracer.trace_message("processed", msg, rate=rate, group=group,
                             latency_ms=(time.monotonic() - started) * 1000)
        handled += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    # the client reports itself (inventory)
    metrics = Metrics(sink, "sample-app-1", "consumer", app="sample", cluster="dc-a", group=group, own_sink=False)
    metrics.client_event({"client_id": "sample-app-1", "app_id": "sample", "ip": "127.0.0.1", "hostname": "local",
                          "pid": os.getpid(), "versions": local_versions(), "role": "consumer", "topics": [topic],
                          "group": group, "cluster": "dc-a", "state": "running"})
    metrics.close(final_state=None)
    sink.close()

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
