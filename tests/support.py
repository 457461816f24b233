"""The one way tests and benchmarks start any part of the local stack: on free ports, stopped by their own pid.

- :class:`LocalStack` / :func:`local_stack`: what ``ykafka dev up`` runs (``ykafka.devstack``): any subset of
  brokers, the config service and the MetaServer, seeded with one app; helpers to push hot config and build client
  configs.
- :class:`Broker`: one private Kafka cluster to kill, freeze and restart in chaos tests; started through
  ``ykafka.devstack`` too, so its brokers are exactly the ``dev up`` ones.

Broker kinds (``broker=``, everywhere a cluster is made): ``"kafka"`` is Apache Kafka in KRaft mode
(``ykafka.devstack.kafka``; ``brokers`` nodes, each broker + controller, logs on disk: a SIGKILL keeps what was
acknowledged; 3 nodes: RF 3, ``min.insync.replicas=2``); ``"tansu"`` is Tansu, ``storage="memory"`` (one broker
that forgets on restart) or ``"durable"`` (N brokers on the S3 engine over a local moto S3 server).
The session fixtures of ``tests/conftest.py`` (``kafka_brokers``, ``kafka_stack``, ``kafka_cluster3``) are built
from these.
- :class:`Proc` / :class:`ConfigService`: one server process polled on ``/health`` (a config service on its own
  database, a MetaServer with test flags), in its own process group, stopped by its pid.

Fixture modules (``tests/*_fixtures.py``, registered once in ``tests/conftest.py``) and ``bench/*.py`` build on
these; nothing else starts a service.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from ykafka.devstack import ClusterSpec, Stack, StackConfig, ephemeral_config, replica_name
from ykafka.devstack import free_port as free_port

ROOT = Path(__file__).resolve().parent.parent
CC_TOKEN = "test-openapi-token"


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MiB (``/proc``: what the kernel charges it now); 0 when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


# --- one server process ------------------------------------------------------------------------------

class Proc:
    """A server subprocess (``{port}`` in ``args`` becomes a free port) in its own session, polled on
    ``/health``, stopped by its pid (its process group: uvicorn workers included)."""

    def __init__(self, name: str, args: list[str], log: Path, health: str = "/health",
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.health = health
        self.env = env or {}
        self.args = [a.replace("{port}", str(self.port)) for a in args]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 40.0) -> Proc:
        env = {**os.environ, "PYTHONPATH": str(ROOT), **self.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + self.health, timeout=0.5).status_code == 200:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not become healthy: {self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """``sig`` (SIGTERM; SIGKILL for a crash) to our own process group, then wait for it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


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
    """The ``--db`` of a config service: the SQLite file, or under ``YKAFKA_TEST_CC_DB=postgres`` one fresh
    PostgreSQL schema per file name (a manual check of that backend; the suite's PostgreSQL cases are in
    tests/test_configcenter_peers.py)."""
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


class ConfigService(Proc):
    """``python -m metaserver.configcenter serve`` on a free port with its own database: a SQLite file, or a
    database URL (``db`` as a string; peers share one)."""

    def __init__(self, db: Path | str, longpoll_timeout: float = 2.0, token: str = CC_TOKEN,
                 extra: list[str] | None = None, log_dir: Path | None = None) -> None:
        self.db = db
        self.database = _database(db) if isinstance(db, Path) else db
        self.longpoll_timeout = longpoll_timeout
        self.token = token
        log_base = db if isinstance(db, Path) else (log_dir or Path(tempfile.gettempdir())) / "configcenter"
        super().__init__("configcenter", [sys.executable, "-m", "metaserver.configcenter", "serve", "--host",
                                          "127.0.0.1", "--port", "{port}", "--db", self.database,
                                          "--longpoll-timeout", str(longpoll_timeout), "--openapi-token", token,
                                          *(extra or [])], log_base.with_suffix(".log"))
        self.log = log_base.with_suffix(f".{self.port}.log")

    def start(self, timeout: float = 40.0) -> ConfigService:
        super().start(timeout)
        return self

    def parked(self) -> int:
        """Long polls parked on this instance right now (its ``/stats``)."""
        return int(requests.get(f"{self.url}/stats", timeout=5).json()["longPolls"])

    def wait_parked(self, polls: int, timeout: float = 10.0) -> None:
        """Until ``polls`` long polls are parked here: a test waits for this instead of sleeping."""
        deadline = time.monotonic() + timeout
        while self.parked() < polls:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {polls} long poll(s) parked")
            time.sleep(0.02)

    def poll(self, app: str, notifications: list[dict[str, Any]], cluster: str = "default", timeout: float = 10,
             **params: str) -> requests.Response:
        """One ``/notifications/v2`` long poll, as Apollo clients send it."""
        return requests.get(self.url + "/notifications/v2",
                            params={"appId": app, "cluster": cluster, "notifications": json.dumps(notifications),
                                    **params}, timeout=timeout)

    def park(self, app: str, notifications: list[dict[str, Any]], wait: bool = True, **params: str) -> ParkedPoll:
        """Start a long poll in a thread; with ``wait``, return once the service's ``/stats`` counts it parked
        (or it already answered: nothing to wait for)."""
        before = self.parked() if wait else 0
        parked = ParkedPoll(lambda: self.poll(app, notifications, **params))
        deadline = time.monotonic() + 10
        while wait and parked.result is None and self.parked() <= before:
            if time.monotonic() > deadline:
                raise AssertionError("the long poll was never parked")
            time.sleep(0.01)
        return parked

    def cli(self, *args: str) -> str:
        """Run the admin CLI against this server's database; returns stdout stripped."""
        out = subprocess.run([sys.executable, "-m", "metaserver.configcenter", *args, "--db", self.database],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                             text=True, check=True, timeout=30)
        return out.stdout.strip()

    def publish(self, namespace: str, items: dict[str, str], token: str | None = None) -> None:
        """Items set and released in ``namespace`` of the ykafka app, through the Open API (``token``: another
        Open API token than this instance's own)."""
        from metaserver.domain.apollo import ApolloOpenApi

        api = ApolloOpenApi(self.url, token or self.token)
        api.ensure_app()
        api.ensure_namespace(namespace)
        for key, value in items.items():
            api.set_item(namespace, key, value)
        api.release(namespace, f"test-{uuid.uuid4().hex[:6]}", "test")


def start_config_service(workdir: Path, longpoll_timeout: float = 5, db: Path | str | None = None) -> ConfigService:
    """A private config service under ``workdir`` on ``db`` (a SQLite file or a database URL; default a fresh
    file), with a fresh Open API token."""
    workdir.mkdir(parents=True, exist_ok=True)
    return ConfigService(db or workdir / f"cc-{uuid.uuid4().hex[:6]}.db", longpoll_timeout, uuid.uuid4().hex,
                         log_dir=workdir).start()


# --- broker kinds ---------------------------------------------------------------------------------------

#: addresses (host:port) of every Apache Kafka broker this process made (:func:`cluster_stack`, :func:`new_stack`):
#: the Tansu quirks below apply to any other cluster
KAFKA_ADDRESSES: set[str] = set()


def broker_kind(request: Any, default: str | None = None) -> str:
    """The broker kind a test module asked for with ``pytestmark = pytest.mark.broker("kafka")`` (or ``"tansu"``);
    else ``default``, else ``YKAFKA_TEST_BROKER`` (default ``tansu``: the fast tier)."""
    marker = request.node.get_closest_marker("broker")
    if marker is not None:
        return str(marker.args[0])
    return default or os.environ.get("YKAFKA_TEST_BROKER", "tansu")


def is_kafka(bootstrap: str) -> bool:
    """The cluster at ``bootstrap`` is one of the Apache Kafka clusters this process made."""
    return any(address in KAFKA_ADDRESSES for address in bootstrap.split(","))


def _remember_kafka(cfg: StackConfig) -> None:
    for name, spec in cfg.clusters.items():
        if spec.broker == "kafka" and not cfg.external_bootstrap:
            KAFKA_ADDRESSES.update(cfg.bootstrap(name).split(","))


def tansu_group_quirk(bootstrap: str) -> dict[str, Any]:
    """Consumer settings that only Tansu needs: its group joins wait out the whole session timeout (about 23 s at
    librdkafka's default 45 s), so a test consumer there sets 6 s; Apache Kafka joins at once
    (``group.initial.rebalance.delay.ms=0``) and gets nothing."""
    return {} if is_kafka(bootstrap) else {"session.timeout.ms": 6000}


# --- one private Kafka cluster ------------------------------------------------------------------------

def cluster_stack(names: list[str], home: Path, storage: str = "memory", brokers: int | dict[str, int] | None = None,
                  broker: str = "tansu") -> Stack:
    """A devstack :class:`Stack` holding only the clusters ``names`` of ``broker`` kind (durable Tansu clusters
    share its one S3 server; a Kafka cluster is ``brokers`` KRaft nodes, default 1, or per cluster name: the soak's
    three-node dc-a beside a one-node dc-b)."""
    cfg = ephemeral_config(home, storage=storage, brokers=brokers if isinstance(brokers, int) else None)
    default = 1 if broker == "kafka" else cfg.clusters[cfg.default_cluster].brokers

    def size(name: str) -> int:
        return (brokers.get(name) if isinstance(brokers, dict) else brokers) or default

    cfg.clusters = {name: ClusterSpec(name, free_port(), name, storage="durable" if broker == "kafka" else storage,
                                      brokers=size(name), extra_ports=[free_port() for _ in range(size(name) - 1)],
                                      broker=broker,
                                      controller_ports=[free_port() for _ in range(size(name))]
                                      if broker == "kafka" else [])
                    for name in names}
    cfg.default_cluster = names[0]
    _remember_kafka(cfg)
    return Stack(cfg)


class Broker:
    """One Kafka cluster ``name`` started as ``ykafka dev up`` starts it: ``broker="kafka"`` (``brokers`` Apache
    Kafka KRaft nodes, default 1, logs on disk), or Tansu ``memory`` (one broker that forgets everything on
    restart) or ``durable`` (``brokers``, default 2, Tansu processes on one bucket of a local S3 server, so an
    acknowledged message survives a SIGKILL of every broker and any broker serves it). Ports are fixed at
    construction, so ``restart`` comes back at the same address; kill / freeze / thaw act on the brokers' own
    pids (``pids``). Several clusters can share one ``stack`` (:func:`cluster_stack`, :func:`brokers`)."""

    def __init__(self, name: str, log_dir: Path | None = None, storage: str = "memory", brokers: int | None = None,
                 stack: Stack | None = None, broker: str = "tansu") -> None:
        if stack is None:
            assert log_dir is not None, "a Broker needs a log_dir or a stack"
            stack = cluster_stack([name], log_dir / name, storage, brokers, broker)
        spec = stack.cfg.clusters[name]
        self.name = name
        self.kind = spec.broker
        self.storage = spec.storage
        self.stack = stack
        self.names = [spec.broker_name(i) for i in range(spec.brokers)]
        self.bootstrap = stack.cfg.bootstrap(name)
        self.addresses = self.bootstrap.split(",")
        self.port = spec.port
        self.frozen = False
        #: (listener port, advertised proxy port) of a listener made for a Toxiproxy in front (tests/toxiproxy.py)
        self.proxied: tuple[int, int] | None = None

    def start(self) -> Broker:
        """Start whatever of this cluster is not running (idempotent)."""
        self.stack.up((["s3"] if self.stack.cfg.durable else []) + self.names, seed=False)
        return self

    @property
    def pids(self) -> list[int | None]:
        """Each broker's pid (None: not running), in node order."""
        return [self.stack.pid(svc) for svc in self.stack.services(self.names)]

    def kill(self, index: int | None = None) -> None:
        """SIGKILL every broker (or broker ``index``): a Tansu memory cluster loses its data, a durable or Kafka
        one keeps it."""
        for name in self.names if index is None else [self.names[index]]:
            self.stack.kill(name)  # SIGKILL ends a stopped (frozen) process too
        if index is None:
            self.frozen = False

    def restart(self) -> Broker:
        self.kill()
        return self.start()

    def _signal(self, sig: int, index: int | None = None) -> None:
        for svc in self.stack.services(self.names if index is None else [self.names[index]]):
            pid = self.stack.pid(svc)
            if pid is not None:
                os.kill(pid, sig)

    def freeze(self, index: int | None = None) -> None:
        """SIGSTOP every broker (or broker ``index``): connections stay open but nothing answers (a network
        partition); data is kept."""
        self._signal(signal.SIGSTOP, index)
        self.frozen = True

    def thaw(self, index: int | None = None) -> None:
        self._signal(signal.SIGCONT, index)
        self.frozen = index is not None and self.frozen

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of each broker's log: a failed test's evidence of what the cluster did meanwhile."""
        from ykafka.devstack.procs import log_tail

        return "\n".join(f"--- {svc.name}\n{log_tail(svc.log_file(self.stack.home), lines)}"
                         for svc in self.stack.services(self.names))

    @property
    def alive(self) -> bool:
        """Every broker of the cluster runs."""
        return all(self.stack.pid(svc) is not None for svc in self.stack.services(self.names))

    def ready(self) -> Broker:
        """Running and answering again, whatever the previous user did to it (a shared cluster between tests)."""
        if self.frozen:
            self.thaw()
        return self.start()

    def close(self) -> None:
        """Stop everything this cluster's stack started (brokers and the S3 server), by pid."""
        self.thaw()
        self.stack.down()


@contextlib.contextmanager
def brokers(names: list[str], log_dir: Path, storage: str = "memory",
            count: int | dict[str, int] | None = None, broker: str = "tansu",
            prepare: Callable[[Stack], None] | None = None) -> Iterator[dict[str, Broker]]:
    """Private clusters by name (on one stack: durable Tansu ones share one S3 server), started now (Kafka
    clusters together) and stopped by pid when the block ends. ``prepare`` changes the stack's configuration
    before anything starts (the soak adds a proxied listener)."""
    stack = cluster_stack(names, log_dir, storage, count, broker)
    if prepare is not None:
        prepare(stack)
    try:
        stack.up([svc.name for svc in stack.services() if svc.kind is not None or svc.name == "s3"], seed=False)
        yield {name: Broker(name, stack=stack).start() for name in names}
    finally:
        with contextlib.suppress(Exception):
            for name in names:
                Broker(name, stack=stack).thaw()
        stack.down()


# --- the whole stack, or any subset ----------------------------------------------------------------------

@dataclass
class LocalStack:
    """A :class:`ykafka.devstack.Stack` on free ports and what a test or benchmark needs to reach it."""

    stack: Stack
    env: dict[str, str] = field(default_factory=dict)  # dev.env of the seeded app (after ``up``)

    @property
    def cfg(self) -> StackConfig:
        return self.stack.cfg

    @property
    def home(self) -> Path:
        return self.stack.home

    @property
    def clusters(self) -> dict[str, str]:
        """Cluster name -> bootstrap servers."""
        return {name: self.cfg.bootstrap(name) for name in self.cfg.clusters}

    def bootstrap(self, cluster: str | None = None) -> str:
        return self.cfg.bootstrap(cluster or self.cfg.default_cluster)

    @property
    def configcenter(self) -> str:
        return self.cfg.configcenter_url

    @property
    def metaserver(self) -> str:
        return self.cfg.metaserver_url

    @property
    def admin_token(self) -> str:
        return self.cfg.admin_token

    @property
    def openapi_token(self) -> str:
        return self.cfg.openapi_token

    @property
    def app_id(self) -> str:
        return self.env.get("YKAFKA_APP_ID", "")

    @property
    def app_secret(self) -> str:
        return self.env.get("YKAFKA_APP_SECRET", "")

    def up(self, names: list[str] | None = None) -> LocalStack:
        """Start ``names`` (all when None); ``brokers`` stands for every broker (and the S3 server of durable
        clusters), ``control`` for every config service and MetaServer (replicas included). Seeds once a MetaServer
        runs."""
        if names is not None:
            control = [replica_name(service, i) for service in ("configcenter", "metaserver")
                       for i in range(self.cfg.replicas)]
            groups = {"brokers": [svc.name for svc in self.stack.services() if svc.name not in control],
                      "control": control}
            names = [n for name in names for n in groups.get(name, [name])]
        self.stack.up(names, seed=False)
        if names is None or "metaserver" in names:
            self.env = self.stack.seed()
        return self

    def down(self) -> None:
        self.stack.down()

    # --- clients --------------------------------------------------------------------------------

    def client_config(self, app: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        """ykafka client config authenticated as the seeded app (or ``app``), a private cache dir per call."""
        app_id, secret = app or (self.app_id, self.app_secret)
        conf: dict[str, Any] = {
            "ykafka.app.id": app_id,
            "ykafka.app.secret": secret,
            "ykafka.metaserver": ",".join(self.cfg.metaserver_urls),  # every replica: the client fails over
            "ykafka.cache.dir": str(self.home / "clients" / uuid.uuid4().hex),
        }
        conf.update(extra)
        return conf

    # --- MetaServer admin API -------------------------------------------------------------------

    def admin(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(method, self.metaserver + path, json=body, timeout=15,
                                headers={"Authorization": f"Bearer {self.admin_token}"})

    def push(self, scope: str, set: dict[str, Any] | None = None, delete: list[str] | None = None,
             ips: list[str] | None = None, labels: list[str] | None = None) -> dict[str, Any]:
        """An operator's hot-config change, through the MetaServer (validated, released through Apollo)."""
        body: dict[str, Any] = {"scope": scope, "set": {k: str(v) for k, v in (set or {}).items()},
                                "delete": delete or []}
        if ips:
            body["ips"] = ips
        if labels:
            body["labels"] = labels
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

    def publish_raw(self, namespace: str, items: dict[str, str], delete: list[str] | None = None) -> None:
        """Straight into the config center (bypasses MetaServer validation, as a hand edit in Apollo)."""
        from metaserver.domain.apollo import ApolloOpenApi

        api = ApolloOpenApi(self.configcenter, self.openapi_token)
        api.ensure_app()
        api.ensure_namespace(namespace)
        for key, value in items.items():
            api.set_item(namespace, key, value)
        for key in delete or []:
            api.delete_item(namespace, key)
        api.release(namespace, f"test-{uuid.uuid4().hex[:6]}", "test")


def new_stack(home: Path | None = None, **overrides: Any) -> LocalStack:
    """A stack on free ports under ``home`` (a temp dir when None), nothing started yet; ``overrides`` as
    :func:`ykafka.devstack.ephemeral_config` (``broker="kafka"``, ``storage="durable"``, ``brokers=2``,
    ``external_bootstrap``...)."""
    home = home or Path(tempfile.mkdtemp(prefix="ykafka-stack-"))
    cfg = ephemeral_config(home, **overrides)
    _remember_kafka(cfg)
    return LocalStack(Stack(cfg))


@contextlib.contextmanager
def local_stack(names: list[str] | None = None, home: Path | None = None,
                **overrides: Any) -> Iterator[LocalStack]:
    """Start ``names`` (default: the whole stack, seeded) and stop every process by pid when the block ends."""
    st = new_stack(home, **overrides)
    try:
        yield st.up(names)
    finally:
        st.down()
