"""The failback sync job on real brokers: a topic the standby did not have when the job subscribed (the outage
began with ``start_offsets={}``) is still copied, every record once, when it appears there later; two producer
processes of one app, failing over and back at different moments, each sync back every record they wrote."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as RawProducer

from tests.dr_fixtures import create_topic, overtakes, read_all
from tests.helpers import unique
from tests.support import Broker
from ykafka import headers as H
from ykafka.dr.sync import Outage, SyncJob

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.broker("kafka")  # disaster recovery: the failback copy between two Kafka clusters


def test_sync_copies_a_topic_the_standby_created_after_the_job_subscribed(brokers: dict[str, str]) -> None:
    primary, standby = brokers["dc-a"], brokers["dc-b"]
    topic = unique("late-topic")
    done = threading.Event()
    job = SyncJob(Outage("dc-a", "dc-b", topic, started=time.time(), start_offsets={}),
                  {"bootstrap.servers": standby}, {"bootstrap.servers": primary},
                  standby_idle=lambda: True, on_done=lambda _job: done.set(), idle_s=1.0)
    try:
        time.sleep(3.0)  # the job's consumer subscribed while the standby has no such topic
        assert job.copied == 0
        # no create_topic: the first write auto-creates it, as the DR engine's first outage write does
        producer = RawProducer({"bootstrap.servers": standby, "linger.ms": 5})
        for i in range(50):
            producer.produce(topic, f"{i}".encode(), f"k{i % 5}".encode())
        assert producer.flush(30) == 0
        assert done.wait(60), job.status()
    finally:
        job.stop()
    assert job.copied == 50
    values = sorted(int(m.value()) for m in read_all(primary, topic, 50))
    assert values == list(range(50))


class _Child:
    """A producer process of the app (``tests/dr_sync_child.py``), one command per line."""

    def __init__(self, dc: dict[str, Broker], spill: Path, topic: str, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.dr_sync_child", dc["dc-a"].bootstrap, dc["dc-b"].bootstrap, str(spill),
             topic, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.ask("")

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.startswith("OK"), f"{self.name} {command!r}: {line!r} (exit {self.proc.poll()})"
        return line[3:].strip()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.ask("quit")
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def test_two_processes_failing_over_at_different_moments_sync_back_every_record(
        dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    """Issue 38: two producer processes of one app, each failing over and back at its own moment. Before writer ids,
    both synced in one group, each from the standby offsets *it* recorded: the second process failed back first,
    copied from its own (later) start and committed the group to the end, and the first process's sync then found
    nothing left: its outage writes before the second's start (100 of them) never reached dc-a."""
    topic = unique("two-writers")
    for broker in dc_brokers.values():
        create_topic(broker.bootstrap, topic, 6)
    one = _Child(dc_brokers, tmp_path / "one", topic, "one")
    two = _Child(dc_brokers, tmp_path / "two", topic, "two")
    try:
        one.ask("standby")
        one.ask("send 0 100")          # before the second process's outage began
        two.ask("standby")             # records the standby's ends past "one"'s first 100
        two.ask("send 0 100")
        one.ask("send 100 100")        # interleaved with "two"'s outage
        two.ask("primary")
        synced_two = json.loads(two.ask("idle").split(" ", 1)[1])
        one.ask("primary")
        synced_one = json.loads(one.ask("idle").split(" ", 1)[1])
    finally:
        one.stop()
        two.stop()
    on_b = read_all(dc_brokers["dc-b"].bootstrap, topic, 300)
    assert len(on_b) == 300
    on_a = read_all(dc_brokers["dc-a"].bootstrap, topic, 300)
    values = sorted((m.value() or b"").decode() for m in on_a)
    expected = sorted([f"one:{i}" for i in range(200)] + [f"two:{i}" for i in range(100)])
    missing = sorted(set(expected) - set(values))
    assert not missing, f"{len(missing)} outage records never synced back to dc-a, e.g. {missing[:5]}; " \
                        f"syncs: {synced_one} {synced_two}"
    assert values == expected  # each exactly once (nothing failed: no copy is legitimate)
    assert all(H.synced_from(m.headers()) == "dc-b" for m in on_a)
    # each process copied exactly its own records and read past the other's
    assert [(s["copied"], s["skipped"], s["state"]) for s in synced_two] == [(100, 100, "done")]
    assert [(s["copied"], s["skipped"], s["state"]) for s in synced_one] == [(200, 100, "done")]
    mine = [(m.key(), (m.value() or b"").split(b":")[1]) for m in
            sorted(on_a, key=lambda m: (m.partition() or 0, m.offset() or 0)) if (m.value() or b"").startswith(b"one:")]
    assert not overtakes(mine)  # per key, in the order "one" sent them
