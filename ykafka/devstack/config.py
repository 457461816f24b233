"""What the local stack runs and where: its clusters (:class:`ClusterSpec`) and services' ports and tokens
(:class:`StackConfig`), from configs/dev.yaml, ``YKAFKA_DEV_*`` variables and flags, or on free ports
(:func:`ephemeral_config`) for tests and benchmarks."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ykafka.devstack.procs import StackError, free_port

#: the open stack's well-known tokens; a stack with a secured cluster never runs with them (harden_credentials)
DEFAULT_ADMIN_TOKEN = "dev-admin-token"
DEFAULT_OPENAPI_TOKEN = "dev-openapi-token"

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dev.yaml"

STORAGES = ("memory", "durable")
#: what runs a cluster's brokers: Apache Kafka (KRaft, ``ykafka.devstack.kafka``) or Tansu
BROKER_KINDS = ("kafka", "tansu")


#: the Kafka listener names every node has: the controllers' quorum and the one clients reach on the cluster's ports
CONTROLLER = "CONTROLLER"
CLIENT = "CLIENT"
DEFAULT_HEAP = "512m"


@dataclass
class KafkaListener:
    """A client listener beside the cluster's own: ``name`` in server.properties, its security ``protocol``
    (``SASL_PLAINTEXT``...) and one port per node."""

    name: str
    protocol: str
    ports: list[int]


@dataclass
class KafkaSettings:
    """What a cluster's Kafka nodes run with beyond the launcher's defaults (the hook for security)."""

    protocol: str = "PLAINTEXT"  # of the CLIENT listener on the cluster's ports (also the inter-broker one)
    controller_protocol: str = "PLAINTEXT"  # of the KRaft CONTROLLER listener (SASL_PLAINTEXT when secured)
    listeners: list[KafkaListener] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)  # merged last into server.properties
    format_args: list[str] = field(default_factory=list)  # e.g. ["--add-scram", "SCRAM-SHA-256=[name=a,password=b]"]
    jvm_args: list[str] = field(default_factory=list)  # e.g. ["-Djava.security.auth.login.config=/path/jaas.conf"]
    env: dict[str, str] = field(default_factory=dict)
    heap: str = DEFAULT_HEAP
    bootstrap_listener: str = CLIENT  # the listener whose addresses the cluster's bootstrap servers name


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
    #: the MetaServer's admin the super user; ``ykafka.devstack.security``)
    security: str = "none"

    @property
    def shared_bucket(self) -> bool:
        """Tansu brokers on one S3 bucket: an idempotent producer's batch in flight to a broker that dies can be
        lost (docs/disaster-recovery.md, *Guarantees and limits*), so the stack seeds it non-idempotent."""
        return self.broker == "tansu" and self.storage == "durable"

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
    openapi_token: str = DEFAULT_OPENAPI_TOKEN
    metaserver_port: int = 7070
    admin_token: str = DEFAULT_ADMIN_TOKEN
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
                              controller_ports=_controller_ports(
                                  env.get(f"YKAFKA_DEV_{_envname(name)}_CONTROLLER_PORT"), spec),
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
            openapi_token=env.get("YKAFKA_DEV_OPENAPI_TOKEN", cc.get("openapi_token", DEFAULT_OPENAPI_TOKEN)),
            metaserver_port=int(env.get("YKAFKA_DEV_METASERVER_PORT", ms.get("port", 7070))),
            admin_token=env.get("YKAFKA_DEV_ADMIN_TOKEN", ms.get("admin_token", DEFAULT_ADMIN_TOKEN)),
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
            if name.endswith("_controller_port") and name[:-16] in cfg.clusters:
                spec = cfg.clusters[name[:-16]]
                spec.controller_ports = [int(value) + i for i in range(spec.brokers)]
            elif name.endswith("_port") and name[:-5] in cfg.clusters:
                cfg.clusters[name[:-5]].port = int(value)
            else:
                setattr(cfg, name, value)
        cfg.set_replicas(cfg.replicas)
        return cfg

    def harden_credentials(self, home: Path) -> list[str]:
        """On a stack with a secured cluster, replace the public default admin and Open API tokens with random
        ones, made once and kept 0600 under ``<home>/secrets`` (a guessable token there once created an app
        consuming ``*`` and turned ``auth.enabled`` off). Returns the names of the tokens made now."""
        if all(spec.security == "none" for spec in self.clusters.values()):
            return []
        from ykafka.devstack.security import stack_secret

        made = []
        for attr, default, name in (("admin_token", DEFAULT_ADMIN_TOKEN, "metaserver-admin.token"),
                                    ("openapi_token", DEFAULT_OPENAPI_TOKEN, "configcenter-openapi.token")):
            if getattr(self, attr) == default:
                if not (home / "secrets" / name).exists():
                    made.append(attr)
                setattr(self, attr, stack_secret(home, name))
        return made

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


def _envname(name: str) -> str:
    return name.upper().replace("-", "_").replace(".", "_")


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


def _controller_ports(first: str | None, spec: Mapping[str, Any]) -> list[int]:
    """A cluster's KRaft controller ports: ``first`` (an env var or flag) and the next ones for its other nodes,
    else configs/dev.yaml's ``controller_ports``, else none given (then each node's is its port + 100)."""
    if first:
        brokers = int(spec.get("brokers") or (2 if spec.get("storage") == "durable" else 1))
        return [int(first) + i for i in range(brokers)]
    return [int(p) for p in spec.get("controller_ports") or []]


def client_listener(spec: ClusterSpec) -> tuple[str, list[int]]:
    """The listener the cluster's bootstrap servers name, and its ports."""
    if spec.kafka.bootstrap_listener == CLIENT:
        return CLIENT, spec.ports
    for listener in spec.kafka.listeners:
        if listener.name == spec.kafka.bootstrap_listener:
            return listener.name, listener.ports
    raise ValueError(f"cluster {spec.name}: no listener {spec.kafka.bootstrap_listener!r}")
