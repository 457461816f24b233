"""Manual dual-DC switch end to end: `ykafka admin failover` pushes hot config through the MetaServer, a
running Producer (DR engine attached) moves its writes to the standby and back, and the failback sync
copies the window back to the primary. Nothing is killed: the session stack's brokers are shared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.conftest import unique
from tests.dr_fixtures import create_topic, read_all, tally
from tests.support import LocalStack
from ykafka import Producer
from ykafka import headers as H
from ykafka.admin.client import AdminClient
from ykafka.cli import main
from ykafka.dr.attach import attach


def cli(stack: LocalStack, *args: str) -> Any:
    """``ykafka admin ARGS`` against the session's MetaServer; the parsed JSON when ``--json`` was given."""
    out = CliRunner().invoke(main, ["admin", "--url", stack.metaserver, "--token", stack.admin_token,
                                    "--operator", "test_failover_admin", *args], terminal_width=200)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout) if "--json" in args else out.output


def test_admin_failover_moves_writes_and_syncs_back(stack: LocalStack, tmp_path: Path) -> None:
    a, b = stack.clusters["dc-a"], stack.clusters["dc-b"]
    topic = unique("admin-failover")
    for bootstrap in (a, b):
        create_topic(bootstrap, topic, 3)
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
        preview = cli(stack, "--json", "failover", "standby", "--topic", topic, "--mode", "manual", "--dry-run")
        assert {c["key"]: c["after"] for c in preview["changes"]} == {"route.active": "standby",
                                                                     "route.failover": "manual"}
        assert active() == "dc-a"  # a dry run writes nothing
        cli(stack, "failover", "standby", "--topic", topic, "--mode", "manual")
        wait_active("dc-b")
        send(50)
        cli(stack, "failover", "primary", "--topic", topic)
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


def test_admin_failover_of_a_cluster_is_audited_and_shown_in_clusters(stack: LocalStack) -> None:
    """A whole cluster: the switch is pushed at ``cluster:dc-a``, audited, listed by ``admin clusters``;
    ``clear`` gives the route back to health and hot config."""
    def writes_to() -> str:
        rows = cli(stack, "--json", "clusters", "list")
        return str(next(r for r in rows if r["name"] == "dc-a")["writes_to"])

    assert writes_to() == "primary"
    assert "dry run" in cli(stack, "failover", "standby", "--cluster", "dc-a", "--dry-run")
    assert writes_to() == "primary"
    try:
        assert "dc-a -> standby" in cli(stack, "failover", "standby", "--cluster", "dc-a")
        assert writes_to() == "standby"
        entries = AdminClient(stack.metaserver, stack.admin_token).audit(operator="test_failover_admin")
        assert any(e["target"] == "ykafka.cluster.dc-a" and e["after"]["values"] == {"route.active": "standby"}
                   for e in entries), entries
        cli(stack, "failover", "primary", "--cluster", "dc-a")
        assert writes_to() == "primary"
    finally:
        cli(stack, "failover", "clear", "--cluster", "dc-a")
    assert writes_to() == "primary"
    bad = CliRunner().invoke(main, ["admin", "--url", stack.metaserver, "--token", stack.admin_token,
                                    "failover", "standby"])
    assert bad.exit_code == 2 and "exactly one of --cluster or --topic" in bad.output
