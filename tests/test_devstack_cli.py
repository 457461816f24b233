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
    """Round 1: `--broker kafka`, one config service and one MetaServer: `dev status --json` names each broker's
    kind, node id, address and pid, the quickstart produces and consumes through it, `dev down` with the up
    settings stops it. Round 2: `--replicas 2` (peers on one database), started on other ports given partly by
    environment variables and partly by flags, stopped by a `dev down` with none of them (only the home, as a user
    who opened a new shell): every recorded pid is gone and no record is left behind.

    One test, two stacks: it was three tests and four stack starts (the `--broker kafka` quickstart and the bare
    `down` each started a stack of their own), each start two Kafka JVMs."""
    ports = {"dc-a": _free_pair(100), "dc-b": _free_pair(100), "configcenter": _free_pair(), "metaserver": _free_pair()}
    cc2, ms2 = f"http://127.0.0.1:{ports['configcenter'] + 1}", f"http://127.0.0.1:{ports['metaserver'] + 1}"
    started: list[int] = []  # every pid `up` started, from the records (killed here if the test fails)
    try:
        for replicas in (1, 2):
            _round(replicas, tmp_path, ports, cc2, ms2, started)
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _up_by_env_and_flags(tmp_path: Path, ports: dict[str, int]) -> subprocess.CompletedProcess[str]:
    """`dev up --replicas 2` with the dc-a and config-service ports from the environment, the others by flags."""
    env = {**os.environ, "YKAFKA_DEV_STARTUP_TIMEOUT": "60", "YKAFKA_DEV_DC_A_PORT": str(ports["dc-a"]),
           "YKAFKA_DEV_CONFIGCENTER_PORT": str(ports["configcenter"])}
    return subprocess.run([sys.executable, "-m", "ykafka.cli", "dev", "up", "--replicas", "2", "--home", str(tmp_path),
                           "--dc-b-port", str(ports["dc-b"]), "--metaserver-port", str(ports["metaserver"])],
                          capture_output=True, text=True, timeout=180, env=env)


def _bare(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`ykafka dev ...` with only the home: no port flag, no YKAFKA_DEV_* variable."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("YKAFKA_DEV_")}
    return subprocess.run([sys.executable, "-m", "ykafka.cli", "dev", *args, "--home", str(home)], capture_output=True,
                          text=True, timeout=120, env=bare)


def _round(replicas: int, tmp_path: Path, ports: dict[str, int], cc2: str, ms2: str, started: list[int]) -> None:
    if replicas == 1:
        up = _ykafka("dev", "up", "--broker", "kafka", "--replicas", "1", home=tmp_path, ports=ports)
    else:
        up = _up_by_env_and_flags(tmp_path, ports)
    started += [json.loads(p.read_text())["pid"] for p in (tmp_path / "run").glob("*.pid")]
    assert up.returncode == 0, up.stderr + up.stdout
    if replicas == 2:  # read back from the records alone, though today's settings say other ports
        bare = json.loads(_bare("status", "--json", home=tmp_path).stdout)
        assert set(bare["running"]) == {"dc-a", "dc-b", "configcenter", "configcenter-2", "metaserver", "metaserver-2"}
        assert all(isinstance(pid, int) and _alive(pid) for pid in bare["running"].values()), bare
        assert bare["clusters"] == {"dc-a": f"127.0.0.1:{ports['dc-a']}", "dc-b": f"127.0.0.1:{ports['dc-b']}"}
        recorded = json.loads((tmp_path / "run" / "dc-a.pid").read_text())
        assert recorded["pid"] == bare["running"]["dc-a"] and recorded["port"] == ports["dc-a"]
        cmdline = Path(f"/proc/{recorded['pid']}/cmdline").read_bytes().decode().split("\0")
        assert cmdline[:-1] == recorded["argv"]  # the command it was started with (a Kafka node by default)
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
        for cluster in ("dc-a", "dc-b"):
            assert status["brokers"][cluster]["kind"] == "kafka"
            assert status["brokers"][cluster]["brokers"] == [
                {"name": cluster, "kind": "kafka", "node_id": 1, "address": f"127.0.0.1:{ports[cluster]}",
                 "pid": pids[cluster]}]
            assert b"kafka.Kafka" in Path(f"/proc/{pids[cluster]}/cmdline").read_bytes().split(b"\0")
        sample = subprocess.run([sys.executable, str(ROOT / "samples" / "quickstart.py"), "--count", "200"],
                                capture_output=True, text=True, timeout=180,
                                env={**os.environ, **exported, "YKAFKA_CACHE_DIR": str(tmp_path / "cache")})
        assert sample.returncode == 0, sample.stdout + sample.stderr
        assert "200 acknowledged" in sample.stdout and "consumed 200" in sample.stdout, sample.stdout
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

    # round 1: down with the up settings; round 2: with none of them (only the home)
    down = _ykafka("dev", "down", home=tmp_path, ports=ports) if replicas == 1 else _bare("down", home=tmp_path)
    assert down.returncode == 0, down.stderr
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []  # no record left behind
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
