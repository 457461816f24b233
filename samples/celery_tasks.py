"""Celery tasks sending to Kafka from a prefork worker pool.

Celery's prefork pool forks its worker processes from the main one after this module is imported, so the
module-level Producer below is made before the fork. librdkafka's handles and ykafka's threads do not survive a
fork; a ykafka Producer rebuilds itself in each pool process on its first call there (its own handles, threads and
spill slot), so a task just uses it. (A Consumer cannot: make it in the process, e.g. in ``worker_process_init``.)

Run (any Celery broker; this sample's default is a local directory, no server needed)::

    SAMPLE_TOPIC=orders SAMPLE_CELERY_DIR=/tmp/celery celery -A samples.celery_tasks worker --pool=prefork -c 2
    python -c "from samples.celery_tasks import send; send.delay(10)"

Identity from the environment (YKAFKA_APP_ID / YKAFKA_APP_SECRET / YKAFKA_METASERVER), or local mode with
SAMPLE_BOOTSTRAP=host:port.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from celery import Celery

from ykafka import Producer

TOPIC = os.environ.get("SAMPLE_TOPIC", "orders")
_DIR = Path(os.environ.get("SAMPLE_CELERY_DIR", "/tmp/ykafka-celery-sample"))
for _sub in ("queue", "processed"):
    (_DIR / _sub).mkdir(parents=True, exist_ok=True)

app = Celery("samples.celery_tasks", broker="filesystem://")
app.conf.broker_transport_options = {"data_folder_in": str(_DIR / "queue"), "data_folder_out": str(_DIR / "queue"),
                                     "processed_folder": str(_DIR / "processed")}
app.conf.task_ignore_result = True

_CONF: dict[str, Any] = {"log_level": 0}
if os.environ.get("SAMPLE_BOOTSTRAP"):
    _CONF["bootstrap.servers"] = os.environ["SAMPLE_BOOTSTRAP"]

#: made at import, in Celery's main process, before the pool's processes are forked
producer = Producer(_CONF)
_calls = itertools.count()  # per pool process: with the pid, names each task's messages


@app.task
def send(count: int) -> int:
    """Send ``count`` messages and wait for their delivery; returns how many were acknowledged."""
    acked: list[Any] = []
    call = next(_calls)
    for i in range(count):
        producer.produce(TOPIC, f"{os.getpid()}:{call}:{i}".encode(), on_delivery=lambda err, _m: acked.append(err))
    producer.flush(30)
    print(f"task sent {acked.count(None)} of {count} from pid {os.getpid()} as {producer.runtime.client_id}",
          flush=True)
    return acked.count(None)
