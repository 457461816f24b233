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
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import structlog

from ykafka.devstack.config import BROKER_KINDS, DEFAULT_CONFIG, STORAGES, ClusterSpec, StackConfig, ephemeral_config
from ykafka.devstack.procs import (
    ServiceRecord,
    StackError,
    exit_reason,
    free_port,
    log_tail,
    pid_alive,
    port_holder,
    port_open,
    read_pid,
    read_record,
    terminate,
    wait_gone,
    write_private,
    write_record,
)
from ykafka.devstack.services import Service, replica_name, services

__all__ = ["BROKER_KINDS", "DEFAULT_CONFIG", "STORAGES", "ClusterSpec", "Service", "ServiceRecord", "Stack",
           "StackConfig", "StackError", "ephemeral_config", "free_port", "replica_name", "services",
           "write_private", "write_record"]

log = structlog.get_logger(__name__)


def _healthy(cfg: StackConfig, svc: Service) -> bool:
    if svc.health_url:
        try:
            return requests.get(svc.health_url, timeout=1).status_code == 200
        except requests.RequestException:
            return False
    return port_open(cfg.host, svc.port)


class Stack:
    """Start, stop and inspect the local stack described by a :class:`StackConfig`."""

    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.home = cfg.home.resolve()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._batch: list[tuple[Service, int]] = []  # the processes one _up_batch started or found, with pids
        self._recorded_replicas = 1  # what the running stack was started with (run/replicas.json)
        self._load_layout()
        self.cfg.harden_credentials(self.home)

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
        if not any(rec is not None and pid_alive(rec.pid) for _, rec in self._records().values()):
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
        made = self.cfg.harden_credentials(self.home)  # a secured stack: random tokens, never the public defaults
        if made:
            log.warning("stack.credentials.generated", tokens=made, where=str(self.home / "secrets"),
                        dev_env=str(self.env_file))
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.home.chmod(0o700)  # secrets/, dev.env and the databases live here: the stack's user only
        for sub in ("run", "logs", "data"):
            (self.home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        beyond = [name for service in ("configcenter", "metaserver")
                  for name in (replica_name(service, i) for i in range(self.cfg.replicas, self._recorded_replicas))
                  if (pid := read_pid(self.home / "run" / f"{name}.pid")) is not None and pid_alive(pid)]
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
        spawned: list[str] = []
        fresh = self._unformatted_kafka(names)
        try:
            for batch in _batches(self.services(names)):
                self._up_batch(batch, started, spawned)
            self._warm(fresh)
        except BaseException:
            # what this call started is stopped again (by pid): a 3-node cluster whose third node never answered
            # left the other two spinning in leader elections for the rest of a CI run
            if spawned:
                log.warning("stack.up.rolled_back", services=spawned)
                self.down(spawned)
            raise
        if seed and (names is None or any(name.startswith("metaserver") for name in names)):
            self.seed()
        return started

    def _up_batch(self, batch: list[Service], started: dict[str, int], spawned: list[str]) -> None:
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
        for svc in todo:
            waiting.append((svc, self._spawn(svc)))
            spawned.append(svc.name)
        self._batch = waiting  # a node waits on its peers' quorum: one that exits ends the wait of all
        for svc, pid in waiting:
            self._wait_healthy(svc, pid)
            started[svc.name] = pid
            if svc.name == "s3" and svc in todo:
                self._make_buckets()

    def _unformatted_kafka(self, names: list[str] | None) -> list[ClusterSpec]:
        """The Kafka clusters this call starts for the first time (their first node not formatted yet)."""
        from ykafka.devstack.kafka import node_dir

        wanted = {svc.name for svc in self.services(names)}
        return [spec for spec in self.cfg.clusters.values()
                if spec.broker == "kafka" and spec.broker_name(0) in wanted
                and not (node_dir(self.home, spec, 0) / "logs" / "meta.properties").exists()]

    def _warm(self, clusters: list[ClusterSpec]) -> None:
        """Wait until new Kafka clusters hand out producer ids and answer group lookups, so the first client
        after ``up`` meets no 'Coordinator load in progress' retries (about 0.8 s on a fresh node)."""
        if not clusters:
            return
        from ykafka.transport import warm_coordinators

        def warm(spec: ClusterSpec) -> None:
            began = time.monotonic()
            ready = warm_coordinators({"bootstrap.servers": self.cfg.bootstrap(spec.name), **self.super_user(spec)},
                                      timeout_s=self.cfg.startup_timeout_s)
            log.info("stack.kafka.warmed" if ready else "stack.kafka.warm_timed_out", cluster=spec.name,
                     seconds=round(time.monotonic() - began, 2))

        with ThreadPoolExecutor(len(clusters)) as pool:
            list(pool.map(warm, clusters))

    def super_user(self, spec: ClusterSpec) -> dict[str, str]:
        """librdkafka settings of the cluster's super user (none for an open cluster)."""
        if spec.security == "none":
            return {}
        from ykafka.devstack import security as kafka_security

        security = self.security(spec) or {}
        return kafka_security.client_properties(protocol=str(security["protocol"]), username=kafka_security.ADMIN_USER,
                                                password=kafka_security.admin_password(self.home, spec.name),
                                                ca_pem=security.get("ca_pem"))

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
            hint = " (configs/dev.yaml: ports, controller_ports)"
            controllers = sorted({name.split(" ")[0] for names in clashes.values() for name in names
                                  if name.endswith("(controller)")})
            clusters = [spec.name for spec in self.cfg.clusters.values()
                        if any(spec.broker_name(i) in controllers for i in range(spec.brokers))]
            if clusters:
                hint = ("; a Kafka node's controller port is its port + 100 unless set: give "
                        + " and ".join(f"{name} its own with --{name}-controller-port PORT (env YKAFKA_DEV_"
                                       f"{name.upper().replace('-', '_')}_CONTROLLER_PORT)" for name in clusters)
                        + ", or controller_ports in configs/dev.yaml")
            raise StackError("ports used twice: " + "; ".join(f"{port} by {', '.join(names)}"
                                                            for port, names in sorted(clashes.items())) + hint)

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
        """Until ``svc`` answers; a process of the batch that exits first (this one, or a quorum peer it waits
        for) ends the wait at once, reported as exited with its log's reason, not as a timeout."""
        timeout = max(self.cfg.startup_timeout_s, svc.startup_timeout_s or 0)
        deadline = time.monotonic() + timeout
        watched = [(svc, pid), *((s, p) for s, p in self._batch if s.name != svc.name)]
        while time.monotonic() < deadline:
            if _healthy(self.cfg, svc):
                return
            gone = next(((s, p) for s, p in watched if not pid_alive(p)), None)
            if gone is not None:
                raise self._exited(*gone)
            time.sleep(0.1)
        tail = log_tail(svc.log_file(self.home))
        raise StackError(f"{svc.name} (pid {pid}) did not answer on port {svc.port} within "
                         f"{timeout:g}s; log {svc.log_file(self.home)}:\n{tail}")

    def _exited(self, svc: Service, pid: int) -> StackError:
        proc = self._procs.get(svc.name)
        code = None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=2)  # reaped here; a JVM may still be ending its threads
        log_path = svc.log_file(self.home)
        reason = exit_reason(log_path)
        return StackError(f"{svc.name} (pid {pid}) exited{f' with code {code}' if code is not None else ''} before "
                          f"answering on port {svc.port}{f': {reason}' if reason else ''}; log {log_path}:\n"
                          f"{log_tail(log_path)}")

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
                terminate(record.pid, timeout, [pid for other, pid in alive.items()
                                                 if name in group and group.get(other) == group[name]])
                stopped[name] = record.pid
                log.info("stack.service.stopped", service=name, pid=record.pid)
            proc = self._procs.pop(name, None)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=1)
            if record is not None and record.runs(argv.get(name, [])):
                log.error("stack.service.still_running", service=name, pid=record.pid, record=str(path))
            elif record is not None and record.argv is None and pid_alive(record.pid):
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
                wait_gone(pid, 5)
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
            if spec.shared_bucket and not self.cfg.external_bootstrap:
                self._plain_producers(admin, spec.name)
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

    @staticmethod
    def _plain_producers(admin: Any, cluster: str) -> None:
        """``producer.idempotence=false`` at ``cluster:<name>``, once: Tansu's S3 engine records an idempotent
        producer's sequence number before it stores the batch, so a broker killed between the two answers the
        retry as a duplicate and an acknowledged batch is lost; a plain producer's retry is stored (perhaps twice).
        A value an operator set since (either way) is left alone."""
        scope = f"cluster:{cluster}"
        if "producer.idempotence" not in admin.get_config(scope).get("released", {}):
            admin.push_config(scope, {"producer.idempotence": "false"},
                              comment="ykafka dev: Tansu on S3 loses an idempotent producer's in-flight batch "
                                      "when its broker dies (docs/disaster-recovery.md)")
            log.info("stack.seed.plain_producers", cluster=cluster)

    def security(self, spec: ClusterSpec) -> dict[str, Any] | None:
        """The registry's ``security`` of a cluster (its CA for SASL_SSL), None when it is open."""
        if spec.security == "none":
            return None
        from ykafka.devstack import security as kafka_security

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
