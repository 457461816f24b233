"""Docs are tests: every shell and Python block of README.md and docs/*.md runs against the stack
`ykafka dev up` starts, as a user would run it from a fresh folder.

A small transcript runner of our own (sybil / pytest-markdown-docs do not start a stack or rewrite the
documented default ports). An untyped fence runs when its first line is a command (``ykafka``, ``python``,
``curl``, ...); else it is a diagram or a listing. The module's stack runs on free ports
(``YKAFKA_DEV_*_PORT``) in a temp folder holding ``.ykafka/`` and links to ``samples/`` and ``configs/``;
the documented default addresses in a block are rewritten to those ports; the block runs with
``.ykafka/dev.env`` sourced and must exit 0. A ```` ```console ```` block's ``$ `` lines are commands and
the lines after them the output shown: each shown line must appear in what the command printed (``…``
matches anything). A block that cannot run here says so on the line before it, visibly in the source:
``<!-- docs-test: skip: REASON -->``; the reason is the skip message. The stack is stopped by its pid
files at the end (``ykafka dev down``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ykafka.devstack import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", ""}
SKIP = re.compile(r"<!--\s*docs-test:\s*skip:\s*(.+?)\s*-->")
DEFAULT_PORTS = {"dc-a": 19092, "dc-b": 29092, "configcenter": 8080, "metaserver": 7070}


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    text: str
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


COMMANDS = ("ykafka ", "python ", "curl ", "make ", "source ", "export ", "bash ")


def _commands(body: list[str]) -> bool:
    first = next((line for line in body if line.strip() and not line.startswith("#")), "")
    return first.startswith(COMMANDS)


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, fence.group(1)
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        marker = SKIP.search(lines[start - 1]) if start else None
        if lang == "" and not _commands(body):
            continue  # an untyped fence that is a diagram or a listing, not commands
        if lang in SHELL | {"console", "python"}:
            out.append(Block(path, start + 1, lang or "bash", "\n".join(body), marker.group(1) if marker else None))
    return out


ALL = [b for path in DOCS for b in blocks(path)]


@dataclass
class DevStack:
    folder: Path
    env: dict[str, str]
    ports: dict[str, int]

    def rewrite(self, text: str) -> str:
        """The documented default addresses, moved to this stack's ports."""
        for name, default in DEFAULT_PORTS.items():
            text = re.sub(rf"(127\.0\.0\.1|localhost):{default}\b", rf"\g<1>:{self.ports[name]}", text)
        return text

    def bash(self, script: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        # 300 s: README's `ykafka pipeline run --once` block (Spark local, every job) took 167 s at load ~20
        prelude = "set -eo pipefail\n[ -f .ykafka/dev.env ] && source .ykafka/dev.env\n"
        return subprocess.run(["bash", "-c", prelude + self.rewrite(script)], cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def up(self) -> None:
        result = self.bash("ykafka dev up")
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def devstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("samples", "configs", "pyproject.toml", "Makefile"):
        (folder / name).symlink_to(ROOT / name)
    ports = {name: free_port() for name in DEFAULT_PORTS}
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("YKAFKA_")}
    env.update({"PATH": f"{venv_bin}:{env.get('PATH', '')}", "YKAFKA_DEV_STARTUP_TIMEOUT": "60",
                "COLUMNS": "120", "PYTHONPATH": str(ROOT)})
    for name, port in ports.items():
        env[f"YKAFKA_DEV_{name.upper().replace('-', '_')}_PORT"] = str(port)
    stack = DevStack(folder, env, ports)
    stack.up()
    try:
        yield stack
    finally:
        status = stack.bash("ykafka dev status --json")
        stack.bash("ykafka dev down")
        if status.returncode == 0:  # anything still alive is ours by pid: stop it
            for pid in json.loads(status.stdout)["running"].values():
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)


def _console(block: Block) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    return steps


def _shown(expected: str, printed: str) -> bool:
    pattern = ".*?".join(re.escape(" ".join(part.split())) for part in expected.split("…"))
    return re.search(pattern, " ".join(printed.split())) is not None


@pytest.mark.slow  # about a minute in all, most of it one Spark pass (README's pipeline block)
@pytest.mark.parametrize("block", ALL, ids=[b.id for b in ALL])
def test_documented_block_runs(block: Block, devstack: DevStack) -> None:
    if block.skip:
        pytest.skip(block.skip)
    devstack.up()  # a block before may have stopped a service (`ykafka dev stop dc-a`) or the stack
    if block.lang == "python":
        result = devstack.bash(f"python - <<'PYTHON_BLOCK'\n{block.text}\nPYTHON_BLOCK")
        assert result.returncode == 0, f"{block.id}\n{result.stdout}\n{result.stderr}"
    elif block.lang == "console":
        for command, shown in _console(block):
            result = devstack.bash(command)
            assert result.returncode == 0, f"{block.id}: {command}\n{result.stdout}\n{result.stderr}"
            for line in shown:
                assert _shown(devstack.rewrite(line), result.stdout + result.stderr), \
                    f"{block.id}: `{command}` did not print {line!r}:\n{result.stdout}{result.stderr}"
    else:
        result = devstack.bash(block.text)
        assert result.returncode == 0, f"{block.id}\n{result.stdout}\n{result.stderr}"


def test_every_skip_gives_a_reason() -> None:
    for block in ALL:
        assert block.skip is None or len(block.skip) >= 10, f"{block.id}: skip without a reason"
