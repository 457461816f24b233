"""Dual-DC failover and failback on two real clusters, counting every message.

dc-a is the primary, dc-b the standby. Writes move to dc-b while dc-a is down, return to dc-a as soon as
it answers, and what dc-b took during the outage is copied back to dc-a by the failback sync job.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.dr_fixtures import Broker, TailReader, create_topic, make_engine, read_all, tally, unique
from tests.test_spill_chaos import KEYS, Stream
from ykafka import headers as H
from ykafka.dr.engine import RouteSpec

pytest_plugins = ["tests.dr_fixtures"]


def _values(records: list[Any]) -> list[int]:
    return [int(m.value() or b"0") for m in records]


def _wait(predicate: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def test_primary_killed_under_load_fails_over_and_back(dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("failover")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    tail_a = TailReader(a.bootstrap, topic, 3)
    tail_b = TailReader(b.bootstrap, topic, 3)
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "auto"),
                         tmp_path / "dr")
    try:
        stream = Stream(engine, topic).start()
        time.sleep(1.0)
        a.kill()
        failover_s = _wait(lambda: len(tail_b.records) > 0, 15, "the first write on the standby")
        assert engine.status()["routes"][topic]["active"] == "dc-b"
        before_kill = tail_a.stop()  # what dc-a held when it died
        time.sleep(1.0)
        a.start()  # back, empty
        sent_at_restart = len(stream.sent)
        failback_s = _wait(lambda: engine.status()["routes"][topic]["active"] == "dc-a", 15, "failback")
        time.sleep(1.5)
        stream.stop()
        assert engine.wait_idle(90), engine.status()
        status = engine.status()
        on_b = tail_b.stop()
        on_a = read_all(a.bootstrap, topic)
    finally:
        engine.close()
    seen = {int(r[3] or b"0") for r in before_kill + on_b} | set(_values(on_a))
    acked_unseen = {i for i, _ in stream.acked} - seen  # acked by dc-a, lost with its memory
    # delivered where it ended up: dc-a (before the kill, or after it, directly or synced), else dc-b
    a_final = _values(on_a)
    landed = [int(r[3] or b"0") for r in before_kill] + a_final
    landed += sorted({int(r[3] or b"0") for r in on_b} - set(landed)) + sorted(acked_unseen)
    counts = tally(stream.sent, landed)
    outage = {int(r[3] or b"0") for r in on_b}
    a_values = set(a_final)
    synced = [m for m in on_a if H.synced_from(m.headers())]
    print(f"failover: {counts} failover_s={failover_s:.2f} failback_s={failback_s:.2f} on_standby={len(outage)} "
          f"synced={len(synced)} acked_unseen={len(acked_unseen)} sync={status['sync']}")
    assert counts["lost"] == 0 and counts["unexpected"] == 0 and counts["duplicated"] < 100
    assert len(outage) > 100
    assert outage <= a_values, f"{len(outage - a_values)} outage messages missing on the primary"
    assert len(synced) >= len(outage)
    late = [i for i in stream.sent if i >= sent_at_restart + 200]  # well after the failback
    assert late and all(i in a_values and i not in outage for i in late)
    assert status["sync"] and status["sync"][-1]["state"] == "done"
    assert status["outages"] == []
    assert failover_s < 10 and failback_s < 10


def test_manual_switch_moves_writes_and_syncs_back(dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("manual")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    route = {"spec": RouteSpec("dc-a", "dc-b", "manual")}
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, lambda _t: route["spec"], tmp_path / "dr")
    try:
        stream = Stream(engine, topic)
        stream.send(100)
        route["spec"] = RouteSpec("dc-a", "dc-b", "manual", active="standby")  # route.active=standby
        stream.send(100)
        assert engine.status()["routes"][topic]["active"] == "dc-b"
        engine.flush(10)
        route["spec"] = RouteSpec("dc-a", "dc-b", "manual")  # back: writes return, the sync starts
        stream.send(100)
        assert engine.wait_idle(60), engine.status()
        on_a, on_b = read_all(a.bootstrap, topic), read_all(b.bootstrap, topic)
        status = engine.status()
    finally:
        engine.close()
    counts = tally(stream.sent, _values(on_a))
    print("manual switch:", counts, "on standby:", len(on_b), "sync:", status["sync"])
    assert counts["lost"] == 0 and counts["duplicated"] == 0
    assert sorted(_values(on_b)) == list(range(100, 200))
    synced = sorted(int(m.value() or b"0") for m in on_a if (m.headers() or []) and
                    H.synced_from(m.headers()) == "dc-b")
    assert synced == list(range(100, 200))
    by_key: dict[bytes | None, list[int]] = {}
    for m in sorted(on_a, key=lambda m: (m.partition() or 0, m.offset() or 0)):
        if int(m.value() or b"0") >= 100 and not (m.headers() or []):
            continue
        by_key.setdefault(m.key(), []).append(int(m.value() or b"0"))
    assert len(by_key) == KEYS  # synced records keep their key, so their partition
    assert all(v == sorted(v) for v in by_key.values())
