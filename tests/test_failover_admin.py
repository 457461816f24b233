"""Manual dual-DC switch end to end: `ykafka admin failover` pushes hot config through the MetaServer, a
running Producer (DR engine attached) moves its writes to the standby and back, and the failback sync
copies the window back to the primary. Nothing is killed: the session stack's brokers are shared."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.conftest import StackInfo, unique
from tests.dr_fixtures import create_topic, read_all, tally
from ykafka import Producer
from ykafka import headers as H
from ykafka.admin.client import AdminClient
from ykafka.admin.failover import push_failover
from ykafka.dr.attach import attach


def test_admin_failover_moves_writes_and_syncs_back(stack: StackInfo, tmp_path: Path) -> None:
    a, b = stack.clusters["dc-a"], stack.clusters["dc-b"]
    topic = unique("admin-failover")
    for bootstrap in (a, b):
        create_topic(bootstrap, topic, 3)
    admin = AdminClient(stack.metaserver, stack.admin_token, operator="test_failover_admin")
    producer = Producer(stack.client_config(**{"ykafka.cache.dir": str(tmp_path / "cache"), "log_level": 0}))
    engine = attach(producer)
    sent: list[int] = []
    acked: set[int] = set()

    def cb(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(int(msg.value()))

    def send(n: int) -> None:
        for _ in range(n):
            i = len(sent)
            producer.produce(topic, str(i).encode(), key=str(i % 4).encode(), on_delivery=cb)
            sent.append(i)
        producer.flush(10)

    def active() -> str:
        send(1)
        return str(engine.status()["routes"][topic]["active"])

    def wait_active(cluster: str) -> None:
        deadline = time.monotonic() + 30
        while active() != cluster:
            assert time.monotonic() < deadline, f"writes never moved to {cluster}: {engine.status()['routes']}"
            time.sleep(0.2)

    try:
        send(50)
        assert active() == "dc-a"
        preview = push_failover(admin, "standby", topic=topic, mode="manual", dry_run=True)
        assert preview["changes"]
        push_failover(admin, "standby", topic=topic, mode="manual")
        wait_active("dc-b")
        send(50)
        push_failover(admin, "primary", topic=topic)
        wait_active("dc-a")
        send(50)
        assert engine.wait_idle(60), engine.status()
        status = engine.status()
        on_a, on_b = read_all(a, topic), read_all(b, topic)
    finally:
        engine.close()
        producer.close()
    counts = tally(sent, [int(m.value() or b"0") for m in on_a])
    synced = [m for m in on_a if H.synced_from(m.headers())]
    print("admin failover:", counts, "on standby:", len(on_b), "synced:", len(synced), "sync:", status["sync"])
    assert counts["lost"] == 0 and counts["duplicated"] == 0
    assert len(on_b) >= 50 and len(synced) == len(on_b)
    assert acked == set(sent)
