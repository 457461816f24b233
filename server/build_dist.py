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
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "server"
# what the server's project folder holds, from where in the repository
STAGED = {"metaserver": "metaserver", "pipeline": "pipeline",
          "pipeline/alerts.yaml": "configs/alerts.yaml",  # the default alert rules (pipeline/alerts.py DEFAULT_RULES)
          "metaserver/rollouts/guardrules.yaml": "configs/guardrules.yaml"}  # the default guard rules (guards.py)


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
    proc = subprocess.run([*cmd, str(project)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"building {project} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")


def build_wheels(out: Path) -> dict[str, Path]:
    """Both wheels, built with this interpreter's hatchling (no download): {"ykafka": ..., "ykafka-server": ...}."""
    main(["--out", str(out), "--wheel-only", "--no-isolation", "--quiet"])
    version = client_version()
    return {"ykafka": out / f"ykafka-{version}-py3-none-any.whl",
            "ykafka-server": out / f"ykafka_server-{version}-py3-none-any.whl"}


def fresh_venv(path: Path, *requirements: str, reuse: Sequence[str] = ()) -> Path:
    """A new virtualenv at ``path`` holding only ``requirements`` (installed, not editable) and what they
    depend on; no pip of its own (this interpreter's pip installs into it). Returns its python.

    ``reuse`` names distributions of this interpreter's environment (e.g. pyspark, 500 MB) that are linked in
    before the install instead of unpacked again: pip then finds them installed, and still checks that their
    versions meet what the requirements declare."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = next((path / "lib").glob("python3*/site-packages"))
    for name in reuse:
        dist = importlib.metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:  # not its scripts in bin/
            (site / top).symlink_to(Path(str(dist.locate_file(top))))
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                           "--disable-pip-version-check", *requirements], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"installing {requirements} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--wheel-only", action="store_true", help="wheels only, no sdists")
    parser.add_argument("--no-isolation", action="store_true", help="build with this interpreter's hatchling")
    parser.add_argument("--quiet", action="store_true", help="do not list what was built")
    args = parser.parse_args(argv)
    version = check_versions()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    build(ROOT, out, args.wheel_only, not args.no_isolation)
    with tempfile.TemporaryDirectory(prefix="ykafka-server-") as tmp:
        build(stage(Path(tmp) / "ykafka-server"), out, args.wheel_only, not args.no_isolation)
    if not args.quiet:
        sys.stdout.writelines(f"{path}\n" for path in sorted(out.glob(f"*-{version}*")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
