"""A WSGI service under gunicorn's prefork model with ``--preload``: the Producer is made once, at import, in the
master; every worker is a fork of it.

librdkafka's handles and ykafka's threads do not survive a fork. A ykafka Producer made before the fork rebuilds
itself in each worker on its first call there (its own handles, threads and spill slot; the master's stays the
master's), so the usual module-level producer just works. A Consumer cannot: make it in the worker (gunicorn's
``post_fork`` hook or a lazily created global).

Run::

    SAMPLE_TOPIC=orders gunicorn --preload -w 2 -b 127.0.0.1:8000 samples.gunicorn_prefork:app
    curl -X POST 'http://127.0.0.1:8000/send?count=10'    # -> {"pid": ..., "sent": 10, "client_id": ...}

Identity from the environment (YKAFKA_APP_ID / YKAFKA_APP_SECRET / YKAFKA_METASERVER), or local mode with
SAMPLE_BOOTSTRAP=host:port.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from ykafka import Producer

TOPIC = os.environ.get("SAMPLE_TOPIC", "orders")
_CONF: dict[str, Any] = {"log_level": 0}
if os.environ.get("SAMPLE_BOOTSTRAP"):
    _CONF["bootstrap.servers"] = os.environ["SAMPLE_BOOTSTRAP"]

_requests = itertools.count()  # per worker: with the pid, names each request's messages

#: made at import: in the gunicorn master with --preload, before the workers are forked
producer = Producer(_CONF)


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """POST /send?count=N sends N messages and waits for their delivery; answers with what this worker did."""
    if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") != "/send":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"POST /send?count=N\n"]
    try:
        count = int(parse_qs(environ.get("QUERY_STRING", "")).get("count", ["1"])[0])
    except ValueError:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"count must be an integer\n"]
    if not 0 < count <= 10_000:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"count must be between 1 and 10000\n"]
    acked: list[Any] = []
    request = next(_requests)
    for i in range(count):
        producer.produce(TOPIC, f"{os.getpid()}:{request}:{i}".encode(),
                         on_delivery=lambda err, _msg: acked.append(err))
    left = producer.flush(30)
    body = {"pid": os.getpid(), "sent": acked.count(None), "left": left, "client_id": producer.runtime.client_id}
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]
