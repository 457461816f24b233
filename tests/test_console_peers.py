"""Console state lives in the database: a session made on one MetaServer peer is honoured by another,
a lockout counted on one holds on the other, logout on one ends it everywhere (PostgreSQL and SQLite)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import requests

from tests.helpers import unique
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, new_app

PASSWORD = "peer-pass-123"


@pytest.fixture(scope="module")
def peers(ms_backend: str, ms_factory: Callable[..., MetaServer], tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> tuple[MetaServer, MetaServer]:
    if ms_backend == "postgres":
        db_url = request.getfixturevalue("pg_schema_factory")()
    else:
        db_url = f"sqlite:///{tmp_path_factory.mktemp('console-peers') / 'shared.db'}"
    return ms_factory(db_url=db_url), ms_factory(db_url=db_url)


def _cli_create(server: MetaServer, name: str, role: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", "--url", server.url, "--token", ADMIN_TOKEN,
                           "users", "create", name, "--role", role, "--password", PASSWORD],
                          capture_output=True, text=True, timeout=60)


def test_ykafka_admin_users_create_makes_a_user_and_refuses_a_short_password(
        peers: tuple[MetaServer, MetaServer]) -> None:
    a, _ = peers
    name = unique("cli")
    made = _cli_create(a, name, "operator")
    assert made.returncode == 0, made.stderr
    assert f"console user {name} (operator) ready" in made.stdout
    again = _cli_create(a, name, "operator")
    assert again.returncode != 0 and "user exists" in again.stderr + again.stdout
    short = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", "--url", a.url, "--token", ADMIN_TOKEN,
                            "users", "create", unique("s"), "--password", "short"],
                           capture_output=True, text=True, timeout=60)
    assert short.returncode != 0 and "8" in short.stderr + short.stdout
    listed = requests.get(a.url + "/v1/admin/users", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    row = [u for u in listed.json() if u["username"] == name][0]
    assert row["role"] == "operator" and "password" not in str(row)


def test_a_session_from_one_peer_works_on_the_other_and_logout_ends_it_on_both(
        peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    name = unique("peer")
    assert _cli_create(a, name, "viewer").returncode == 0
    sess = requests.Session()
    resp = sess.post(a.url + "/console/login", data={"username": name, "password": PASSWORD}, allow_redirects=False,
                     timeout=10)
    assert resp.status_code == 303
    cookie = resp.cookies.get("ykafka_console")
    assert cookie and "HttpOnly" in resp.headers["set-cookie"] and "SameSite=strict" in resp.headers["set-cookie"]
    page = requests.get(b.url + "/console/", cookies={"ykafka_console": cookie}, timeout=10, allow_redirects=False)
    assert page.status_code == 200 and name in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    # the topics page counts live clients per topic in the database (json_each / json_array_elements_text)
    app = new_app(a, acl={"produce": ["*"], "consume": ["*"], "group": ["*"]})
    sdk = a.sdk(app.app_id, app.secret)
    token = sdk.grant().json()["token"]
    topic = unique("peer-topic")
    for n, (role, group) in enumerate([("producer", None), ("producer", None), ("consumer", "g1")]):
        assert sdk.report(token, client_id=f"c{n}", role=role, group=group, topics=[topic, "other"]).status_code == 204
    topics = requests.get(b.url + f"/console/topics?q={topic}", cookies={"ykafka_console": cookie}, timeout=10)
    assert topics.status_code == 200 and "1 topic in live clients" in topics.text, topics.text[:500]
    row = re.search(rf'<tr data-topic="{topic}">.*?class="producers">(\d+)</td>.*?>g1</a></td><td>(\d+)</td>',
                    topics.text, re.S)
    assert row and row.groups() == ("2", "1"), topics.text[-1500:]
    # the topic's own page reads the same on the other peer: its three live clients and the group g1
    own = requests.get(b.url + f"/console/topics/{topic}", cookies={"ykafka_console": cookie}, timeout=30)
    assert own.status_code == 200 and 'id="client-count">3</span>' in own.text, own.text[-1500:]
    assert sorted(re.findall(r'<tr data-client="([^"]+)" data-role="([a-z]+)"', own.text)) == [
        ("c0", "producer"), ("c1", "producer"), ("c2", "consumer")]
    out = requests.post(b.url + "/console/logout", data={"csrf": csrf.group(1)}, cookies={"ykafka_console": cookie},
                        timeout=10, allow_redirects=False)
    assert out.status_code == 303
    after = requests.get(a.url + "/console/", cookies={"ykafka_console": cookie}, timeout=10, allow_redirects=False)
    assert after.status_code == 303 and after.headers["location"] == "/console/login"


def test_wrong_passwords_counted_on_both_peers_lock_the_user(peers: tuple[MetaServer, MetaServer]) -> None:
    a, b = peers
    name = unique("lock")
    assert _cli_create(a, name, "viewer").returncode == 0
    for i in range(5):
        server = a if i % 2 else b
        wrong = requests.post(server.url + "/console/login", data={"username": name, "password": "nope-nope"},
                              timeout=10, allow_redirects=False)
        assert wrong.status_code == 401
    for server in (a, b):
        right = requests.post(server.url + "/console/login", data={"username": name, "password": PASSWORD},
                              timeout=10, allow_redirects=False)
        assert right.status_code == 429
