"""Fixtures for the MetaServer tests: real processes (``tests.support``) over real HTTP, on free ports, stopped by
their pid.

- ``ms_cc``: one embedded config center (``python -m metaserver.configcenter serve``) per module.
- ``ms_backend``: ``"sqlite"`` and ``"postgres"`` (skipped with a reason when PostgreSQL
  does not answer, failed instead under ``YKAFKA_TEST_PG_REQUIRED=1``);
  each PostgreSQL run gets a fresh schema that is dropped afterwards, so runs repeat cleanly.
- ``ms``: a MetaServer on that backend, wired to the config center with its own Apollo app id.
- ``ms_factory``: extra MetaServers (e.g. two peers on one database, or one with a short token TTL).
- ``SdkClient``: signs requests exactly like the SDK does (``ykafka.signing``), with its own fake source IP
  (``X-Forwarded-For``, honoured from loopback because the fixtures configure it as a proxy with
  ``--forwarded-allow-ips``) so failure counters of one test never limit another.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.helpers import wait_until as wait_until
from tests.pg_server import ensure_pg
from tests.support import ConfigService, Proc
from ykafka import signing
from ykafka.admin.client import AdminClient

ADMIN_TOKEN = "ms-test-admin-token"
OPENAPI_TOKEN = "ms-test-openapi-token"
_ip_counter = itertools.count(1)


def fake_ip() -> str:
    """A distinct TEST-NET address per client, only ever sent as a header label."""
    n = next(_ip_counter) + (os.getpid() % 50) * 250
    return f"203.0.{113 + n // 250 % 3}.{n % 250 + 1}"


def inside_one_fail_window(window_s: int = 60, needed_s: float = 5.0) -> None:
    """Failure counters use fixed windows; wait out a boundary that is about to split a burst of attempts."""
    left = window_s - time.time() % window_s
    if left < needed_s:
        time.sleep(left + 0.1)


@dataclass
class MetaServer:
    proc: Proc
    db_url: str
    apollo_app_id: str
    configcenter_url: str | None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.proc.url

    def admin(self, operator: str | None = None) -> AdminClient:
        return AdminClient(self.url, ADMIN_TOKEN, operator=operator)

    def sdk(self, app_id: str, secret: str, ip: str | None = None) -> SdkClient:
        return SdkClient(self.url, app_id, secret, ip or fake_ip())


class SdkClient:
    """Talks to the MetaServer the way the SDK does."""

    def __init__(self, url: str, app_id: str, secret: str, ip: str) -> None:
        self.url = url
        self.app_id = app_id
        self.key = signing.derive_key(app_id, secret)
        self.ip = ip
        self.session = requests.Session()
        self.session.headers["X-Forwarded-For"] = ip

    def grant_request(self, client_id: str = "c1", body: dict[str, Any] | None = None,
                      timestamp_ms: int | None = None, nonce: str | None = None,
                      key: bytes | None = None) -> tuple[bytes, dict[str, str]]:
        raw = json.dumps(body if body is not None else
                         {"app_id": self.app_id, "client_id": client_id, "ip": self.ip}).encode()
        headers = signing.signed_headers(self.app_id, key or self.key, "POST", "/v1/auth/grant", raw)
        if timestamp_ms is not None or nonce is not None:
            ts = str(timestamp_ms) if timestamp_ms is not None else headers[signing.HEADER_TIMESTAMP]
            n = nonce or headers[signing.HEADER_NONCE]
            headers[signing.HEADER_TIMESTAMP] = ts
            headers[signing.HEADER_NONCE] = n
            headers[signing.HEADER_SIGNATURE] = signing.sign(key or self.key, "POST", "/v1/auth/grant", raw, ts, n)
        headers["Content-Type"] = "application/json"
        return raw, headers

    def post_grant(self, raw: bytes, headers: dict[str, str], url: str | None = None) -> requests.Response:
        return self.session.post((url or self.url) + "/v1/auth/grant", data=raw, headers=headers, timeout=10)

    def grant(self, client_id: str = "c1", **kwargs: Any) -> requests.Response:
        raw, headers = self.grant_request(client_id, **kwargs)
        return self.post_grant(raw, headers)

    def renew(self, token: str, url: str | None = None) -> requests.Response:
        return self.session.post((url or self.url) + "/v1/auth/renew", headers={"Authorization": f"Bearer {token}"},
                                 timeout=10)

    def report(self, token: str, **fields: Any) -> requests.Response:
        body: dict[str, Any] = {
            "client_id": "c1", "app_id": self.app_id, "ip": self.ip, "hostname": "host-1", "pid": 4242,
            "language": "python", "versions": {"ykafka": "0.1.0", "confluent_kafka": "2.4.0", "librdkafka": "2.4.0"},
            "role": "producer", "topics": ["orders.eu"], "group": None, "cluster": "dc-a",
            "config_release_keys": {"ykafka.global": "rk-1"}, "state": "running", "errors": [], "extra": {},
        }
        body.update(fields)
        return self.session.post(self.url + "/v1/clients/report", json=body,
                                 headers={"Authorization": f"Bearer {token}"}, timeout=10)


def pg_dsn() -> str:
    """The test database: ``YKAFKA_TEST_PG_DSN``, else a private server started on first use (tests.pg_server)."""
    dsn, reason = ensure_pg()
    if dsn is None:
        raise RuntimeError(f"no PostgreSQL for the tests: {reason}")
    return dsn


def pg_unavailable(dsn: str | None = None) -> str | None:
    if dsn is None:
        dsn, reason = ensure_pg()
        if dsn is None:
            return f"no PostgreSQL: {reason}"
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(dsn, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "skip PostgreSQL"
        return f"PostgreSQL at {dsn} does not answer ({type(exc).__name__}: {str(exc).splitlines()[0][:150]})"


def require_pg(dsn: str | None = None) -> None:
    """Skip (locally) or fail (CI: ``YKAFKA_TEST_PG_REQUIRED=1``, set by ``.ci/run``) when PostgreSQL is down.

    CI machines start a private server (tests.pg_server), so a missing one must not pass silently as skips.
    """
    reason = pg_unavailable(dsn)
    if reason is None:
        return
    if os.environ.get("YKAFKA_TEST_PG_REQUIRED", "") not in ("", "0"):
        pytest.fail(f"{reason}; YKAFKA_TEST_PG_REQUIRED is set, so PostgreSQL tests must run", pytrace=False)
    pytest.skip(f"{reason} (set YKAFKA_TEST_PG_REQUIRED=1 to fail instead)")


class PgSchemas:
    """Fresh PostgreSQL schemas, each a DSN with its search_path; ``drop()`` removes every one made."""

    def __init__(self, prefix: str = "ms_test") -> None:
        import sqlalchemy as sa

        self.prefix = prefix
        self.created: list[str] = []
        self.dsn = pg_dsn()
        self.engine = sa.create_engine(self.dsn)

    def make(self) -> str:
        import sqlalchemy as sa

        schema = f"{self.prefix}_{uuid.uuid4().hex[:10]}"
        with self.engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        self.created.append(schema)
        sep = "&" if "?" in self.dsn else "?"
        return f"{self.dsn}{sep}options=-csearch_path%3D{schema}"

    def drop(self) -> None:
        import sqlalchemy as sa

        with self.engine.begin() as conn:
            for schema in self.created:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        self.created.clear()
        self.engine.dispose()


@pytest.fixture(scope="session")
def pg_schema_factory() -> Iterator[Callable[[], str]]:
    """Fresh PostgreSQL schemas (DSN with search_path); all dropped at the end of the session."""
    require_pg()
    schemas = PgSchemas()
    yield schemas.make
    schemas.drop()


@pytest.fixture(scope="module")
def ms_cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfigService]:
    proc = ConfigService(tmp_path_factory.mktemp("ms-cc") / "cc.db", 2, OPENAPI_TOKEN).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def ms_factory(tmp_path_factory: pytest.TempPathFactory, ms_cc: ConfigService) -> Iterator[Callable[..., MetaServer]]:
    """Start a MetaServer: ``ms_factory(db_url=None, apollo_app_id=None, **flags)``; stopped at module end."""
    tmp = tmp_path_factory.mktemp("ms")
    started: list[MetaServer] = []

    def start(db_url: str | None = None, apollo_app_id: str | None = None, configcenter: bool = True,
              env: dict[str, str] | None = None, **flags: Any) -> MetaServer:
        db_url = db_url or f"sqlite:///{tmp / f'ms-{uuid.uuid4().hex[:8]}.db'}"
        app_id = apollo_app_id or f"ykafka-t{uuid.uuid4().hex[:8]}"
        options = {"--renew-interval": "1", "--auth-fail-limit": "5", "--auth-switch-ttl": "0.3",
                   "--log-level": "info", "--forwarded-allow-ips": "127.0.0.1"}  # the tests act as the proxy
        options.update({f"--{k.replace('_', '-')}": str(v) for k, v in flags.items()})
        args = [sys.executable, "-m", "metaserver", "serve", "--host", "127.0.0.1", "--port", "{port}",
                "--db-url", db_url, "--admin-token", f"ops:{ADMIN_TOKEN}", "--apollo-app-id", app_id]
        if configcenter:
            args += ["--configcenter-url", ms_cc.url, "--configcenter-openapi-token", OPENAPI_TOKEN]
        for key, value in options.items():
            args += [key, value]
        server = MetaServer(Proc("metaserver", args, tmp / f"ms-{len(started)}.log", env=env).start(), db_url, app_id,
                            ms_cc.url if configcenter else None, options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.proc.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def ms_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        require_pg()
    return str(request.param)


@pytest.fixture(scope="module")
def ms(ms_backend: str, ms_factory: Callable[..., MetaServer],
       request: pytest.FixtureRequest) -> MetaServer:
    db_url = None
    if ms_backend == "postgres":
        db_url = request.getfixturevalue("pg_schema_factory")()
    return ms_factory(db_url=db_url)


@dataclass
class App:
    app_id: str
    secret: str


def new_app(server: MetaServer, acl: dict[str, list[str]] | None = None, **kwargs: Any) -> App:
    app_id = f"app-{uuid.uuid4().hex[:8]}"
    created = server.admin().create_app(app_id, acl=acl or {"produce": ["orders.*"], "consume": ["orders.*"],
                                                            "group": ["billing-*"]}, **kwargs)
    return App(app_id, created["secret"])
