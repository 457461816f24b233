"""One exception-safety scenario of tests/test_producer_lifecycle.py in a process of its own:
``python -m tests.lifecycle_child construct|close OWNER NAME BOOTSTRAP CACHE_DIR``.

The scenario counts the process's threads (``/proc/self/task``), so it runs where no other test file's leftover
librdkafka clients can come and go meanwhile (CI's shared worker held hundreds of tasks of earlier files). The
last line is ``SETTLED`` or ``NOT SETTLED <what was left>``.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from ykafka import Producer
from ykafka.dr import attach as dr_attach
from ykafka.dr.engine import DisasterRecovery
from ykafka.dr.health import HealthMonitor
from ykafka.dr.link import ClusterLink
from ykafka.dr.queue import SpillQueue
from ykafka.dr.replay import Replayer
from ykafka.dr.spilldir import SpillSlot
from ykafka.dr.sync import OutageStore
from ykafka.observability import Observability
from ykafka.runtime import Runtime

#: every step of construction (the Producer's and, inside it, the DR engine's) and of close that can be made to fail
OWNERS: dict[str, Any] = {
    "Runtime": Runtime, "Observability": Observability, "HealthMonitor": HealthMonitor, "OutageStore": OutageStore,
    "DisasterRecovery": DisasterRecovery, "ykafka.dr.attach": dr_attach, "Producer": Producer, "Replayer": Replayer,
    "ClusterLink": ClusterLink, "SpillQueue": SpillQueue}


class Injected(RuntimeError):
    pass


def _fail(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected failure")


def _fail_after(real: Any) -> Any:
    """The real step, then a failure (what it started is stopped; the steps after it must still run)."""

    def step(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise Injected("injected failure")

    return step


def _fail_for(thread_name: str, real: Any) -> Any:
    def start(self: threading.Thread) -> None:
        if self.name == thread_name:
            raise Injected("injected failure")
        real(self)

    return start


def _ykafka_threads() -> set[str]:
    # the process-wide producer-id worker (transport.ProducerIdHastener) outlives every producer by design
    return {t.name for t in threading.enumerate() if t.name.startswith("ykafka-") and t.name != "ykafka-producer-id"}


def _tasks() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/task"))


def _settle(before: int, old: set[str], timeout_s: float = 15.0) -> str | None:
    """None once no ykafka thread beyond ``old`` is left and the task count is back, else what is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = _ykafka_threads() - old
        if not left and _tasks() <= before:
            return None
        if time.monotonic() > deadline:
            return f"ykafka threads left {sorted(left)}, {_tasks()} tasks, {before} before"
        time.sleep(0.05)


def _slot_free(cache: Path) -> bool:
    slot = SpillSlot(cache / "spill" / "local")
    try:
        return slot.path.name == "0"
    finally:
        slot.release()


def _raises(call: Any) -> bool:
    try:
        call()
    except Injected:
        return True
    return False


def construct(owner: Any, name: str, conf: dict[str, Any], cache: Path) -> str | None:
    before, old = _tasks(), _ykafka_threads()
    real = (threading.Thread, "start", threading.Thread.start) if name == "_maintain_start" else \
        (owner, name, getattr(owner, name))
    # the engine's last step: its maintenance thread does not start
    setattr(real[0], real[1], _fail_for("ykafka-dr", real[2]) if name == "_maintain_start" else _fail)
    try:
        if not _raises(lambda: Producer(conf)):
            return "construction did not fail"
    finally:
        setattr(*real)
    return _settle(before, old) or (None if _slot_free(cache) else "spill slot still held")


def close(owner: Any, name: str, conf: dict[str, Any], cache: Path) -> str | None:
    topic = f"close-step-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": conf["bootstrap.servers"]})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
    del admin
    before, old = _tasks(), _ykafka_threads()
    producer = Producer(conf)
    delivered: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda err, m: delivered.append(err))
    if producer.flush(15) != 0 or delivered != [None]:
        return f"not delivered: {delivered}"
    if _slot_free(cache):
        return "spill slot not held while the producer runs"
    real = getattr(owner, name)
    setattr(owner, name, _fail_after(real))
    try:
        if not _raises(lambda: producer.close(5)):
            return "close did not fail"
    finally:
        setattr(owner, name, real)
    return _settle(before, old) or (None if _slot_free(cache) else "spill slot still held")


def main() -> int:
    mode, owner, name, bootstrap, cache_dir = sys.argv[1:6]
    cache = Path(cache_dir)
    conf = {"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(cache)}
    with Producer(conf) as warm:  # the process-wide worker threads exist before the count
        warm.flush(1)
    _settle(_tasks(), _ykafka_threads())
    problem = (construct if mode == "construct" else close)(OWNERS[owner], name, conf, cache)
    sys.stdout.write("SETTLED\n" if problem is None else f"NOT SETTLED {problem}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
