"""`ykafka dev up / status / down` as a user runs them, on free ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from ykafka.devstack import free_port

ROOT = Path(__file__).resolve().parent.parent


def _ykafka(*args: str, home: Path, ports: dict[str, int]) -> subprocess.CompletedProcess[str]:
    flags = ["--home", str(home)]
    for name, port in ports.items():
        flags += [f"--{name}-port", str(port)]
    return subprocess.run([sys.executable, "-m", "ykafka.cli", *args, *flags], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "YKAFKA_DEV_STARTUP_TIMEOUT": "60"})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _free_pair(step: int = 1) -> int:
    """A free port whose port + ``step`` is free too (a second replica listens at + 1, Kafka's controller at + 100:
    CI once saw dc-b exit with 'Address already in use' on a port free_port had handed out, its + 100 unchecked)."""
    while True:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + step))
            except OSError:
                continue
        return port


@pytest.mark.slow
def test_up_status_down_twice_leaves_nothing_behind(tmp_path: Path) -> None:
    """Round 1: one config service and one MetaServer; round 2: `--replicas 2` (peers on one database)."""
    ports = {"dc-a": _free_pair(100), "dc-b": _free_pair(100), "configcenter": _free_pair(), "metaserver": _free_pair()}
    cc2, ms2 = f"http://127.0.0.1:{ports['configcenter'] + 1}", f"http://127.0.0.1:{ports['metaserver'] + 1}"
    for replicas in (1, 2):
        up = _ykafka("dev", "up", "--replicas", str(replicas), home=tmp_path, ports=ports)
        assert up.returncode == 0, up.stderr + up.stdout
        again = _ykafka("dev", "up", home=tmp_path, ports=ports)  # idempotent
        assert again.returncode == 0, again.stderr
        status = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)
        assert status["clusters"] == {"dc-a": f"127.0.0.1:{ports['dc-a']}", "dc-b": f"127.0.0.1:{ports['dc-b']}"}
        cc, ms = f"http://127.0.0.1:{ports['configcenter']}", f"http://127.0.0.1:{ports['metaserver']}"
        pids = status["running"]
        env = (tmp_path / "dev.env").read_text()
        assert "YKAFKA_APP_ID=demo" in env and "YKAFKA_APP_SECRET=" in env
        assert (tmp_path / "dev.env").stat().st_mode & 0o777 == 0o600
        exported = dict(line.removeprefix("export ").split("=", 1) for line in env.splitlines() if "=" in line)
        tokens = [exported["YKAFKA_ADMIN_TOKEN"], exported["YKAFKA_CC_OPENAPI_TOKEN"]]
        for name in ("configcenter", "metaserver"):  # secrets never on a command line `ps` shows
            cmdline = Path(f"/proc/{pids[name]}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert "serve" in cmdline and not any(token in cmdline for token in tokens), (name, cmdline)
        if replicas == 1:
            assert (status["configcenter"], status["metaserver"]) == (cc, ms)
            assert set(pids) == {"dc-a", "dc-b", "configcenter", "metaserver"}
        else:
            assert (status["configcenter"], status["metaserver"]) == (f"{cc},{cc2}", f"{ms},{ms2}")
            assert set(pids) == {"dc-a", "dc-b", "configcenter", "configcenter-2", "metaserver", "metaserver-2"}
            assert f"YKAFKA_METASERVER={ms},{ms2}\n" in env and f"YKAFKA_CONFIGCENTER_URL={cc},{cc2}\n" in env
            listed = {i["homepageUrl"] for i in requests.get(cc2 + "/services/config", timeout=5).json()}
            assert listed == {cc + "/", cc2 + "/"}  # discovery: both config services on one database
            table = _ykafka("dev", "status", home=tmp_path, ports=ports).stdout
            assert "configcenter-2" in table and cc2.removeprefix("http://") in table
            fewer = _ykafka("dev", "up", "--replicas", "1", home=tmp_path, ports=ports)  # would orphan the -2s
            assert fewer.returncode != 0
            assert "configcenter-2, metaserver-2 run from a stack started with --replicas 2" in fewer.stderr
            # samples/controlplane_failover.py on this stack: the parked config service and a MetaServer stopped
            # under a running producer, a change pushed meanwhile, applied; the two started again
            sample_env = {**os.environ, **exported, "YKAFKA_CACHE_DIR": str(tmp_path / "sample-cache"),
                          "YKAFKA_DEV_HOME": str(tmp_path), "YKAFKA_DEV_STARTUP_TIMEOUT": "60",
                          **{f"YKAFKA_DEV_{name.replace('-', '_').upper()}_PORT": str(port)
                             for name, port in ports.items()}}
            sample = subprocess.run([sys.executable, str(ROOT / "samples" / "controlplane_failover.py"),
                                     "--seconds", "6"], capture_output=True, text=True, timeout=180, env=sample_env)
            assert sample.returncode == 0, sample.stdout + sample.stderr
            lines = sample.stdout.strip().splitlines()
            assert lines[-1] == "OK" and any(line.startswith("applied by the running producer ") for line in lines)
            sent = next(line for line in lines if line.startswith("sent "))
            assert sent.endswith(", failed 0, 0 left at close") and sent.split(",")[0][5:] == \
                sent.split(",")[1].split()[-1], sent  # sent N, acknowledged N
            pids = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)["running"]
            assert all(isinstance(pid, int) and _alive(pid) for pid in pids.values()), pids  # started again
            stop = _ykafka("dev", "stop", "configcenter", home=tmp_path, ports=ports)
            assert stop.returncode == 0, stop.stderr
            assert [i["homepageUrl"] for i in requests.get(cc2 + "/services/config", timeout=5).json()] == [cc2 + "/"]
            assert requests.get(ms2 + "/health", timeout=5).status_code == 200
            pids.pop("configcenter")
        assert all(isinstance(pid, int) and _alive(pid) for pid in pids.values())

        down = _ykafka("dev", "down", home=tmp_path, ports=ports)
        assert down.returncode == 0, down.stderr
        assert not any(_alive(pid) for pid in pids.values())
        after = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)
        assert after["running"] and not any(after["running"].values())


def test_port_in_use_is_named_with_its_holder(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        result = _ykafka("dev", "start", "dc-a", home=tmp_path, ports={"dc-a": port})
    assert result.returncode != 0
    assert f"port {port} for dc-a is already in use by pid {os.getpid()}" in result.stderr
    assert not (tmp_path / "run" / "dc-a.pid").exists()


def test_unknown_service_is_a_clear_error(tmp_path: Path) -> None:
    result = _ykafka("dev", "stop", "dc-z", home=tmp_path, ports={})
    assert result.returncode != 0
    assert "unknown service(s) dc-z; known: dc-a, dc-b, configcenter, metaserver" in result.stderr


@pytest.mark.slow
def test_down_without_the_up_settings_stops_what_up_started(tmp_path: Path) -> None:
    """Up on other ports (env and flags) with two replicas; down with none of them (only the home, as a user who
    opened a new shell): every recorded pid is gone and no record is left behind."""
    ports = {"dc-a": _free_pair(100), "dc-b": _free_pair(100), "configcenter": _free_pair(), "metaserver": _free_pair()}
    env = {**os.environ, "YKAFKA_DEV_STARTUP_TIMEOUT": "60", "YKAFKA_DEV_DC_A_PORT": str(ports["dc-a"]),
           "YKAFKA_DEV_CONFIGCENTER_PORT": str(ports["configcenter"])}
    home = ["--home", str(tmp_path)]
    cli = [sys.executable, "-m", "ykafka.cli", "dev"]
    started: list[int] = []  # every pid `up` started, from the records (killed here if the test fails)
    try:
        _up_then_down_bare(cli, home, env, ports, tmp_path, started)
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _up_then_down_bare(cli: list[str], home: list[str], env: dict[str, str], ports: dict[str, int], tmp_path: Path,
                       started: list[int]) -> None:
    up = subprocess.run([*cli, "up", "--replicas", "2", *home, "--dc-b-port", str(ports["dc-b"]),
                         "--metaserver-port", str(ports["metaserver"])], capture_output=True, text=True, timeout=180,
                        env=env)
    started += [json.loads(p.read_text())["pid"] for p in (tmp_path / "run").glob("*.pid")]
    assert up.returncode == 0, up.stderr + up.stdout
    bare = {k: v for k, v in os.environ.items() if not k.startswith("YKAFKA_DEV_")}
    status = json.loads(subprocess.run([*cli, "status", "--json", *home], capture_output=True, text=True,
                                       timeout=60, env=bare).stdout)
    pids = status["running"]  # read back from the records, though today's settings say other ports
    assert set(pids) == {"dc-a", "dc-b", "configcenter", "configcenter-2", "metaserver", "metaserver-2"}
    assert all(isinstance(pid, int) and _alive(pid) for pid in pids.values()), pids
    assert status["clusters"] == {"dc-a": f"127.0.0.1:{ports['dc-a']}", "dc-b": f"127.0.0.1:{ports['dc-b']}"}
    recorded = json.loads((tmp_path / "run" / "dc-a.pid").read_text())
    assert recorded["pid"] == pids["dc-a"] and recorded["port"] == ports["dc-a"]
    cmdline = Path(f"/proc/{pids['dc-a']}/cmdline").read_bytes().decode().split("\0")
    assert cmdline[:-1] == recorded["argv"]  # the command it was started with (a Kafka node by default)

    down = subprocess.run([*cli, "down", *home], capture_output=True, text=True, timeout=120, env=bare)
    assert down.returncode == 0, down.stderr
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


def test_dev_up_broker_kafka_runs_the_quickstart(tmp_path: Path) -> None:
    """`ykafka dev up --broker kafka`: two Apache Kafka clusters, `dev status --json` names each broker's kind, node
    id, address and pid; the quickstart sample produces and consumes through them; `dev down` leaves nothing."""
    ports = {"dc-a": _free_pair(100), "dc-b": _free_pair(100), "configcenter": free_port(), "metaserver": free_port()}
    pids: dict[str, int] = {}
    try:
        up = _ykafka("dev", "up", "--broker", "kafka", home=tmp_path, ports=ports)
        status = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)
        pids = {name: pid for name, pid in status["running"].items() if pid}
        assert up.returncode == 0, up.stderr + up.stdout
        for cluster in ("dc-a", "dc-b"):
            assert status["brokers"][cluster]["kind"] == "kafka"
            assert status["brokers"][cluster]["brokers"] == [
                {"name": cluster, "kind": "kafka", "node_id": 1, "address": f"127.0.0.1:{ports[cluster]}",
                 "pid": pids[cluster]}]
            cmdline = Path(f"/proc/{pids[cluster]}/cmdline").read_bytes().split(b"\0")
            assert b"kafka.Kafka" in cmdline
        exported = dict(line.removeprefix("export ").split("=", 1)
                        for line in (tmp_path / "dev.env").read_text().splitlines() if "=" in line)
        sample = subprocess.run([sys.executable, str(ROOT / "samples" / "quickstart.py"), "--count", "200"],
                                capture_output=True, text=True, timeout=180,
                                env={**os.environ, **exported, "YKAFKA_CACHE_DIR": str(tmp_path / "cache")})
        assert sample.returncode == 0, sample.stdout + sample.stderr
        assert "200 acknowledged" in sample.stdout and "consumed 200" in sample.stdout, sample.stdout
        down = _ykafka("dev", "down", home=tmp_path, ports=ports)
        assert down.returncode == 0, down.stderr
        assert [name for name, pid in pids.items() if _alive(pid)] == []
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []
    finally:
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
