"""Configuration, identity and connection errors answer one line naming the fix and exit 2; --debug shows why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import LocalStack
from ykafka.devstack import free_port

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = [sys.executable, str(ROOT / "samples" / "quickstart.py"), "--count", "1"]
IDENTITY = ("YKAFKA_APP_ID", "YKAFKA_APP_SECRET", "YKAFKA_METASERVER", "YKAFKA_DEBUG", "YKAFKA_ADMIN_TOKEN")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY}
    return {**env, "YKAFKA_CACHE_DIR": str(tmp_path / "cache"), **extra}


def _one_line(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_sample_without_the_dev_env_names_the_fix(tmp_path: Path) -> None:
    result = subprocess.run(QUICKSTART, capture_output=True, text=True, timeout=60, env=_env(tmp_path))
    _one_line(result, "no MetaServer configured", "Fix: after `ykafka dev up`, run `source .ykafka/dev.env`")
    debug = subprocess.run([*QUICKSTART, "--debug"], capture_output=True, text=True, timeout=60, env=_env(tmp_path))
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ConfigError" in debug.stderr


def test_sample_with_a_wrong_secret_or_no_metaserver(stack: LocalStack, tmp_path: Path) -> None:
    wrong = _env(tmp_path, YKAFKA_APP_ID=stack.app_id, YKAFKA_APP_SECRET="not-the-secret",
                 YKAFKA_METASERVER=stack.metaserver)
    result = subprocess.run(QUICKSTART, capture_output=True, text=True, timeout=60, env=wrong)
    _one_line(result, "refused app", "Fix: check YKAFKA_APP_ID and YKAFKA_APP_SECRET")
    traced = subprocess.run(QUICKSTART, capture_output=True, text=True, timeout=60, env={**wrong, "YKAFKA_DEBUG": "1"})
    assert traced.returncode == 1 and "Traceback" in traced.stderr and "AuthError" in traced.stderr

    gone = _env(tmp_path, YKAFKA_APP_ID=stack.app_id, YKAFKA_APP_SECRET=stack.app_secret,
                YKAFKA_METASERVER=f"http://127.0.0.1:{free_port()}")
    result = subprocess.run(QUICKSTART, capture_output=True, text=True, timeout=60, env=gone)
    _one_line(result, "unreachable", "Fix: start the stack (`ykafka dev up`)")


def test_cli_connection_error_one_line_and_debug_traceback(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    cli = [sys.executable, "-m", "ykafka.cli"]
    result = subprocess.run([*cli, "admin", "--url", url, "--token", "t", "clients"], capture_output=True,
                            text=True, timeout=60, env=_env(tmp_path))
    _one_line(result, f"cannot reach the MetaServer at {url}", "Fix: start the stack")
    debug = subprocess.run([*cli, "--debug", "admin", "--url", url, "--token", "t", "clients"], capture_output=True,
                           text=True, timeout=60, env=_env(tmp_path))
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "AdminError" in debug.stderr
