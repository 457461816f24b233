"""A FastAPI service whose asyncio Kafka clients live exactly as long as the app: made in the lifespan, closed
when uvicorn shuts down (SIGTERM / Ctrl-C), so nothing is left queued or running.

Clients are made inside the lifespan (the running event loop; after any fork of the server's workers), never at
import: an asyncio client belongs to its loop, and a client made before a fork cannot be used in the child.

Run::

    SAMPLE_TOPIC=orders uvicorn samples.fastapi_lifespan:app --port 8000
    curl -X POST 'http://127.0.0.1:8000/send?count=10'    # -> {"sent": 10}
    curl http://127.0.0.1:8000/stats                        # -> {"sent": 10, "consumed": 10}

Identity from the environment (YKAFKA_APP_ID / YKAFKA_APP_SECRET / YKAFKA_METASERVER), or local mode with
SAMPLE_BOOTSTRAP=host:port. The consumer reads partition 0 of the topic from the beginning (assigned: no group
join to wait for).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING
from fastapi import FastAPI, HTTPException, Query

from ykafka.aio import AIOConsumer, AIOProducer
from ykafka.transport import TopicPartition

TOPIC = os.environ.get("SAMPLE_TOPIC", "orders")
CONF: dict[str, Any] = {"log_level": 0}
if os.environ.get("SAMPLE_BOOTSTRAP"):
    CONF["bootstrap.servers"] = os.environ["SAMPLE_BOOTSTRAP"]

stats = {"sent": 0, "consumed": 0}


async def _consume(consumer: AIOConsumer) -> None:
    while True:
        msg = await consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            stats["consumed"] += 1


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    producer = AIOProducer(CONF)
    consumer = AIOConsumer({**CONF, "group.id": f"{TOPIC}-sample", "enable.auto.commit": False})
    await consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    reader = asyncio.create_task(_consume(consumer))
    app.state.producer = producer
    try:
        yield
    finally:  # uvicorn's shutdown: stop reading, deliver what is queued, release both clients
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        left = await producer.close()
        await consumer.close()
        print(f"closed: sent {stats['sent']}, consumed {stats['consumed']}, undelivered {left}", flush=True)


app = FastAPI(lifespan=lifespan)


@app.post("/send")
async def send(count: int = Query(1, ge=1, le=10_000)) -> dict[str, int]:
    """Send ``count`` messages and wait until each is acknowledged."""
    producer: AIOProducer = app.state.producer
    futures = [await producer.produce(TOPIC, f"m:{stats['sent'] + i}".encode()) for i in range(count)]
    try:
        await asyncio.gather(*futures)
    except Exception as exc:
        raise HTTPException(status_code=503, detail=f"not delivered: {type(exc).__name__}") from None
    stats["sent"] += count
    return {"sent": count}


@app.get("/stats")
async def read_stats() -> dict[str, int]:
    return dict(stats)
