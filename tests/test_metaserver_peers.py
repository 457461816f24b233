"""Stateless peers: two MetaServer processes on one database answer alike (PostgreSQL, and SQLite too).

A grant from one renews on the other, a nonce used on one is refused by the other, failure counters and
admin changes are shared, and a server with several uvicorn workers behaves as one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

from tests.ms_fixtures import MetaServer, fake_ip, inside_one_fail_window, new_app  # noqa: E402


@pytest.fixture(scope="module")
def peers(ms_backend: str, ms_factory: Callable[..., MetaServer], tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> tuple[MetaServer, MetaServer]:
    if ms_backend == "postgres":
        db_url = request.getfixturevalue("pg_schema_factory")()
    else:
        db_url = f"sqlite:///{tmp_path_factory.mktemp('peers') / 'shared.db'}"
    first = ms_factory(db_url=db_url, apollo_app_id="ykafka-peers")
    second = ms_factory(db_url=db_url, apollo_app_id="ykafka-peers", workers=2)
    first.admin().set_cluster("dc-a", "127.0.0.1:19001", dc="a")
    return first, second


def _stable(grant: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in grant.items() if k not in ("token", "expires_at")}


def test_same_answers_and_cross_renewal(peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    app = new_app(a)
    on_a = a.sdk(app.app_id, app.secret)
    on_b = b.sdk(app.app_id, app.secret)
    grant_a = on_a.grant("peer-client").json()
    grant_b = on_b.grant("peer-client").json()
    assert _stable(grant_a) == _stable(grant_b)
    renewed_on_b = on_b.renew(grant_a["token"])
    assert renewed_on_b.status_code == 200
    assert _stable(renewed_on_b.json()) == _stable(grant_a)
    assert on_a.renew(renewed_on_b.json()["token"]).status_code == 200
    # an ACL change made through one peer is in the next renewal from the other
    b.admin().set_acl(app.app_id, produce=["only-this"])
    assert on_a.renew(grant_b["token"]).json()["acl"]["produce"] == ["only-this"]
    # reports posted to either peer land in one view
    assert on_a.report(grant_a["token"], client_id="x1").status_code == 204
    assert on_b.report(grant_a["token"], client_id="x2").status_code == 204
    assert {c["client_id"] for c in a.admin().clients(app=app.app_id)} == {"x1", "x2"}
    assert len(b.admin().client_history(app=app.app_id)) == 2


def test_nonce_replayed_across_peers_is_rejected(peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    app = new_app(a)
    sdk = a.sdk(app.app_id, app.secret)
    raw, headers = sdk.grant_request()
    assert sdk.post_grant(raw, headers, url=a.url).status_code == 200
    replay = sdk.post_grant(raw, headers, url=b.url)
    assert (replay.status_code, replay.json()) == (401, {"detail": "authentication failed"})
    raw2, headers2 = sdk.grant_request()
    assert sdk.post_grant(raw2, headers2, url=b.url).status_code == 200
    assert sdk.post_grant(raw2, headers2, url=a.url).status_code == 401


def test_failure_counters_are_shared(peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    inside_one_fail_window()
    app = new_app(a)
    codes = []
    attacker = fake_ip()
    for i in range(5):  # limit 5 per (app, source) per window, spread over both peers
        server = a if i % 2 else b
        codes.append(server.sdk(app.app_id, "wrong", ip=attacker).grant().status_code)
    assert codes == [401] * 5
    assert a.sdk(app.app_id, app.secret, ip=attacker).grant().status_code == 429  # both peers see the count
    assert b.sdk(app.app_id, app.secret, ip=attacker).grant().status_code == 429
    assert b.sdk(app.app_id, app.secret).grant().status_code == 200  # the app itself, from its host, is not locked


def test_secret_rotation_seen_by_both(peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    app = new_app(b)
    token = a.sdk(app.app_id, app.secret).grant().json()["token"]
    new_secret = a.admin().rotate_secret(app.app_id)["secret"]
    assert b.sdk(app.app_id, app.secret).grant().status_code == 401
    assert b.sdk(app.app_id, app.secret).renew(token).status_code == 401
    assert b.sdk(app.app_id, new_secret).grant().status_code == 200
