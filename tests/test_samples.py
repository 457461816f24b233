"""Samples run as a user runs them, against the session stack (identity from the environment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import StackInfo

ROOT = Path(__file__).resolve().parent.parent


def _sample_env(stack: StackInfo, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "YKAFKA_APP_ID": stack.app_id, "YKAFKA_APP_SECRET": stack.app_secret,
            "YKAFKA_METASERVER": stack.metaserver, "YKAFKA_ADMIN_TOKEN": stack.admin_token,
            "YKAFKA_CACHE_DIR": str(tmp_path / "cache")}


def test_quickstart_produces_and_consumes_every_message(stack: StackInfo, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "samples" / "quickstart.py"), "--count", "300",
                             "--keys", "6"], capture_output=True, text=True, timeout=180,
                            env=_sample_env(stack, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "300 acknowledged, 0 failed" in result.stdout
    assert "consumed 300 messages back over 6 keys (key-0=50," in result.stdout
    assert result.stdout.strip().endswith("OK")


def test_asyncio_service_produces_and_consumes_every_message_through_live_changes(stack: StackInfo,
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
