"""Fixtures of the console browser tests: console users on the SDK stack, one Chromium per module, and
producers running in background threads that count every delivery.

Chromium is Debian's ``/usr/bin/chromium`` (Playwright's own browser download is not reachable); the
Makefile installs it for ``make test`` or prints a hint.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import ROOT, LocalStack, Proc
from ykafka import Producer

CHROMIUM = os.environ.get("YKAFKA_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "img"
PASSWORD = "console-pass-1"
#: where ``make oidc-provider`` installs the npm package oidc-provider (pinned by tests/oidc/package-lock.json)
OIDC_PROVIDER_DIR = Path(os.environ.get("YKAFKA_OIDC_PROVIDER_DIR",
                                        Path.home() / ".cache" / "ykafka" / "oidc-provider"))
SSO_ADMIN_TOKEN = "sso-test-admin-token"
SSO_CLIENT_ID, SSO_CLIENT_SECRET = "ykafka-console", "sso-test-client-secret"
#: the provider's accounts (login -> groups, and whether the ID token or only userinfo carries them) and the
#: console's mapping of groups to roles
SSO_ACCOUNTS = {"ada": {"groups": ["staff", "kafka-admins"], "in": "id_token"},
                "vic": {"groups": ["staff", "kafka-viewers"], "in": "userinfo"},
                "nobody": {"groups": ["staff"], "in": "id_token"}}
SSO_ROLES = "kafka-admins:admin,kafka-ops:operator,kafka-viewers:viewer"


@dataclass
class Console:
    stack: LocalStack
    url: str
    users: dict[str, str]  # role -> username (all share PASSWORD)

    def login(self, page: Any, role: str) -> None:
        page.goto(self.url + "/console/login")
        page.fill("input[name=username]", self.users[role])
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(self.url + "/console/")

    def shot(self, page: Any, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"console-{name}.png"), full_page=True)


def _console(stack: LocalStack) -> Console:
    names = {}
    for role in ("viewer", "operator", "admin"):
        name = f"{role}-{uuid.uuid4().hex[:6]}"
        resp = stack.admin("POST", "/v1/admin/users", {"username": name, "password": PASSWORD, "role": role})
        assert resp.status_code == 201, resp.text
        names[role] = name
    return Console(stack, stack.metaserver, names)


@pytest.fixture(scope="module")
def console(sdk_stack: LocalStack) -> Console:
    return _console(sdk_stack)


@pytest.fixture(scope="module")
def kafka_console(kafka_stack: LocalStack) -> Console:
    """The console of the stack on Apache Kafka (``kafka_stack``), with a viewer, an operator and an admin."""
    return _console(kafka_stack)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: apt-get install -y chromium (make test installs it when it can)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    try:
        yield pg
    finally:
        context.close()


@dataclass
class SsoConsole:
    """A MetaServer whose console signs in through a real OpenID provider (oidc-provider on Node.js)."""

    metaserver: Proc
    provider: Proc
    local_admin: str  # a console user with a password (break-glass)

    @property
    def url(self) -> str:
        return self.metaserver.url


@pytest.fixture(scope="module")
def sso_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoConsole]:
    """oidc-provider with one PKCE client and ``SSO_ACCOUNTS``; a MetaServer (SQLite) configured for it."""
    if not (OIDC_PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir() or not shutil.which("node"):
        pytest.fail(f"oidc-provider missing in {OIDC_PROVIDER_DIR}: run `make oidc-provider` (make test does)")
    tmp = tmp_path_factory.mktemp("sso")
    # the script beside the installed package, so node resolves `oidc-provider` from it
    (tmp / "node_modules").symlink_to(OIDC_PROVIDER_DIR / "node_modules")
    shutil.copy(ROOT / "tests" / "oidc" / "provider.mjs", tmp / "provider.mjs")
    metaserver = Proc("metaserver", [sys.executable, "-m", "metaserver", "serve", "--port", "{port}",
                                     "--db-url", f"sqlite:///{tmp / 'ms.db'}", "--admin-token", SSO_ADMIN_TOKEN,
                                     "--forwarded-allow-ips", "127.0.0.1"],
                      tmp / "ms.log")
    redirect = metaserver.url + "/console/sso/callback"
    provider = Proc("oidc-provider", ["node", str(tmp / "provider.mjs"), "{port}"], tmp / "oidc.log",
                    env={"OIDC_CLIENT_ID": SSO_CLIENT_ID, "OIDC_CLIENT_SECRET": SSO_CLIENT_SECRET,
                         "OIDC_REDIRECT_URI": redirect, "OIDC_ACCOUNTS": json.dumps(SSO_ACCOUNTS)}).start()
    try:
        metaserver.env = {"YKAFKA_MS_CONSOLE_OIDC_ISSUER": provider.url,
                          "YKAFKA_MS_CONSOLE_OIDC_CLIENT_ID": SSO_CLIENT_ID,
                          "YKAFKA_MS_CONSOLE_OIDC_CLIENT_SECRET": SSO_CLIENT_SECRET,
                          "YKAFKA_MS_CONSOLE_OIDC_REDIRECT_URI": redirect,
                          "YKAFKA_MS_CONSOLE_OIDC_SCOPES": "openid profile groups",
                          "YKAFKA_MS_CONSOLE_OIDC_ROLES": SSO_ROLES}
        metaserver.start()
        resp = requests.post(metaserver.url + "/v1/admin/users", timeout=10,
                             json={"username": "breakglass", "password": PASSWORD, "role": "admin"},
                             headers={"Authorization": f"Bearer {SSO_ADMIN_TOKEN}"})
        assert resp.status_code == 201, resp.text
        yield SsoConsole(metaserver, provider, "breakglass")
    finally:
        metaserver.stop()
        provider.stop()


class Load:
    """A real ykafka Producer producing to ``topic`` from a background thread until stopped; counts deliveries."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        # check_stream wants "<key>:<seq>" with one sequence per key across the topic: keys are per producer
        self.prefix = uuid.uuid4().hex[:4]
        self.producer = Producer(conf)
        self.topic = topic
        self.sent = 0
        self.delivered = 0
        self.failed: list[str] = []
        self.seq: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def client_id(self) -> str:
        return str(self.producer._runtime.client_id)

    def _cb(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                key = f"{self.prefix}-{self.sent % 7}"
                self.producer.produce(self.topic, f"{key}:{self.seq.get(key, 0)}".encode(), key.encode(),
                                      on_delivery=self._cb)
                self.seq[key] = self.seq.get(key, 0) + 1
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.02)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)
        self.producer.close()


def admin_clients(stack: LocalStack, app_id: str) -> dict[str, dict[str, Any]]:
    resp = requests.get(stack.metaserver + f"/v1/admin/clients?app={app_id}", timeout=10,
                        headers={"Authorization": f"Bearer {stack.admin_token}"})
    assert resp.status_code == 200, resp.text
    return {c["client_id"]: c for c in resp.json()}


def wait_reported_topic(stack: LocalStack, app_id: str, client_ids: list[str], topic: str,
                        timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = admin_clients(stack, app_id)
        if all(topic in (seen.get(cid, {}).get("topics") or []) and seen[cid]["online"] for cid in client_ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"clients {client_ids} never reported topic {topic}")


def write_events(store_root: Path, kind: str, dataset: str, partition_by: list[str],
                 rows: list[dict[str, Any]]) -> None:
    """Events written into the pipeline store exactly as the pipeline writes them (``ykafka.events`` fields and
    types of ``kind``, hive-partitioned by UTC ``date`` / ``hour`` and the other ``partition_by`` columns)."""
    import datetime as dt

    import pyarrow as pa

    from pipeline.store import Store
    from ykafka import events

    types = {"bigint": pa.int64(), "string": pa.string(), "int": pa.int32(), "double": pa.float64(),
             "boolean": pa.bool_()}
    columns = {name: pa.array([r.get(name) for r in rows], type=types[typ]) for name, typ in events.FIELDS[kind]}
    stamps = [dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC) for r in rows]
    columns["date"] = pa.array([s.strftime("%Y-%m-%d") for s in stamps])
    columns["hour"] = pa.array([s.strftime("%H") for s in stamps])
    Store(str(store_root)).write(pa.table(columns), dataset, partition_by, int(time.time() * 1000) % 10**12,
                                 f"console-test-{uuid.uuid4().hex[:6]}")


def write_lag_samples(store_root: Path, rows: list[dict[str, Any]]) -> None:
    """The pipeline's own lag samples (``source=sampler``) in the store's ``metrics`` dataset."""
    full = [{"name": "lag", "client_id": "ykafka-pipeline", "role": "pipeline", "source": "sampler", **r} for r in rows]
    write_events(store_root, "metric", "metrics", ["date", "hour"], full)


def write_aggregates(store_root: Path, rows: list[dict[str, Any]]) -> None:
    """Aggregate partials in the store as the pipeline writes them (``pipeline.aggregates.partials``: one row
    per window and dimension). Each row: ``window_start`` (ms), ``name``, ``value`` (counter total) and / or
    ``p99`` with ``count`` (a latency), and any of ``topic``, ``group``, ``client_id``, ``cluster``."""
    import datetime as dt

    import pyarrow as pa

    from pipeline.store import Store

    strings = ("name", "topic", "group", "client_id", "cluster", "date")
    ints = ("window_start", "count", "pcount", "events")
    cols: dict[str, list[Any]] = {k: [] for k in (*strings, *ints, "sum", "max", "p50w", "p95w", "p99w",
                                                  "p99_max", "value")}
    for r in rows:
        count, p99 = int(r.get("count", 0)), float(r.get("p99", 0.0))
        full = {"topic": None, "group": None, "client_id": None, "cluster": "dc-a", "count": count, "sum": 0.0,
                "max": p99, "p50w": p99 * count, "p95w": p99 * count, "p99w": p99 * count, "pcount": count,
                "p99_max": p99, "value": float(r.get("value", 0.0)), "events": 1,
                "date": dt.datetime.fromtimestamp(r["window_start"] / 1000, dt.UTC).strftime("%Y-%m-%d"),
                **{k: v for k, v in r.items() if k not in ("p99", "count", "value")}}
        for k in cols:
            cols[k].append(full[k])
    table = pa.table({k: pa.array(v, type=pa.string() if k in strings else pa.int64() if k in ints else pa.float64())
                      for k, v in cols.items()})
    Store(str(store_root)).write(table, "aggregates", ["date"], int(time.time() * 1000) % 10**12,
                                 f"console-test-{uuid.uuid4().hex[:6]}")
