"""The fork scenarios of tests/test_client_fork.py, each in a process of its own (forking pytest's process, with its
threads, is what the scenario is about, not what a test should do): ``python -m tests.fork_child METHOD BOOTSTRAP
TOPIC CACHE_DIR``, METHOD ``fork`` or ``forkserver``. Prints one JSON line.

``fork``: the parent makes a Producer and a Consumer and sends one message; 3 children forked afterwards each send
50 messages through the INHERITED producer (it rebuilds itself in the child) and try the inherited consumer
(ForkedClientError); the parent then sends 50 more on its own producer and closes it.
``forkserver``: children see no client of the parent; each makes its own Producer (confluent-kafka's advice),
sends 50 and closes it; passing a client to a child is refused with a clear error.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
from typing import Any

from ykafka import Consumer, ForkedClientError, Producer

CHILDREN = 3
PER_CHILD = 50

_producer: Producer | None = None
_consumer: Consumer | None = None


def _slots() -> list[str]:
    """The spill slots this process holds a lock file of (inherited ones included)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/slot.lock"):
            found.add(target.rsplit("/", 2)[-2])
    return sorted(found)


def forked_child(topic: str, out: Any) -> None:
    assert _producer is not None and _consumer is not None
    acked: list[Any] = []
    for i in range(PER_CHILD):
        _producer.produce(topic, f"child{os.getpid()}:{i}".encode(), on_delivery=lambda err, m: acked.append(err))
    left = _producer.flush(30)
    try:
        _consumer.poll(0.1)
        refused = "no error"
    except ForkedClientError as exc:
        refused = str(exc)
    closed = _consumer.close()  # nothing: the parent's member stays in the group
    out.put({"pid": os.getpid(), "left": left, "acked": acked.count(None), "client_id": _producer.runtime.client_id,
             "refused": refused, "consumer_close": closed, "slots": _slots()})
    _producer.close()


def own_child(bootstrap: str, topic: str, cache: str, out: Any) -> None:
    acked: list[Any] = []
    with Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": cache, "log_level": 0}) as producer:
        for i in range(PER_CHILD):
            producer.produce(topic, f"child{os.getpid()}:{i}".encode(), on_delivery=lambda err, m: acked.append(err))
        left = producer.flush(30)
        out.put({"pid": os.getpid(), "left": left, "acked": acked.count(None), "slots": _slots()})


def main(method: str, bootstrap: str, topic: str, cache: str) -> None:
    global _producer, _consumer
    conf = {"bootstrap.servers": bootstrap, "ykafka.cache.dir": cache, "log_level": 0}
    ctx = multiprocessing.get_context(method)
    out = ctx.Queue()
    report: dict[str, Any] = {"method": method}
    if method == "fork":
        _producer = Producer(conf)
        _consumer = Consumer({**conf, "group.id": f"{topic}-g"})
        _producer.produce(topic, b"parent:before")
        assert _producer.flush(30) == 0
        report["parent_slots"] = _slots()
        children = [ctx.Process(target=forked_child, args=(topic, out)) for _ in range(CHILDREN)]
    else:
        try:
            pickle.dumps(Producer(conf))
            report["pickle"] = "no error"
        except TypeError as exc:
            report["pickle"] = str(exc)
        children = [ctx.Process(target=own_child, args=(bootstrap, topic, cache, out)) for _ in range(CHILDREN)]
    for child in children:
        child.start()
    report["children"] = [out.get(timeout=120) for _ in children]
    for child in children:
        child.join(60)
    report["exitcodes"] = [child.exitcode for child in children]
    if _producer is not None:
        for i in range(PER_CHILD):
            _producer.produce(topic, f"parent:{i}".encode())
        report["parent_left"] = _producer.close(30)
        assert _consumer is not None
        _consumer.close()
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
