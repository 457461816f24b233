"""Construction and close are exception-safe (issue 32 item 4): a failure injected at each step of
``Producer(...)`` or ``Producer.close()`` leaves no thread running and no spill slot held.

Each step is made to fail by replacing one real method with one that raises; everything else is real (a
broker, the spill directory, the DR engine's threads, librdkafka clients).
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import create_topic, unique, wait_until
from ykafka import Producer
from ykafka.dr import attach as dr_attach
from ykafka.dr.engine import DisasterRecovery
from ykafka.dr.health import HealthMonitor
from ykafka.dr.link import ClusterLink
from ykafka.dr.queue import SpillQueue
from ykafka.dr.replay import Replayer
from ykafka.dr.spilldir import SpillSlot
from ykafka.dr.sync import OutageStore
from ykafka.metrics import Observability
from ykafka.runtime import Runtime


class Injected(RuntimeError):
    pass


def _fail(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected failure")


def _ykafka_threads() -> set[threading.Thread]:
    # the process-wide producer-id worker (transport.ProducerIdHastener) outlives every producer by design
    return {t for t in threading.enumerate() if t.name.startswith("ykafka-") and t.name != "ykafka-producer-id"}


def _tasks() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/task"))


def _slot_free(cache: Path) -> bool:
    slot = SpillSlot(cache / "spill" / "local")
    try:
        return slot.path.name == "0"
    finally:
        slot.release()


#: tasks that may come and go meanwhile in a process shared with other test files (their leftover clients'
#: librdkafka threads); a leaked librdkafka handle brings at least three (main, internal, one per broker)
NOISE_TASKS = 2


def _settled(before: int, old: set[threading.Thread]) -> None:
    """No ykafka thread beyond ``old`` (left by earlier tests in this process) and the task count back."""
    try:
        wait_until(lambda: not (_ykafka_threads() - old) and _tasks() <= before + NOISE_TASKS, 15,
                   message="threads back")
    except AssertionError:
        raise AssertionError(f"threads not back: ykafka threads left {sorted(t.name for t in _ykafka_threads() - old)}"
                             f", {_tasks()} tasks, {before} before") from None


#: each step of construction (the Producer's and, inside it, the DR engine's), made to fail
CONSTRUCTION_STEPS = [
    (Runtime, "add_version_listener"),
    (Observability, "__init__"),
    (HealthMonitor, "add_listener"),
    (OutageStore, "load_all"),
    (DisasterRecovery, "_maintain_start"),
    (dr_attach, "_send_hook"),
    (Producer, "set_hooks"),
]

#: each step of close, made to fail (after doing its own work)
CLOSE_STEPS = [
    (DisasterRecovery, "flush"),
    (Replayer, "close"),
    (ClusterLink, "close"),
    (SpillQueue, "close"),
    (Producer, "_close_client"),
]


@pytest.mark.parametrize(("owner", "name"), CONSTRUCTION_STEPS,
                         ids=[f"{getattr(o, '__name__', o)}.{n}" for o, n in CONSTRUCTION_STEPS])
def test_a_failing_construction_step_leaves_nothing_running(brokers: dict[str, str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, owner: Any,
                                                            name: str) -> None:
    cache = tmp_path / "cache"
    conf = {"bootstrap.servers": brokers["dc-a"], "ykafka.cache.dir": str(cache)}
    with Producer(conf) as warm:  # the process-wide worker threads exist before the count
        warm.flush(1)
    old = _ykafka_threads()
    _settled(_tasks(), old)
    before = _tasks()
    if name == "_maintain_start":  # the engine's last step: its maintenance thread does not start
        monkeypatch.setattr(threading.Thread, "start", _fail_for("ykafka-dr", threading.Thread.start))
    else:
        monkeypatch.setattr(owner, name, _fail)
    with pytest.raises(Injected):
        Producer(conf)
    monkeypatch.undo()
    _settled(before, old)
    assert _slot_free(cache)


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


@pytest.mark.parametrize(("owner", "name"), CLOSE_STEPS, ids=[f"{o.__name__}.{n}" for o, n in CLOSE_STEPS])
def test_a_failing_close_step_still_stops_everything_and_frees_the_slot(brokers: dict[str, str], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch, owner: Any,
                                                                        name: str) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("close-step")
    create_topic(bootstrap, topic, 1)
    cache = tmp_path / "cache"
    conf = {"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(cache)}
    with Producer(conf) as warm:
        warm.flush(1)
    old = _ykafka_threads()
    _settled(_tasks(), old)
    before = _tasks()
    producer = Producer(conf)
    delivered: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda err, m: delivered.append(err))
    assert producer.flush(15) == 0 and delivered == [None]
    assert not _slot_free(cache)  # held while it runs
    monkeypatch.setattr(owner, name, _fail_after(getattr(owner, name)))
    with pytest.raises(Injected):
        producer.close(5)
    monkeypatch.undo()
    _settled(before, old)
    assert _slot_free(cache)
