"""Construction and close are exception-safe (issue 32 item 4): a failure injected at each step of
``Producer(...)`` or ``Producer.close()`` leaves no thread running and no spill slot held.

Each step is made to fail by replacing one real method with one that raises; everything else is real (a
broker, the spill directory, the DR engine's threads, librdkafka clients). Each scenario runs in a process of
its own (tests/lifecycle_child.py), whose thread count nothing else moves.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

#: each step of construction (the Producer's and, inside it, the DR engine's), made to fail
CONSTRUCTION_STEPS = [
    ("Runtime", "add_version_listener"),
    ("Observability", "__init__"),
    ("HealthMonitor", "add_listener"),
    ("OutageStore", "load_all"),
    ("DisasterRecovery", "_maintain_start"),
    ("ykafka.dr.attach", "_send_hook"),
    ("Producer", "set_hooks"),
]

#: each step of close, made to fail (after doing its own work)
CLOSE_STEPS = [
    ("DisasterRecovery", "flush"),
    ("Replayer", "close"),
    ("ClusterLink", "close"),
    ("SpillQueue", "close"),
    ("Producer", "_close_client"),
]


def _scenario(mode: str, owner: str, name: str, bootstrap: str, tmp_path: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "tests.lifecycle_child", mode, owner, name, bootstrap,
                           str(tmp_path / "cache")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("owner", "name"), CONSTRUCTION_STEPS, ids=[f"{o}.{n}" for o, n in CONSTRUCTION_STEPS])
def test_a_failing_construction_step_leaves_nothing_running(brokers: dict[str, str], tmp_path: Path, owner: str,
                                                            name: str) -> None:
    assert _scenario("construct", owner, name, brokers["dc-a"], tmp_path) == "SETTLED"


@pytest.mark.parametrize(("owner", "name"), CLOSE_STEPS, ids=[f"{o}.{n}" for o, n in CLOSE_STEPS])
def test_a_failing_close_step_still_stops_everything_and_frees_the_slot(brokers: dict[str, str], tmp_path: Path,
                                                                        owner: str, name: str) -> None:
    assert _scenario("close", owner, name, brokers["dc-a"], tmp_path) == "SETTLED"
