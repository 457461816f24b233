"""Config pushes are all-or-nothing per namespace (issue 32 #6), through the real MetaServer, the real config
service and a real database.

A release that fails mid-push (a hop in front of the config service answers 503 to it) leaves the namespace as it
was, so the next operator's release holds only that operator's change; when even putting the items back fails,
the next push puts them back first. Two MetaServers on one database pushing to one namespace at once each publish
a release that differs from the one before by exactly their own change.
"""

from __future__ import annotations

import itertools
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

import requests  # noqa: E402

from tests.ms_fixtures import ADMIN_TOKEN, OPENAPI_TOKEN, MetaServer, require_pg  # noqa: E402
from tests.support import Proc  # noqa: E402
from ykafka.admin.client import AdminError  # noqa: E402

_HOP = ("host", "content-length", "connection", "transfer-encoding", "keep-alive")


class FailingHop:
    """An HTTP hop in front of the config service. Armed, it answers 503 to every release POST (main line and
    gray); with ``and_after``, once a release failed it also fails every later write (the center went away).
    With ``hold`` set, a release POST waits (``holding`` is set) until ``hold`` is cleared."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.armed = False
        self.and_after = False
        self.failed: list[str] = []
        self.hold = threading.Event()
        self.holding = threading.Event()
        hop = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                if hop.hold.is_set() and self.command == "POST" and path.endswith("/releases"):
                    hop.holding.set()
                    while hop.hold.is_set():
                        threading.Event().wait(0.05)
                if hop.armed and self.command != "GET" and (path.endswith("/releases") or
                                                            (hop.and_after and hop.failed)):
                    hop.failed.append(f"{self.command} {path}")
                    self._answer(503, b'{"message": "injected failure"}', "application/json")
                    return
                got = requests.request(self.command, hop.upstream + self.path, data=body or None, timeout=30,
                                       headers={k: v for k, v in self.headers.items() if k.lower() not in _HOP})
                self._answer(got.status_code, got.content, got.headers.get("Content-Type", "application/json"))

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hop_ms(ms_factory: Callable[..., MetaServer], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[MetaServer, FailingHop]]:
    home = tmp_path_factory.mktemp("cc-hop")
    cc = Proc("configcenter-hop", [sys.executable, "-m", "metaserver.configcenter", "serve", "--host", "127.0.0.1",
                                   "--port", "{port}", "--db", str(home / "cc.db"), "--longpoll-timeout", "2",
                                   "--openapi-token", OPENAPI_TOKEN], home / "cc.log").start()
    hop = FailingHop(cc.url)
    try:
        server = ms_factory(configcenter=False, configcenter_url=hop.url, configcenter_openapi_token=OPENAPI_TOKEN)
        server.configcenter_url = cc.url  # the tests read the config service itself, never through the hop
        yield server, hop
    finally:
        hop.close()
        cc.stop()


def _openapi(ms: MetaServer, path: str, **params: Any) -> Any:
    url = f"{ms.configcenter_url}/openapi/v1/envs/DEV/apps/{ms.apollo_app_id}/clusters/default/namespaces/{path}"
    response = requests.get(url, headers={"Authorization": OPENAPI_TOKEN}, params=params, timeout=10)
    response.raise_for_status()
    return response.json() if response.content else None


def _items(ms: MetaServer, namespace: str) -> dict[str, str]:
    data = _openapi(ms, f"{namespace}/items")
    return {row["key"]: row["value"] for row in (data["content"] if isinstance(data, dict) else data)}


def _releases(ms: MetaServer, namespace: str) -> list[dict[str, str]]:
    """Every release of the namespace, oldest first (configurations only)."""
    rows = _openapi(ms, f"{namespace}/releases/active", size=200)
    return [dict(r["configurations"]) for r in sorted(rows, key=lambda r: r["id"])]


def _topic() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}"


def test_a_release_failing_mid_push_leaves_the_namespace_as_it_was(hop_ms: tuple[MetaServer, FailingHop]) -> None:
    ms, hop = hop_ms
    topic, admin = _topic(), ms.admin(operator="alice")
    namespace, scope = f"ykafka.topic.{topic}", f"topic:{topic}"
    admin.push_config(scope, {"producer.acks": "1", "producer.compression": "lz4"})
    hop.armed = True
    try:
        with pytest.raises(AdminError) as err:
            admin.push_config(scope, {"producer.acks": "0", "producer.linger.ms": "7"}, delete=["producer.compression"])
        with pytest.raises(AdminError) as gray_err:  # a gray push opens a branch: closed again
            admin.push_config(scope, {"producer.linger.ms": "9"}, ips=["198.51.100.4"])
    finally:
        hop.armed = False
    assert (err.value.status, gray_err.value.status) == (502, 502)
    assert "injected failure" in err.value.message
    assert len(hop.failed) == 2 and all(f.startswith("POST ") for f in hop.failed)
    assert _items(ms, namespace) == {"producer.acks": "1", "producer.compression": "lz4"}  # the working copy too
    assert admin.get_config(scope)["released"] == {"producer.acks": "1", "producer.compression": "lz4"}
    assert admin.get_config(scope)["gray"] is None
    audit = admin.audit(target=namespace)
    assert [(a["operator"], a["action"]) for a in audit] == [
        ("alice", "config.gray.failed"), ("alice", "config.set.failed"), ("alice", "config.set")]
    failed = audit[1]
    assert failed["before"] == {"producer.acks": "1", "producer.compression": "lz4", "producer.linger.ms": None}
    assert failed["after"]["values"] == {"producer.acks": "0", "producer.compression": None, "producer.linger.ms": "7"}
    assert failed["after"]["restored"] is True and "503" in failed["after"]["error"]

    ms.admin(operator="bob").push_config(scope, {"producer.rate.limit.msgs": "50"})
    assert _releases(ms, namespace)[-2:] == [  # bob's release: exactly his change on top of what was in force
        {"producer.acks": "1", "producer.compression": "lz4"},
        {"producer.acks": "1", "producer.compression": "lz4", "producer.rate.limit.msgs": "50"}]


def test_items_that_could_not_be_put_back_are_put_back_by_the_next_push(
        hop_ms: tuple[MetaServer, FailingHop]) -> None:
    ms, hop = hop_ms
    topic, admin = _topic(), ms.admin(operator="alice")
    namespace, scope = f"ykafka.topic.{topic}", f"topic:{topic}"
    admin.push_config(scope, {"producer.acks": "1"})
    hop.armed = hop.and_after = True
    hop.failed.clear()
    try:
        with pytest.raises(AdminError):
            admin.push_config(scope, {"producer.acks": "0", "producer.linger.ms": "7"})
    finally:
        hop.armed = hop.and_after = False
    assert _items(ms, namespace) == {"producer.acks": "0", "producer.linger.ms": "7"}  # left: the center was gone
    assert admin.audit(target=namespace)[0]["after"]["restored"] is False
    admin.push_config(scope, {"producer.compression": "zstd"})
    assert _releases(ms, namespace)[-1] == {"producer.acks": "1", "producer.compression": "zstd"}
    assert _items(ms, namespace) == {"producer.acks": "1", "producer.compression": "zstd"}
    assert admin.audit(target=namespace)[0]["after"]["discarded"] == ["producer.acks", "producer.linger.ms"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_pushes_from_two_metaservers_each_release_exactly_their_own_change(
        ms_factory: Callable[..., MetaServer], tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "postgres":
        require_pg()
        db_url = request.getfixturevalue("pg_schema_factory")()
    else:
        db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    app_id = f"ykafka-t{uuid.uuid4().hex[:8]}"
    first = ms_factory(db_url=db_url, apollo_app_id=app_id)
    second = ms_factory(db_url=db_url, apollo_app_id=app_id)
    topic = _topic()
    namespace, scope = f"ykafka.topic.{topic}", f"topic:{topic}"
    first.admin().push_config(scope, {"producer.acks": "1"})
    rounds = 4
    plans = {"producer.linger.ms": [str(10 + i) for i in range(rounds)],
             "producer.rate.limit.msgs": [str(100 + i) for i in range(rounds)]}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def pusher(server: MetaServer, key: str) -> None:
        admin = server.admin(operator=key)
        start.wait()
        try:
            for value in plans[key]:
                admin.push_config(scope, {key: value})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(server, key))
               for server, key in zip((first, second), plans, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    releases = _releases(first, namespace)
    assert len(releases) == 1 + 2 * rounds
    steps = [{k: v for k, v in after.items() if before.get(k) != v} for before, after in itertools.pairwise(releases)]
    assert all(len(step) == 1 for step in steps), steps  # each release: one push's change, nothing of the other
    for key, values in plans.items():
        assert [step[key] for step in steps if key in step] == values
    audit = first.admin().audit(target=namespace, limit=50)
    assert sorted(a["action"] for a in audit) == ["config.set"] * (1 + 2 * rounds)


_SESSIONS: dict[tuple[str, str], tuple[requests.Session, str]] = {}


def _console_session(ms: MetaServer, role: str) -> tuple[requests.Session, str]:
    """A logged-in console session (a real user, the real login form) and its CSRF token, one per role."""
    if (ms.url, role) not in _SESSIONS:
        _SESSIONS[ms.url, role] = _log_in(ms, role)
    return _SESSIONS[ms.url, role]


def _log_in(ms: MetaServer, role: str) -> tuple[requests.Session, str]:
    name = f"{role}-{uuid.uuid4().hex[:6]}"
    created = requests.post(f"{ms.url}/v1/admin/users", json={"username": name, "password": "pw-123456789",
                                                              "role": role},
                            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    assert created.status_code == 201, created.text
    session = requests.Session()
    login = session.post(f"{ms.url}/console/login", data={"username": name, "password": "pw-123456789"}, timeout=10)
    assert login.status_code == 200 and login.url.endswith("/console/"), login.status_code
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None
    return session, csrf.group(1)


def test_a_console_publish_waiting_on_the_config_service_does_not_block_the_server(
        hop_ms: tuple[MetaServer, FailingHop]) -> None:
    """Issue 32 #7: while a publish waits on the config service, the MetaServer still answers (grants and reports
    are served by the same event loop)."""
    ms, hop = hop_ms
    session, csrf = _console_session(ms, "operator")
    topic = _topic()
    done: dict[str, Any] = {}
    hop.hold.set()
    hop.holding.clear()
    publish = threading.Thread(target=lambda: done.update(response=session.post(
        f"{ms.url}/console/config/publish", timeout=60, allow_redirects=False,
        data={"csrf": csrf, "scope": f"topic:{topic}", "changes": "producer.linger.ms=9", "ips": "", "labels": "",
              "comment": "held"})))
    publish.start()
    try:
        assert hop.holding.wait(30), "the publish never reached the release"
        health = requests.get(f"{ms.url}/health", timeout=10)  # on a blocked loop: a timeout
        assert health.status_code == 200
        assert "response" not in done  # the publish was still waiting meanwhile
    finally:
        hop.hold.clear()
        publish.join(timeout=60)
    assert done["response"].status_code == 303
    assert ms.admin().get_config(f"topic:{topic}")["released"] == {"producer.linger.ms": "9"}


@pytest.mark.parametrize(("role", "path", "form", "missing"), [
    ("operator", "/console/config/preview", {"changes": "producer.acks=1"}, "scope"),
    ("operator", "/console/config/publish", {"scope": "global"}, "changes"),
    ("operator", "/console/config/rollback", {}, "scope"),
    ("operator", "/console/config/promote", {}, "scope"),
    ("operator", "/console/config/abandon", {}, "scope"),
    ("admin", "/console/clusters/failover", {"to": "standby"}, "cluster"),
])
def test_a_console_form_missing_a_field_is_400_naming_it(hop_ms: tuple[MetaServer, FailingHop], role: str, path: str,
                                                          form: dict[str, str], missing: str) -> None:
    ms, _ = hop_ms
    session, csrf = _console_session(ms, role)
    marker = "<i>sent-value-" + uuid.uuid4().hex[:6]
    response = session.post(ms.url + path, data={"csrf": csrf, **form, "comment": marker}, timeout=30,
                            allow_redirects=False)
    assert response.status_code == 400
    assert f"missing form field(s): {missing}" in response.text
    assert "sent-value-" not in response.text  # nothing sent is echoed back
