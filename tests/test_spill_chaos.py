"""Chaos on real durable clusters: the cluster disappears mid-stream, messages spill to disk and replay in order.

Every message carries its sequence number as its value and ``i % KEYS`` as its key; each test counts
sent / delivered / lost / duplicated end to end, strictly: the cluster (two Tansu brokers on the S3 engine)
keeps what it acknowledged across a SIGKILL, so lost = 0 and duplicated = 0 exactly, with the retries of
messages in flight at the break counted apart (``strict_count``), and no key overtaken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dr_fixtures import create_topic, in_key_order, make_engine, read_all, strict_count, tally, unique
from tests.helpers import wait_until
from tests.support import Broker
from ykafka.dr.engine import RouteSpec

KEYS = 8


class Stream:
    """Produces 0, 1, 2, ... through the engine from a thread, recording what was accepted and acked."""

    def __init__(self, engine: Any, topic: str, gap_s: float = 0.001) -> None:
        self.engine = engine
        self.topic = topic
        self.gap_s = gap_s
        self.sent: list[int] = []
        self.acked: list[tuple[int, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((int(msg.value()), time.monotonic()))
        else:
            self.errors.append(str(err))

    def send(self, n: int) -> None:
        for _ in range(n):
            i = len(self.sent)
            self.engine.produce(self.topic, str(i).encode(), key=str(i % KEYS).encode(), on_delivery=self._cb)
            self.sent.append(i)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send(1)
            time.sleep(self.gap_s)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def running(self) -> bool:
        """The sending thread is still alive (``stop`` waited for it in vain): ``sent`` may still grow."""
        return self._thread.is_alive()


def test_broker_killed_mid_stream_spills_then_replays_in_order(one_broker: Broker, tmp_path: Path) -> None:
    """Every broker SIGKILLed mid-stream: sends spill to disk; the brokers restart on the same bucket and the
    spill replays. Every message sent is read back (what the brokers had acknowledged is still there)."""
    topic = unique("spill-kill")
    create_topic(one_broker.bootstrap, topic, 3)
    engine = make_engine({"solo": one_broker.bootstrap}, RouteSpec("solo"), tmp_path / "spill")
    try:
        stream = Stream(engine, topic).start()
        wait_until(lambda: len(stream.acked) >= 300, 20, message="300 acknowledged")
        one_broker.kill()  # mid-stream: some messages queued, some in flight
        killed_at = time.monotonic()
        wait_until(lambda: engine.status()["spill"]["solo"]["depth"] >= 300, 20, message="300 spilled")
        assert not engine.status()["links"]["solo"]["available"]
        one_broker.start()  # same addresses, same bucket
        wait_until(lambda: engine.status()["replay"]["solo"]["replayed"] >= 100, 30, message="replay under way")
        stream.stop()  # new sends of a spilled key queued behind the replay meanwhile
        assert engine.wait_idle(60), engine.status()
        status = engine.status()
    finally:
        engine.close()
    records = read_all(one_broker.bootstrap, topic, expect=len(stream.sent))
    counts = strict_count(stream.sent, [int(m.value() or b"0") for m in records],
                          {i for i, at in stream.acked if at < killed_at})
    print("cluster kill:", counts, "replayed:", status["replay"]["solo"]["replayed"])
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert not stream.errors
    assert status["replay"]["solo"]["replayed"] >= 300
    assert status["spill"]["solo"]["depth"] == 0
    assert len({i for i, _ in stream.acked}) == len(stream.sent)  # every callback fired (same process)
    assert in_key_order(records)


def test_frozen_broker_times_out_into_spill_and_everything_arrives(one_broker: Broker, tmp_path: Path) -> None:
    """SIGSTOP: a silent network partition. Deliveries time out after spill.after.ms, the cluster's data
    survives, so the final read must hold every message, per key in order."""
    topic = unique("spill-freeze")
    create_topic(one_broker.bootstrap, topic, 3)
    engine = make_engine({"solo": one_broker.bootstrap}, RouteSpec("solo"), tmp_path / "spill",
                         spill_after_ms=1500)
    try:
        stream = Stream(engine, topic).start()
        wait_until(lambda: len(stream.acked) >= 200, 20, message="200 acknowledged")
        one_broker.freeze()
        frozen_at = time.monotonic()
        wait_until(lambda: engine.status()["spill"]["solo"]["depth"] >= 200, 20, message="200 spilled")
        depth = engine.status()["spill"]["solo"]["depth"]
        one_broker.thaw()
        wait_until(lambda: engine.status()["replay"]["solo"]["replayed"] >= 100, 30, message="replay under way")
        stream.stop()
        assert engine.wait_idle(60), engine.status()
    finally:
        engine.close()
    records = read_all(one_broker.bootstrap, topic, expect=len(stream.sent))
    # in flight at the freeze: the thawed broker stores what sat in its socket buffer, whose delivery had already
    # timed out into the spill and is replayed (a retry, counted apart)
    counts = strict_count(stream.sent, [int(m.value() or b"0") for m in records],
                          {i for i, at in stream.acked if at < frozen_at})
    print("broker freeze:", counts, "spilled at peak:", depth)
    assert depth >= 200
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert not stream.errors
    assert in_key_order(records)


ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _spill_then_sigkill(broker: Broker, child: list[str], tail: list[str]) -> list[int]:
    """Run the child producer, take the broker away, SIGKILL the child mid-spill; returns the ids whose
    ``produce`` returned (0..99 were acknowledged before the broker went away)."""
    proc = subprocess.Popen([*child, "produce", *tail], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                            env=ENV, cwd=ROOT)
    assert proc.stdout is not None and proc.stdin is not None
    accepted: list[int] = []
    killed = False
    spilling_at: int | None = None
    try:
        for line in proc.stdout:
            word, _, arg = line.strip().partition(" ")
            if word == "A":
                accepted.append(int(arg))
            elif word == "READY":  # phase 1 acknowledged: take the cluster away, then let it go on
                broker.kill()
                proc.stdin.write("GO\n")
                proc.stdin.flush()
            elif word == "SPILLING":
                spilling_at = len(accepted)
            if spilling_at is not None and len(accepted) >= spilling_at + 300 and not killed:
                proc.send_signal(signal.SIGKILL)  # mid-spill: produce() calls are running
                killed = True
    finally:
        proc.wait(30)
    assert killed and proc.returncode == -signal.SIGKILL
    return accepted


def _heard_or_read(accepted: list[int], values: list[int]) -> list[int]:
    """``accepted`` plus the message whose ``produce`` the SIGKILL interrupted (the id after the last accepted)
    when it was read back: it reached the journal before its ``A`` line did, so it was accepted too, and from
    then on it counts like every other (lost, copies, order)."""
    interrupted = len(accepted)
    assert accepted == list(range(interrupted))  # the child numbers its messages 0, 1, 2, ...
    return accepted + [interrupted] if interrupted in values else accepted


def _recover(child: list[str], tail: list[str]) -> int:
    recover = subprocess.run([*child, "recover", *tail], capture_output=True, text=True, env=ENV, timeout=120,
                             cwd=ROOT)
    assert recover.returncode == 0, recover.stderr[-2000:]
    return int(recover.stdout.split("REPLAYED ")[1].split()[0])


@pytest.mark.parametrize("via", ["engine", "producer"])
def test_client_sigkilled_while_spilling_loses_nothing(one_broker: Broker, tmp_path: Path, via: str) -> None:
    """The producer process dies (SIGKILL) while it spills; the next run on the same spill dir replays."""
    topic = unique("spill-sigkill")
    create_topic(one_broker.bootstrap, topic, 3)
    child = [sys.executable, "-m", "tests.dr_child", one_broker.bootstrap, str(tmp_path / "spill"), topic]
    tail = [via] if via == "producer" else []
    accepted = _spill_then_sigkill(one_broker, child, tail)
    one_broker.start()
    replayed = _recover(child, tail)
    records = read_all(one_broker.bootstrap, topic, expect=len(accepted))
    # 0..99 were acknowledged (flushed) before the kill, nothing was in flight: no copy is legitimate
    values = [int(m.value() or b"0") for m in records]
    counts = tally(_heard_or_read(accepted, values), values)
    print(f"client SIGKILL ({via}):", counts, "accepted:", len(accepted), "replayed after restart:", replayed)
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert counts["sent"] >= 400 and replayed >= counts["sent"] - 100
    assert in_key_order(records)


def test_replay_killed_mid_way_resumes_on_the_next_start(one_broker: Broker, tmp_path: Path) -> None:
    """A crash during replay (records in flight, none acknowledged yet) loses nothing: the next start
    replays from the oldest record still on disk (at-least-once: duplicates allowed)."""
    topic = unique("replay-sigkill")
    create_topic(one_broker.bootstrap, topic, 3)
    child = [sys.executable, "-m", "tests.dr_child", one_broker.bootstrap, str(tmp_path / "spill"), topic]
    accepted = _spill_then_sigkill(one_broker, child, [])
    one_broker.start()
    one_broker.freeze()  # the replay sends, nothing is acknowledged
    proc = subprocess.Popen([*child, "recover"], stdout=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if "spill.replay_start" in line:
                time.sleep(1.0)
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    one_broker.thaw()
    replayed = _recover(child, [])
    records = read_all(one_broker.bootstrap, topic, expect=len(accepted))
    # the killed recovery's sends sat in the frozen brokers' socket buffers: once thawed they may store them, and
    # the second recovery sends them again (none was acknowledged): retries, counted apart
    values = [int(m.value() or b"0") for m in records]
    counts = strict_count(_heard_or_read(accepted, values), values, set(range(100)))
    print("replay SIGKILL:", counts, "replayed by the second recovery:", replayed)
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert replayed >= counts["sent"] - 100 >= 300
    assert in_key_order(records)


# --- the spill journal under SIGKILL (no broker: the queue on its own) --------------------------------

@pytest.mark.parametrize(("variant", "kill_at"), [("plain", 30_000), ("ack", 30_000), ("fsync", 1_000),
                                                  ("small-segments", 30_000)])
def test_single_thread_sync_spill_sigkilled_mid_way_loses_nothing(tmp_path: Path, variant: str,
                                                                 kill_at: int) -> None:
    """One thread appends in sync mode and records every seq whose append returned (line-flushed); it is
    SIGKILLed mid-way. Reopening yields every recorded message once, with its key and value, each key in
    order. ``ack``: a replayer-like thread acknowledges committed records meanwhile; those may come back
    (their chunk delete rides on the next commit), the others must. ``small-segments``: 64 KiB journal
    segments, so the kill lands amid segment rotation and deletion."""
    from tests.spill_child import Recorded, check_reopened, kill_after

    record = tmp_path / "record"
    extra = {"plain": [], "ack": ["--ack"], "fsync": ["--fsync"], "small-segments": ["--segment-bytes", "65536"]}
    kill_after(["append", str(tmp_path / "spill"), str(record), *extra[variant]], record, kill_at)
    recorded = Recorded(record)
    counts = check_reopened(tmp_path / "spill", recorded)
    print(f"journal SIGKILL ({variant}):", counts)
    assert counts["accepted"] >= (kill_at // 4 if variant == "ack" else kill_at)  # ack lines count too
    if variant == "ack":
        assert counts["acked"] > 0
        assert counts["present"] + counts["acked"] - counts["acked_back"] >= counts["accepted"]
    else:
        assert counts["present"] - counts["extra"] == counts["accepted"]


def test_a_spill_queue_the_disk_cannot_take_never_fails_a_send(one_broker: Broker, tmp_path: Path) -> None:
    """Issue 38's 30-minute soak (seed 3): with the spill disk full, the engine opened the standby's link for a
    re-routed send, its spill queue could not write its owner lock (``OSError: [Errno 28] No space left on
    device`` out of ``produce``) and the producer process died with 956 sends unanswered. A queue that cannot be
    made (here: a file where its directory goes) leaves the link without a spill: sends still go to the cluster
    and are acknowledged."""
    spill = tmp_path / "dr"
    spill.mkdir()
    (spill / "solo").write_text("not a directory")
    topic = unique("spill-unwritable")
    create_topic(one_broker.bootstrap, topic, 1)
    engine = make_engine({"solo": one_broker.bootstrap}, RouteSpec("solo"), spill)
    acked: list[int] = []

    def send(numbers: range) -> None:
        for i in numbers:
            engine.produce(topic, str(i).encode(), key=b"k",
                           on_delivery=lambda err, msg: acked.append(int(msg.value())) if err is None else None)
        assert engine.flush(30) == 0

    try:
        send(range(50))
        status = engine.status()
        (spill / "solo").unlink()  # the disk takes the queue again: the maintenance thread opens it
        deadline = time.monotonic() + 10
        while "solo" not in engine.status()["spill"] and time.monotonic() < deadline:
            time.sleep(0.1)
        reopened = engine.status()["spill"]
        send(range(50, 100))
    finally:
        engine.close()
    assert "solo" not in status["spill"], status  # no queue, reported as none
    assert "solo" in reopened, reopened  # within 10 s of the disk taking it
    assert sorted(acked) == list(range(100)), status
