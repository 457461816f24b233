"""An asyncio service that produces and consumes with ykafka's asyncio clients while operators change it live.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``) it needs nothing else:

    python samples/asyncio_service.py [--topic aio-orders] [--rate 500] [--seconds 0] [--demo-changes]

One task produces keyed messages with ``ykafka.aio.AIOProducer`` (awaiting each delivery future in the
background), another consumes them with ``AIOConsumer.run`` and an ``async def`` handler (``consumer.workers``
of them in flight). Every second it prints what was sent, acknowledged and handled and the producer settings
in force; each hot-config change shows up there without a restart. Try, from another shell:

    ykafka admin config set topic:aio-orders producer.linger.ms=20
    ykafka admin config set group:aio-service consumer.workers=32

``--demo-changes`` (needs YKAFKA_ADMIN_TOKEN, which dev.env exports) pushes such changes itself half-way.
The last line is ``sent N, acknowledged N, handled N: OK`` when nothing was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from ykafka import YKafkaError
from ykafka.admin import AdminClient
from ykafka.aio import AIOConsumer, AIOProducer
from ykafka.logs import configure
from ykafka.oneline import debug_requested, explain
from ykafka.oneline import run as run_sample

GROUP = "aio-service"


async def push_demo_changes(topic: str) -> None:
    """What an operator would type, through the MetaServer (validated, released through the config center)."""
    admin = AdminClient(os.environ["YKAFKA_METASERVER"], os.environ["YKAFKA_ADMIN_TOKEN"],
                        operator="samples/asyncio_service")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: admin.push_config(f"topic:{topic}", {"producer.linger.ms": "20"}))
    await loop.run_in_executor(None, lambda: admin.push_config(f"group:{GROUP}", {"consumer.workers": "32"}))
    print("  >> pushed producer.linger.ms=20 (topic) and consumer.workers=32 (group)")


async def run(args: argparse.Namespace) -> int:
    producer = AIOProducer({})  # identity and clusters from the environment (YKAFKA_*)
    consumer = AIOConsumer({"group.id": GROUP, "auto.offset.reset": "earliest", "consumer.workers": 8,
                            "consumer.ordering": "key"})
    sent = acked = 0
    handled: set[str] = set()
    pending: set[asyncio.Future[Any]] = set()

    def delivered(fut: asyncio.Future[Any]) -> None:
        nonlocal acked
        pending.discard(fut)
        if not fut.cancelled() and fut.exception() is None:
            acked += 1

    async def handler(msg: Any) -> None:
        await asyncio.sleep(0.002)  # the service's own async work (a database call, an HTTP request)
        handled.add(msg.value().decode())

    # the first message creates the topic (auto-create) before the consumer subscribes: a consumer subscribed
    # to a topic that does not exist yet only sees it at its next metadata refresh
    first = await producer.produce(args.topic, b"user-0:0", b"user-0")
    await first
    sent = acked = 1
    consuming = asyncio.create_task(consumer.run(handler, [args.topic]))
    started = time.monotonic()
    next_report = started + 1.0
    demo_at = started + args.seconds / 2 if args.demo_changes and args.seconds else None
    try:
        while not args.seconds or time.monotonic() - started < args.seconds:
            key = f"user-{sent % 16}"
            fut = await producer.produce(args.topic, f"{key}:{sent}".encode(), key.encode())
            fut.add_done_callback(delivered)
            pending.add(fut)
            sent += 1
            now = time.monotonic()
            if demo_at is not None and now >= demo_at:
                demo_at = None
                await push_demo_changes(args.topic)
            if now >= next_report:
                eff = producer.producer.applied_config(args.topic)
                workers = consumer.consumer.engine.pool.size if consumer.consumer.engine.pool else 0
                print(f"[{now - started:4.0f}s] sent {sent} acked {acked} handled {len(handled)} | "
                      f"linger.ms={eff['producer.linger.ms']} acks={eff['producer.acks']} "
                      f"cluster={producer.producer.route(args.topic)} workers={workers}")
                next_report = now + 1.0
            await asyncio.sleep(max(0.0, sent / args.rate - (time.monotonic() - started)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    await producer.flush(30)
    if pending:
        await asyncio.wait(pending, timeout=30)
    deadline = time.monotonic() + 30
    while len(handled) < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    consumer.stop()
    await consuming
    await consumer.close()
    await producer.close()
    ok = acked == sent and len(handled) == sent
    print(f"sent {sent}, acknowledged {acked}, handled {len(handled)}: {'OK' if ok else 'MISSING MESSAGES'}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="aio-orders")
    parser.add_argument("--rate", type=float, default=500.0, help="messages per second")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0 = until Ctrl-C)")
    parser.add_argument("--demo-changes", action="store_true", help="push hot-config changes half-way")
    args = parser.parse_args()
    configure(os.environ.get("YKAFKA_LOG_LEVEL", "warning"))
    if not os.environ.get("YKAFKA_METASERVER"):
        print("no identity: `source .ykafka/dev.env` after `ykafka dev up`", file=sys.stderr)
        return 2
    if args.demo_changes and not os.environ.get("YKAFKA_ADMIN_TOKEN"):
        print("--demo-changes needs YKAFKA_ADMIN_TOKEN (dev.env exports it)", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args))
    except YKafkaError as exc:
        if explain(exc) is not None or debug_requested():
            raise  # configuration / identity / connection: run() answers one line naming the fix
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_sample(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
