"""The stack's service records (run/<name>.pid): `down` stops what the record names and keeps a record whose
process it could not verify. Real processes (a `sleep` standing in for a service), no stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ykafka.devstack import Service, Stack, StackConfig, write_private, write_record


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _stack(home: Path) -> Stack:
    return Stack(StackConfig.load(env={}, home=home, external_bootstrap="127.0.0.1:1"))


def test_down_stops_the_recorded_command_not_todays(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    stack = _stack(tmp_path)
    (tmp_path / "run").mkdir()
    service = Service("metaserver", list(map(str, sleeper.args)), 1)
    write_record(tmp_path / "run" / "metaserver.pid", service, sleeper.pid)
    assert stack.status()["running"]["metaserver"] == sleeper.pid  # today's command differs: the record rules
    assert stack.down() == {"metaserver": sleeper.pid}
    assert sleeper.wait(timeout=10) is not None
    assert list((tmp_path / "run").iterdir()) == []


def test_a_bare_pid_that_runs_something_else_is_kept(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """A pid file from before records held the command: the process may be ours on other settings; `down` must
    neither kill it unverified nor drop the only way to find it."""
    stack = _stack(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metaserver.pid").write_text(str(sleeper.pid))
    assert stack.down() == {}
    assert sleeper.poll() is None
    assert json.loads((tmp_path / "run" / "metaserver.pid").read_text()) == sleeper.pid


def test_a_record_of_a_gone_process_is_dropped(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    (tmp_path / "run").mkdir()
    write_record(tmp_path / "run" / "dc-a.pid", Service("dc-a", list(map(str, sleeper.args)), 1), sleeper.pid)
    sleeper.kill()
    sleeper.wait(timeout=10)
    assert _stack(tmp_path).down() == {}
    assert list((tmp_path / "run").iterdir()) == []


@pytest.mark.parametrize("before", [None, 0o644])
def test_private_file_is_owner_only_from_its_first_byte(tmp_path: Path, before: int | None) -> None:
    """Under umask 0 (the worst case) and over a world-readable file left from before."""
    path = tmp_path / "dev.env"
    if before is not None:
        path.write_text("old")
        path.chmod(before)
    old_umask = os.umask(0)
    try:
        write_private(path, "export YKAFKA_APP_SECRET=s\n")
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == "export YKAFKA_APP_SECRET=s\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.env"]
