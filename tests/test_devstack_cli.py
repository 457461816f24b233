"""`ykafka dev up / status / down` as a user runs them, on free ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ykafka.devstack import free_port


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


@pytest.mark.slow
def test_up_status_down_twice_leaves_nothing_behind(tmp_path: Path) -> None:
    ports = {"dc-a": free_port(), "dc-b": free_port(), "configcenter": free_port(), "metaserver": free_port()}
    for _round in range(2):
        up = _ykafka("dev", "up", home=tmp_path, ports=ports)
        assert up.returncode == 0, up.stderr + up.stdout
        again = _ykafka("dev", "up", home=tmp_path, ports=ports)  # idempotent
        assert again.returncode == 0, again.stderr
        status = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)
        assert status["clusters"] == {"dc-a": f"127.0.0.1:{ports['dc-a']}", "dc-b": f"127.0.0.1:{ports['dc-b']}"}
        assert status["configcenter"] == f"http://127.0.0.1:{ports['configcenter']}"
        assert status["metaserver"] == f"http://127.0.0.1:{ports['metaserver']}"
        pids = status["running"]
        assert set(pids) == {"dc-a", "dc-b", "configcenter", "metaserver"}
        assert all(isinstance(pid, int) and _alive(pid) for pid in pids.values())
        env = (tmp_path / "dev.env").read_text()
        assert "YKAFKA_APP_ID=demo" in env and "YKAFKA_APP_SECRET=" in env
        assert (tmp_path / "dev.env").stat().st_mode & 0o777 == 0o600
        exported = dict(line.removeprefix("export ").split("=", 1) for line in env.splitlines() if "=" in line)
        tokens = [exported["YKAFKA_ADMIN_TOKEN"], exported["YKAFKA_CC_OPENAPI_TOKEN"]]
        for name in ("configcenter", "metaserver"):  # secrets never on a command line `ps` shows
            cmdline = Path(f"/proc/{pids[name]}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert "serve" in cmdline and not any(token in cmdline for token in tokens), (name, cmdline)

        down = _ykafka("dev", "down", home=tmp_path, ports=ports)
        assert down.returncode == 0, down.stderr
        assert not any(_alive(pid) for pid in pids.values())
        after = json.loads(_ykafka("dev", "status", "--json", home=tmp_path, ports=ports).stdout)
        assert after["running"] == {name: None for name in pids}


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
