"""An asyncio service consuming with ``AIOConsumer.run`` and an ``async def`` handler, for the SIGTERM test.

Usage: python -m tests.aio_consumer_child BOOTSTRAP TOPIC GROUP OUT_FILE CACHE_DIR

A handler appends its value to ``OUT_FILE.started`` when it starts and ``<value> <partition> <offset>`` to
OUT_FILE when it finishes (one ``write`` each on O_APPEND descriptors). Exits 0 after a graceful stop.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from ykafka.aio import AIOConsumer


async def main(argv: list[str]) -> int:
    bootstrap, topic, group, out_file, cache_dir = argv[:5]
    started = os.open(out_file + ".started", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    done = os.open(out_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def handler(msg: Any) -> None:
        os.write(started, f"{int(msg.value())}\n".encode())
        await asyncio.sleep(0.02)
        os.write(done, f"{int(msg.value())} {msg.partition()} {msg.offset()}\n".encode())

    consumer = AIOConsumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "ykafka.cache.dir": cache_dir,
        "consumer.workers": 16, "consumer.ordering": "key", "ykafka.consumer.commit.interval.ms": 200,
    })
    try:
        await consumer.run(handler, topics=[topic])  # returns after SIGTERM: drained and committed
    finally:
        await consumer.close()
        os.close(started)
        os.close(done)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
