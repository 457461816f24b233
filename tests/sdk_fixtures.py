"""Fixtures of the SDK-core / producer tests: a private stack (two Tansu brokers, the real config service,
the real MetaServer) on free ports, helpers to push hot config (through the MetaServer admin API, or
straight into Apollo to bypass validation), and broker-side readers that count every message.

Processes are started on free ports and stopped by their own pid (``Stack.down`` / ``Popen``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import create_topic as create_topic
from tests.helpers import wait_until as wait_until
from ykafka.devstack import Stack, ephemeral_config, free_port


@dataclass
class SdkStack:
    stack: Stack
    clusters: dict[str, str]
    configcenter: str
    metaserver: str
    admin_token: str
    openapi_token: str
    app_id: str
    app_secret: str
    home: Path
    _apps: dict[str, str] = field(default_factory=dict)

    # --- MetaServer admin API -------------------------------------------------------------------

    def admin(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(method, self.metaserver + path, json=body, timeout=15,
                                headers={"Authorization": f"Bearer {self.admin_token}"})

    def push(self, scope: str, set: dict[str, Any] | None = None, delete: list[str] | None = None,
             ips: list[str] | None = None) -> dict[str, Any]:
        """An operator's hot-config change, through the MetaServer (validated, released through Apollo)."""
        body: dict[str, Any] = {"scope": scope, "set": {k: str(v) for k, v in (set or {}).items()},
                                "delete": delete or []}
        if ips:
            body["ips"] = ips
        resp = self.admin("POST", "/v1/admin/config", body)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def new_app(self, produce: list[str], consume: list[str] | None = None,
                group: list[str] | None = None) -> tuple[str, str]:
        app_id = f"app-{uuid.uuid4().hex[:8]}"
        resp = self.admin("POST", "/v1/admin/apps", {"app_id": app_id})
        assert resp.status_code in (200, 201), resp.text
        secret = resp.json()["secret"]
        resp = self.admin("PUT", f"/v1/admin/apps/{app_id}/acl",
                          {"produce": produce, "consume": consume or [], "group": group or []})
        assert resp.status_code == 200, resp.text
        return app_id, secret

    def client_reports(self, app_id: str) -> list[dict[str, Any]]:
        resp = self.admin("GET", f"/v1/admin/clients?app={app_id}")
        assert resp.status_code == 200, resp.text
        return list(resp.json())

    # --- straight into the config center (bypasses MetaServer validation, as a hand edit in Apollo) ---

    def publish_raw(self, namespace: str, items: dict[str, str], delete: list[str] | None = None) -> None:
        from metaserver.apollo import ApolloOpenApi

        api = ApolloOpenApi(self.configcenter, self.openapi_token)
        api.ensure_app()
        api.ensure_namespace(namespace)
        for key, value in items.items():
            api.set_item(namespace, key, value)
        for key in delete or []:
            api.delete_item(namespace, key)
        api.release(namespace, f"test-{uuid.uuid4().hex[:6]}", "test")

    # --- clients -----------------------------------------------------------------------------------

    def client_config(self, app: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        app_id, secret = app or (self.app_id, self.app_secret)
        conf: dict[str, Any] = {
            "ykafka.app.id": app_id,
            "ykafka.app.secret": secret,
            "ykafka.metaserver": self.metaserver,
            "ykafka.cache.dir": str(self.home / "clients" / uuid.uuid4().hex),
        }
        conf.update(extra)
        return conf


def _seed(st: SdkStack, cfg: Any) -> None:
    for spec in cfg.clusters.values():
        resp = st.admin("PUT", f"/v1/admin/clusters/{spec.name}",
                        {"bootstrap_servers": cfg.bootstrap(spec.name), "dc": spec.dc, "standby": spec.standby,
                         "status": "active"})
        assert resp.status_code == 200, resp.text
    st.app_id, st.app_secret = st.new_app(["*"], ["*"], ["*"])


@pytest.fixture(scope="session")
def sdk_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkStack]:
    home = tmp_path_factory.mktemp("sdkstack")
    cfg = ephemeral_config(home)
    stack = Stack(cfg)
    try:
        stack.up(seed=False)
        st = SdkStack(stack, {name: cfg.bootstrap(name) for name in cfg.clusters}, cfg.configcenter_url,
                      cfg.metaserver_url, cfg.admin_token, cfg.openapi_token, "", "", home)
        _seed(st, cfg)
        yield st
    finally:
        stack.down()


# --- a private config service (to stop it in a test) ------------------------------------------------

@dataclass
class ConfigService:
    url: str
    token: str
    proc: subprocess.Popen[bytes]

    def publish(self, namespace: str, items: dict[str, str]) -> None:
        from metaserver.apollo import ApolloOpenApi

        api = ApolloOpenApi(self.url, self.token)
        api.ensure_app()
        api.ensure_namespace(namespace)
        for key, value in items.items():
            api.set_item(namespace, key, value)
        api.release(namespace, f"test-{uuid.uuid4().hex[:6]}", "test")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_config_service(workdir: Path, longpoll_timeout: float = 5, db: Path | str | None = None) -> ConfigService:
    """A config service on ``db`` (a SQLite file, or a database URL; default a fresh file in ``workdir``)."""
    port = free_port()
    token = uuid.uuid4().hex
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / f"cc-{port}.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "metaserver.configcenter", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--db", str(db or workdir / f"cc-{port}.db"),
                             "--longpoll-timeout", str(longpoll_timeout), "--openapi-token", token],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return ConfigService(url, token, proc)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"config service did not start: {(workdir / f'cc-{port}.log').read_text()[-2000:]}")


@pytest.fixture
def config_service(tmp_path: Path) -> Iterator[ConfigService]:
    svc = start_config_service(tmp_path / "cc")
    try:
        yield svc
    finally:
        svc.stop()


# --- broker side ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str | None
    value: str


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 30.0,
               settle: float = 0.5) -> list[Record]:
    """Every record of ``topic`` (all partitions, from the beginning) once ``expected`` were seen and
    ``settle`` seconds brought nothing more (so duplicates beyond ``expected`` are counted too)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    partitions: list[int] = []
    while time.monotonic() < deadline and not partitions:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None:
            partitions = sorted(meta.partitions)
        else:
            time.sleep(0.2)
    if not partitions:
        return []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[Record] = []
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.2)
            got = False
            for msg in batch:
                if msg.error() is not None:
                    continue
                got = True
                key = msg.key()
                out.append(Record(msg.partition(), msg.offset(), key.decode() if key is not None else None,
                                  msg.value().decode()))
            if got:
                quiet_since = None
            elif len(out) >= expected:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= settle:
                    break
    finally:
        consumer.close()
    return out


def check_stream(records: list[Record], sent: int) -> dict[str, int]:
    """Loss / duplicates / per-key order over records whose value is ``<key>:<seq>`` (seq per key from 0)."""
    seen: dict[str, list[tuple[int, int, int]]] = {}
    values = [r.value for r in records]
    for r in records:
        key, _, seq = r.value.rpartition(":")
        seen.setdefault(key, []).append((r.partition, r.offset, int(seq)))
    unique = set(values)
    disorder = 0
    for items in seen.values():
        by_partition: dict[int, list[tuple[int, int]]] = {}
        for part, off, seq in items:
            by_partition.setdefault(part, []).append((off, seq))
        for rows in by_partition.values():
            seqs = [seq for _, seq in sorted(rows)]
            disorder += sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b < a)
    return {"received": len(values), "unique": len(unique), "lost": sent - len(unique),
            "duplicated": len(values) - len(unique), "disorder": disorder}
