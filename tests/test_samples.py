"""Samples run as a user runs them, against the session stack (identity from the environment)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import unique
from tests.support import LocalStack, new_stack

pytestmark = pytest.mark.broker("kafka")  # the samples run as `ykafka dev up` starts the stack by default: Apache Kafka

ROOT = Path(__file__).resolve().parent.parent


def _sample_env(stack: LocalStack, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "YKAFKA_APP_ID": stack.app_id, "YKAFKA_APP_SECRET": stack.app_secret,
            "YKAFKA_METASERVER": stack.metaserver, "YKAFKA_ADMIN_TOKEN": stack.admin_token,
            "YKAFKA_CACHE_DIR": str(tmp_path / "cache")}


def test_quickstart_produces_and_consumes_every_message(stack: LocalStack, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "samples" / "quickstart.py"), "--count", "300",
                             "--keys", "6"], capture_output=True, text=True, timeout=180,
                            env=_sample_env(stack, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "300 acknowledged, 0 failed" in result.stdout
    assert "consumed 300 messages back over 6 keys (key-0=50," in result.stdout
    assert result.stdout.strip().endswith("OK")
    assert "Coordinator load in progress" not in result.stderr  # `up` warmed the fresh cluster
    # the console's inventory lists both of its clients (one process, each its own id; issue 30)
    topic = result.stdout.split(" messages to '", 1)[1].split("'", 1)[0]
    mine = [c for c in stack.client_reports(stack.app_id) if topic in (c.get("topics") or [])]
    assert sorted(c["role"] for c in mine) == ["consumer", "producer"], mine
    assert len({(c["hostname"], c["pid"], c["process_started"]) for c in mine}) == 1, mine


def test_asyncio_service_produces_and_consumes_every_message_through_live_changes(stack: LocalStack,
                                                                                   tmp_path: Path) -> None:
    topic = f"aio-orders-{os.getpid()}-{tmp_path.name[-6:]}"
    result = subprocess.run([sys.executable, str(ROOT / "samples" / "asyncio_service.py"), "--topic", topic,
                             "--rate", "300", "--seconds", "6", "--demo-changes"], capture_output=True, text=True,
                            timeout=180, env=_sample_env(stack, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pushed producer.linger.ms=20 (topic) and consumer.workers=32 (group)" in result.stdout
    assert "linger.ms=20" in result.stdout and "workers=32" in result.stdout  # applied live, no restart
    last = result.stdout.strip().splitlines()[-1]
    sent = int(last.split()[1].rstrip(","))
    assert sent > 1000 and last == f"sent {sent}, acknowledged {sent}, handled {sent}: OK"


def _run_sample(stack: LocalStack, tmp_path: Path, name: str, *args: str, timeout: float = 120,
                env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run([sys.executable, str(ROOT / "samples" / name), *args], capture_output=True, text=True,
                            timeout=timeout, env={**_sample_env(stack, tmp_path), **(env or {})}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, result.stderr
    return lines


def test_admin_push_sample_pushes_and_reads_back(stack: LocalStack, tmp_path: Path) -> None:
    topic = unique("push")
    last = _run_sample(stack, tmp_path, "admin_push.py", "--topic", topic, "--acks", "1",
                       env={"YKAFKA_CONFIGCENTER": stack.configcenter})[-1]
    assert last.startswith(f"config service serves ykafka.topic.{topic}: ") and "'producer.acks': '1'" in last


def test_configcenter_watch_sample_sees_its_change_by_long_poll(stack: LocalStack, tmp_path: Path) -> None:
    last = _run_sample(stack, tmp_path, "configcenter_watch.py", "--url", stack.configcenter, "--token",
                       stack.openapi_token, "--app-id", unique("watch"), "--value", "0.5")[-1]
    assert last.startswith("fetched trace.sample.rate = '0.5'"), last


def test_hot_producer_sample_runs_for_its_seconds(stack: LocalStack, tmp_path: Path) -> None:
    last = _run_sample(stack, tmp_path, "hot_producer.py", "--topic", unique("hot"), "--seconds", "3",
                       "--rate", "100")[-1]
    assert re.fullmatch(r"sent \d+ messages; 0 undelivered at close", last), last


def test_worker_consumer_sample_stops_after_its_seconds(stack: LocalStack, tmp_path: Path) -> None:
    last = _run_sample(stack, tmp_path, "worker_consumer.py", "--topic", unique("work"), "--group", unique("g"),
                       "--seconds", "12", "--work-ms", "1")[-1]
    handled = re.fullmatch(r"stopped; handled (\d+) messages", last)
    assert handled and int(handled.group(1)) > 0, last


def test_failover_sample_without_an_outage_loses_nothing(stack: LocalStack, tmp_path: Path) -> None:
    last = _run_sample(stack, tmp_path, "failover.py", "--topic", unique("fo"), "--seconds", "4",
                       "--rate", "100")[-1]
    assert last.startswith("final: sent=") and " failed=0 lost=0 " in last, last


def test_placements_sample_writes_where_the_topic_is_placed(stack: LocalStack, tmp_path: Path) -> None:
    lines = _run_sample(stack, tmp_path, "placements.py", "--topic", unique("placed"), "--cluster", "dc-b")
    assert any(line.startswith("the producer routes placed-") and " to dc-b (its default cluster is dc-a)" in line
               for line in lines), lines
    assert lines[-1] == "20 sent, 20 read back on dc-b: OK", lines[-1]


def test_every_sample_runs_in_the_suite() -> None:
    source = "\n".join(p.read_text() for p in sorted(Path(__file__).parent.glob("test_*.py")))
    missing = [p.name for p in sorted((ROOT / "samples").glob("*.py")) if f'"{p.name}"' not in source]
    assert not missing, f"samples that no test runs: {missing}"


def _no_anonymous_door(st: LocalStack) -> None:
    """Every port each Kafka node process of the stack listens on (from /proc) drops an anonymous admin request
    unanswered; each node's server.properties (its JAAS passwords) and the cluster's secrets are 0600."""
    from tests.test_broker_attacks import ADMIN_REQUESTS, listening_ports
    from ykafka.devstack import wire
    from ykafka.devstack.services import services

    nodes = [svc for svc in services(st.cfg) if svc.kind == "kafka"]
    assert nodes
    for svc in nodes:
        pid = st.stack.pid(svc)
        assert pid is not None, svc.name
        ports = listening_ports(pid)
        assert len(ports) == 2 and svc.port in ports, ports
        for port in sorted(ports):
            for name in ADMIN_REQUESTS:
                with wire.Probe(st.cfg.host, port) as probe:
                    assert probe.request(name) == wire.CLOSED, (svc.name, port, name)
    _http_doors(st)
    secret_files = [p for p in (st.home / "secrets").rglob("*") if p.is_file()]
    for path in [*(st.home / "data" / "kafka").glob("*/node-*/server.properties"), *secret_files]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in [p for p in (st.home / "secrets").rglob("*") if p.is_dir()]:  # kafka-admin/: one file per cluster
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert len(list((st.home / "secrets").glob("kafka-dc-a-*.password"))) == 2  # the cluster's own node secrets
    assert stat.S_IMODE(st.home.stat().st_mode) == 0o700
    assert not list(st.home.glob("data/kafka/*/node-*/.format.args"))  # the format's SCRAM arguments: gone
    for path in (st.home / "data").glob("*.db*"):  # the MetaServer's and config service's databases, -wal, -shm
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = [p.read_text().strip() for p in secret_files]
    secrets += [st.cfg.admin_token, st.cfg.openapi_token]
    running = [pid for svc in services(st.cfg) if (pid := st.stack.pid(svc)) is not None]
    assert len(running) >= 3  # a Kafka node, the config service, the MetaServer
    for pid in running:  # no secret on the command line of any process the stack runs (what `ps` shows)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert not [s for s in secrets if s and s in cmdline], pid


#: what the secured stack's HTTP servers answer a caller with no credential at all: health, discovery (Apollo's
#: meta-service routes, which name only the config services' own addresses), counters, and the API's schema
ANONYMOUS_OK = {
    "metaserver": {"/health", "/openapi.json", "/docs", "/console/login"},
    "configcenter": {"/health", "/openapi.json", "/services/config", "/services/admin", "/stats"},
}


def _http_doors(st: LocalStack) -> None:
    """Every process of the stack listens on its one declared port (Kafka: client + controller), on the stack's
    host only; and every GET route of each HTTP server (from its own OpenAPI, path parameters filled in) answers
    an anonymous caller only where :data:`ANONYMOUS_OK` says: an attacker's sweep of every door, not the doors
    the tests had in mind."""
    import requests

    from tests.test_broker_attacks import listening_sockets
    from ykafka.devstack.services import services

    for svc in services(st.cfg):
        pid = st.stack.pid(svc)
        assert pid is not None, svc.name
        sockets = listening_sockets(pid)
        assert {host for host, _ in sockets} == {st.cfg.host}, (svc.name, sockets)  # never 0.0.0.0
        if svc.kind == "kafka":
            continue  # its two ports: _no_anonymous_door
        assert {port for _, port in sockets} == {svc.port}, (svc.name, sockets)
        base = f"http://{st.cfg.host}:{svc.port}"
        schema = requests.get(f"{base}/openapi.json", timeout=10).json()
        paths = [re.sub(r"\{[^}]+\}", "x", path) for path, ops in schema["paths"].items() if "get" in ops]
        paths += ["/openapi.json", "/console/", "/console/clients", "/console/login", "/docs", "/metrics", "/admin",
                  "/.env"]
        open_doors = set()
        for path in paths:
            answer = requests.get(base + path, timeout=10, allow_redirects=False)
            assert answer.status_code < 500, (svc.name, path, answer.status_code)
            if answer.status_code < 300:
                open_doors.add(path)
        kind = svc.name.split("-")[0]
        assert open_doors == ANONYMOUS_OK[kind], (svc.name, sorted(open_doors))


def test_broker_security_sample_on_a_secured_stack(tmp_path: Path) -> None:
    """``ykafka dev up`` with ``security: sasl_ssl``: the super user's password and the broker key made 0600 under
    the stack's home and never handed to apps; the sample sees an address-only client refused and the demo app
    write and read through its own principal."""
    st = new_stack(tmp_path / "stack", broker="kafka")
    spec = st.cfg.clusters["dc-a"]
    spec.security, spec.standby = "sasl_ssl", None
    st.cfg.clusters, st.cfg.default_cluster = {"dc-a": spec}, "dc-a"
    try:
        st.up()
        secret = st.home / "secrets" / "kafka-admin" / "dc-a.password"  # its own (issue 37)
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert stat.S_IMODE((st.home / "tls" / "broker-key.pem").stat().st_mode) == 0o600
        assert secret.read_text() not in (st.home / "dev.env").read_text()
        _no_anonymous_door(st)
        lines = _run_sample(st, tmp_path, "broker_security.py", "--topic", unique("secured"),
                            "--controller-port", str(spec.quorum_ports[0]), env={"YKAFKA_DEV_HOME": str(st.home)})
    finally:
        st.down()
    assert lines[0] == "dc-a: SASL_SSL SCRAM-SHA-512", lines
    assert lines[1].startswith("a client with only the address: refused (") and "DELIVERED" not in lines[1], lines
    assert lines[2] == f"the app's own principal: User:app.{st.app_id}@dc-a.g1", lines
    assert lines[3] == (f"the controller listener {st.cfg.host}:{spec.quorum_ports[0]}: anonymous CreateAcls: "
                        "connection closed; the app's credentials: mechanism refused"), lines
    forced = re.fullmatch(r"bindings in force: (\d+) of (\d+) desired, missing 0, extra 0", lines[4])
    assert forced is not None and forced[1] == forced[2] and int(forced[1]) >= 10, lines  # the demo app: '*'s
    assert lines[-1] == "20 sent, 20 read back with the app's own credentials: OK", lines


def test_guarded_rollout_refuses_a_guarded_change_and_rolls_a_harmless_one_out(stack: LocalStack,
                                                                               tmp_path: Path) -> None:
    lines = [line for line in _run_sample(stack, tmp_path, "guarded_rollout.py", "--bake", "2", timeout=180)
             if not line[:4].isdigit()]  # the SDK's own log lines start with their time
    assert any(line.startswith("refused: guard:p0-acks-all: P0 topics keep producer.acks=all") for line in lines)
    actions = [line.split(":")[0].strip() for line in lines if line.startswith("  ")]
    assert actions == ["publish", "advance", "promote"], lines
    assert lines[-3] == "linger.ms in force: [20, 20, 20, 20]"
    sent = int(lines[-2].split()[1].rstrip(","))
    assert sent > 0 and lines[-2] == f"sent {sent}, acknowledged {sent}" and lines[-1] == "OK"


def test_operator_tools_sample_browses_and_resets(stack: LocalStack, tmp_path: Path) -> None:
    topic = unique("tools")
    lines = _run_sample(stack, tmp_path, "operator_tools.py", "--topic", topic, "--shift", "-2")
    assert lines[0] == f"group {topic}-readers read 10 messages of {topic}"
    assert lines[1:4] == [f"  0:{n} key=key-{n % 2} headers=[['source', 'operator_tools']] value={{\"n\": {n}}}"
                          for n in (7, 8, 9)]
    assert lines[4] == "dry run: partition 0: 10 -> 8 (lag after 2)"
    assert lines[5] == f"reset direct: done; {topic}[0] 10 → 8" and lines[-1] == "OK"


def test_alert_notifications_sample_reaches_its_receiver(stack: LocalStack, tmp_path: Path) -> None:
    lines = _run_sample(stack, tmp_path, "alert_notifications.py")
    assert lines[0] == "refused (422): route 1: channels must name configured channels", lines
    assert lines[-2:] == ["receiver got: firing consumer-lag ERR topic orders",
                          "receiver got: resolved consumer-lag OK topic orders"], lines
