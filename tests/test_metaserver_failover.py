"""SDK failover between peer MetaServers on one database: the GrantClient moves to the survivor when its
instance is SIGKILLed, and grant, renew (of the dead instance's token) and report keep working; an admin client
given both moves to the survivor too (admin push)."""

from __future__ import annotations

import os
import random
import signal
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, new_app
from ykafka.admin.client import AdminClient
from ykafka.auth import GrantClient
from ykafka.endpoints import Endpoints


def test_grant_client_fails_over_to_a_peer_on_the_same_database(
        ms_backend: str, ms_factory: Callable[..., MetaServer], request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    db_url = (request.getfixturevalue("pg_schema_factory")() if ms_backend == "postgres"
              else f"sqlite:///{tmp_path / 'shared.db'}")
    a = ms_factory(db_url=db_url)
    b = ms_factory(db_url=db_url, apollo_app_id=a.apollo_app_id)
    app = new_app(a)  # created through A, used through B
    client = GrantClient(f"{a.url},{b.url}", app.app_id, app.secret, f"c-{uuid.uuid4().hex[:6]}", "10.0.0.7",
                         tmp_path / "cache", timeout_s=2.0)
    try:
        while client.endpoints.current != a.url:  # start on A
            client.endpoints = Endpoints([a.url, b.url])
        grant = client.authenticate()
        assert client.metaserver == a.url and grant.app_id == app.app_id
        assert a.proc.proc is not None
        os.killpg(a.proc.proc.pid, signal.SIGKILL)
        a.proc.proc.wait(timeout=10)
        a.proc.proc = None
        renewed = client.renew(grant)  # A's token, renewed by B
        assert client.metaserver == b.url and renewed.app_id == app.app_id
        assert client.report(renewed, {"client_id": client.client_id, "app_id": app.app_id, "role": "producer"})
        assert client.authenticate().app_id == app.app_id
        # `ykafka admin` given both MetaServers (dev.env of `dev up --replicas 2`): an admin push still works
        admin = AdminClient(f"{a.url},{b.url}", ADMIN_TOKEN)
        admin.endpoints = Endpoints([a.url, b.url], rng=random.Random(0))
        while admin.url != a.url:  # start on the dead one
            admin.endpoints.failed(admin.url)
        pushed = admin.push_config(f"topic:orders.{uuid.uuid4().hex[:6]}", {"producer.linger.ms": 7})
        assert admin.url == b.url and pushed["release"] and pushed["changes"][0]["after"] == "7"
    finally:
        client.close()


CLIENTS = 8


def test_clients_starting_and_reporting_while_a_metaserver_is_killed_all_succeed(
        ms_backend: str, ms_factory: Callable[..., MetaServer], request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    """Issue 21: SIGKILL one of two peers while clients start (grant) and report: every start succeeds, every
    acknowledged report is stored (read back through the survivor), at most one report per client is lost
    (the one in flight at the kill), and an admin push through the pair still works."""
    db_url = (request.getfixturevalue("pg_schema_factory")() if ms_backend == "postgres"
              else f"sqlite:///{tmp_path / 'shared.db'}")
    a = ms_factory(db_url=db_url)
    b = ms_factory(db_url=db_url, apollo_app_id=a.apollo_app_id)
    app = new_app(a)
    tag = uuid.uuid4().hex[:8]
    stop, killed = threading.Event(), threading.Event()
    errors: list[str] = []
    starts_before: list[int] = [0] * CLIENTS
    starts_after: list[int] = [0] * CLIENTS
    acked: list[tuple[str, int]] = []
    unacked: list[tuple[str, int]] = []

    def client_loop(index: int) -> None:
        n = 0
        while not stop.is_set():
            client = GrantClient(f"{a.url},{b.url}", app.app_id, app.secret, f"c-{tag}-{index}-{n}", "10.0.0.9",
                                 tmp_path / f"cache-{index}", timeout_s=2.0)
            n += 1
            try:
                grant = client.authenticate()
                (starts_after if killed.is_set() else starts_before)[index] += 1
                for seq in range(3):
                    body = {"client_id": client.client_id, "app_id": app.app_id, "role": "producer",
                            "extra": {"tag": tag, "seq": seq}}
                    (acked if client.report(grant, body) else unacked).append((client.client_id, seq))
            except Exception as exc:  # a start that failed: the assertion below names it
                errors.append(f"{client.client_id}: {exc!r}")
            finally:
                client.close()

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: sum(starts_before) >= 2 * CLIENTS, timeout=60)
        assert a.proc.proc is not None
        os.killpg(a.proc.proc.pid, signal.SIGKILL)
        killed.set()
        a.proc.proc.wait(timeout=10)
        a.proc.proc = None
        wait_until(lambda: min(starts_after) >= 2, timeout=60)  # every client started again, after the kill
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert errors == []
    stored = {(r["client_id"], r["extra"]["seq"])
              for r in b.admin().client_history(app=app.app_id, limit=10000) if r["extra"].get("tag") == tag}
    assert len(acked) < 10000
    missing = sorted(set(acked) - stored)
    assert missing == []
    assert len(unacked) <= CLIENTS, unacked  # at most the report each client had in flight at the kill
    admin = AdminClient(f"{a.url},{b.url}", ADMIN_TOKEN)
    pushed = admin.push_config(f"topic:orders.{tag}", {"producer.linger.ms": 9})
    assert admin.url == b.url and pushed["changes"][0]["after"] == "9"
