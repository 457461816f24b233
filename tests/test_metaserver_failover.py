"""SDK failover between peer MetaServers on one database: the GrantClient moves to the survivor when its
instance is SIGKILLed, and grant, renew (of the dead instance's token) and report keep working; an admin client
given both moves to the survivor too (admin push)."""

from __future__ import annotations

import os
import random
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

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
