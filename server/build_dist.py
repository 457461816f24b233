"""Build both distributions of this repository into one folder: ``ykafka`` (the client) and ``ykafka-server``.

    python server/build_dist.py [--out dist] [--wheel-only] [--no-isolation]

The client builds from the repository root. The server's code stays at the top of the repository
(``metaserver/``, ``pipeline/``) while a build backend only packs files under its project folder, so the
server is built in a staging folder holding ``server/pyproject.toml``, ``server/README.md``, the two
packages and ``configs/alerts.yaml`` as ``pipeline/alerts.yaml`` (docs/architecture.md, "Distributions").
The sdist is that folder, so it builds the same wheel again. ``make dist`` runs this, then
``check-wheel-contents`` and ``twine check``; tests/test_distribution.py runs it with ``--wheel-only
--no-isolation`` (no download, a few seconds).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "server"
# what the server's project folder holds, from where in the repository
STAGED = {"metaserver": "metaserver", "pipeline": "pipeline",
          "pipeline/alerts.yaml": "configs/alerts.yaml"}  # the default alert rules (pipeline/alerts.py DEFAULT_RULES)


def client_version() -> str:
    """``ykafka.__version__``, read from the source (the one place the version is written)."""
    found = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "ykafka" / "__init__.py").read_text(), re.M)
    if not found:
        raise SystemExit("ykafka/__init__.py has no __version__ line")
    return found.group(1)


def check_versions() -> str:
    """The server must be released with the client it pins: the same version, ``ykafka[...]==`` it."""
    version = client_version()
    project = tomllib.loads((SERVER / "pyproject.toml").read_text())["project"]
    pins = [d for d in project["dependencies"] if d.startswith("ykafka[") or d.startswith("ykafka=")]
    if project["version"] != version or not pins or any(not d.endswith(f"=={version}") for d in pins):
        raise SystemExit(f"server/pyproject.toml: version {project['version']} and its ykafka pin {pins} must both "
                         f"be ykafka's {version} (ykafka/__init__.py)")
    return version


def stage(into: Path) -> Path:
    """The server's project folder: its pyproject and README, the packages and the default alert rules."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(SERVER / name, into / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for staged, source in STAGED.items():
        src, dst = ROOT / source, into / staged
        if src.is_dir():
            shutil.copytree(src, dst, ignore=ignore)
        else:
            shutil.copy2(src, dst)
    return into


def build(project: Path, out: Path, wheel_only: bool, isolation: bool) -> None:
    cmd = [sys.executable, "-m", "build", "--outdir", str(out)]
    cmd += ["--wheel"] if wheel_only else []  # else: the sdist, then the wheel built from that sdist
    cmd += [] if isolation else ["--no-isolation"]
    subprocess.run([*cmd, str(project)], check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--wheel-only", action="store_true", help="wheels only, no sdists")
    parser.add_argument("--no-isolation", action="store_true", help="build with this interpreter's hatchling")
    args = parser.parse_args(argv)
    version = check_versions()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    build(ROOT, out, args.wheel_only, not args.no_isolation)
    with tempfile.TemporaryDirectory(prefix="ykafka-server-") as tmp:
        build(stage(Path(tmp) / "ykafka-server"), out, args.wheel_only, not args.no_isolation)
    for path in sorted(out.glob(f"*-{version}*")):
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
