"""Fixtures for the config-center tests: the real service as a subprocess on a free port, over real HTTP.

`cc` is one server per test module (tests isolate themselves with their own app ids); `cc_factory` starts
extra servers for tests that restart one or need their own. Servers are stopped by their own pid.
Test modules load this file with `pytest_plugins = ["tests.cc_fixtures"]` and import its names only for
type checking, so pytest can rewrite its asserts.

`YKAFKA_TEST_CC_DB=postgres` runs every server of these fixtures on a fresh PostgreSQL schema instead of a
SQLite file (a manual check of the PostgreSQL backend; the suite's PostgreSQL cases are in
tests/test_configcenter_peers.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-openapi-token"
ENV = "DEV"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ParkedPoll:
    """A long poll running in a thread, so a test can publish while it is parked."""

    def __init__(self, fn: Callable[[], requests.Response]) -> None:
        self.result: requests.Response | None = None
        self.answered_at = 0.0

        def run() -> None:
            self.result = fn()
            self.answered_at = time.monotonic()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 10) -> requests.Response:
        self.thread.join(timeout)
        assert self.result is not None, "long poll did not answer"
        return self.result


_PG_SCHEMAS: list[Any] = []  # the PgSchemas of YKAFKA_TEST_CC_DB=postgres, dropped at exit
_PG_BY_FILE: dict[str, str] = {}  # DB file name -> its schema's URL


def _database(db: Path) -> str:
    """The `--db` of a server: the SQLite file, or under YKAFKA_TEST_CC_DB=postgres one schema per file name."""
    if os.environ.get("YKAFKA_TEST_CC_DB") != "postgres":
        return str(db)
    import atexit

    from tests.ms_fixtures import PgSchemas

    if not _PG_SCHEMAS:
        _PG_SCHEMAS.append(PgSchemas("cc_test"))
        atexit.register(_PG_SCHEMAS[0].drop)
    if str(db) not in _PG_BY_FILE:
        _PG_BY_FILE[str(db)] = _PG_SCHEMAS[0].make()
    return _PG_BY_FILE[str(db)]


class CCServer:
    """`python -m metaserver.configcenter serve` on a free port with its own DB file (or PostgreSQL URL)."""

    def __init__(self, db: Path, longpoll_timeout: float = 2.0, token: str = TOKEN) -> None:
        self.db = db
        self.database = _database(db)
        self.longpoll_timeout = longpoll_timeout
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = db.with_suffix(f".{self.port}.log")

    def start(self) -> CCServer:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "metaserver.configcenter", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--db", self.database, "--longpoll-timeout", str(self.longpoll_timeout),
                 "--openapi-token", self.token],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"config center exited: {self.log.read_text()}")
            try:
                if requests.get(self.url + "/health", timeout=0.5).json() == {"status": "ok"}:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("config center did not become healthy")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def poll(self, app: str, notifications: list[dict[str, Any]], cluster: str = "default", timeout: float = 10,
             **params: str) -> requests.Response:
        """One `/notifications/v2` long poll, as Apollo clients send it."""
        return requests.get(self.url + "/notifications/v2",
                            params={"appId": app, "cluster": cluster, "notifications": json.dumps(notifications),
                                    **params}, timeout=timeout)

    def park(self, app: str, notifications: list[dict[str, Any]], settle: float = 0.3,
             **params: str) -> ParkedPoll:
        """Start a long poll in a thread and give it `settle` seconds to be parked on the server."""
        parked = ParkedPoll(lambda: self.poll(app, notifications, **params))
        time.sleep(settle)
        return parked

    def cli(self, *args: str) -> str:
        """Run the admin CLI against this server's DB; returns stdout stripped."""
        out = subprocess.run([sys.executable, "-m", "metaserver.configcenter", *args, "--db", self.database],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                             text=True, check=True, timeout=30)
        return out.stdout.strip()


class OpenApi:
    """A thin Open API client, as an Apollo script would call it (paths and bodies from Apollo's docs)."""

    def __init__(self, url: str, token: str = TOKEN) -> None:
        self.url = url
        self.http = requests.Session()
        self.http.headers.update({"Authorization": token, "Content-Type": "application/json;charset=UTF-8"})

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> requests.Response:
        data = json.dumps(body) if body is not None else None
        return self.http.request(method, self.url + "/openapi/v1" + path, data=data, params=params or None,
                                 timeout=10)

    @staticmethod
    def new_app_id(prefix: str = "app") -> str:
        """A fresh app id, so tests sharing one server never see each other's data."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def ns_path(self, app: str, ns: str, cluster: str = "default") -> str:
        return f"/envs/{ENV}/apps/{app}/clusters/{cluster}/namespaces/{ns}"

    def ok(self, resp: requests.Response) -> Any:
        assert resp.status_code == 200, (resp.status_code, resp.text)
        return resp.json() if resp.content else None

    def create_app(self, app: str) -> None:
        self.ok(self.call("POST", "/apps", {"app": {"appId": app, "name": app, "orgId": "infra", "orgName": "Infra",
                                                    "ownerName": "ops"}, "admins": ["ops"]}))

    def create_namespace(self, app: str, ns: str, fmt: str = "properties", public: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.ok(self.call("POST", f"/apps/{app}/appnamespaces", {
            "name": ns, "appId": app, "format": fmt, "isPublic": public, "dataChangeCreatedBy": "ops",
            "comment": "test"}))
        return result

    def set_item(self, app: str, ns: str, key: str, value: str, cluster: str = "default") -> None:
        self.ok(self.call("PUT", f"{self.ns_path(app, ns, cluster)}/items/{quote(key, safe='')}",
                          {"key": key, "value": value, "dataChangeLastModifiedBy": "ops",
                           "dataChangeCreatedBy": "ops"}, createIfNotExists="true"))

    def publish(self, app: str, ns: str, cluster: str = "default", title: str = "release") -> dict[str, Any]:
        result: dict[str, Any] = self.ok(self.call("POST", f"{self.ns_path(app, ns, cluster)}/releases",
                                                   {"releaseTitle": title, "releaseComment": "by test",
                                                    "releasedBy": "ops"}))
        return result

    def setup(self, app: str, ns: str, items: dict[str, str], publish: bool = True) -> dict[str, Any] | None:
        """App (created if needed) + namespace + items (+ a release)."""
        if self.call("GET", f"/apps/{app}").status_code != 200:
            self.create_app(app)
        if ns != "application":
            self.create_namespace(app, ns)
        for k, v in items.items():
            self.set_item(app, ns, k, v)
        return self.publish(app, ns) if publish else None


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CCServer]:
    server = CCServer(tmp_path_factory.mktemp("cc") / "configcenter.db").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api(cc: CCServer) -> OpenApi:
    return OpenApi(cc.url)


@pytest.fixture
def cc_factory(tmp_path: Path) -> Iterator[Callable[..., CCServer]]:
    """Starts servers on demand (default: a fresh DB under tmp_path); stops every one at the end."""
    started: list[CCServer] = []

    def start(db: Path | None = None, longpoll_timeout: float = 2.0) -> CCServer:
        server = CCServer(db or tmp_path / f"cc-{len(started)}.db", longpoll_timeout).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
