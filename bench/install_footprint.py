"""Install footprint of the client distribution: what ``pip install ykafka`` brings into a fresh virtualenv,
and what ``import ykafka`` costs next to ``import confluent_kafka`` in that same virtualenv.

Builds the ``ykafka`` wheel from this checkout (server/build_dist.py, no download), installs it (not editable)
into a new virtualenv with only its declared dependencies, then measures:

* ``packages``: distributions installed (ykafka included; the virtualenv has no pip of its own), ``mb`` their
  size on disk; ``toplevel``: the import names ykafka's wheel installs (only ``ykafka``);
* ``servers_present``: which of fastapi, sqlalchemy, pyspark, uvicorn, alembic are importable (none);
* import times, each in a fresh interpreter, alternating, median of ``--rounds``: ``import confluent_kafka``,
  ``import ykafka`` (what the issue's target is about: ``ratio``) and ``from ykafka import Producer, Consumer``
  (``client_ratio``: the whole client, beside ``from confluent_kafka import Producer, Consumer``).

    python bench/install_footprint.py [--rounds 9] [--quick]

Last line: RESULT {"packages": ..., "mb": ..., "ratio": ..., "targets_met": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.build_dist import build_wheels, fresh_venv  # noqa: E402

TARGETS = {"packages": 12, "mb": 60.0, "ratio": 1.5}
SERVER_MODULES = ("fastapi", "sqlalchemy", "pyspark", "uvicorn", "alembic")
IMPORTS = {
    "confluent_kafka": "import confluent_kafka",
    "ykafka": "import ykafka",
    "confluent_client": "from confluent_kafka import Producer, Consumer",
    "ykafka_client": "from ykafka import Producer, Consumer",
}
# one import in a fresh interpreter (-I: isolated, so never the checkout's ykafka from the working folder):
# its wall time (ms) and how many modules it loaded
PROBE = ("import sys, time; n = len(sys.modules); t = time.perf_counter(); {stmt}; "
         "print((time.perf_counter() - t) * 1000, len(sys.modules) - n)")
# what the installed venv holds: distributions, the import names ykafka's wheel put there, server modules found
INVENTORY = """
import importlib.metadata as md, importlib.util, json, sys
dists = sorted(d.metadata["Name"] for d in md.distributions())
files = md.distribution("ykafka").files or []
top = sorted({f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."})
found = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
print(json.dumps({"dists": dists, "toplevel": top, "servers_present": found}))
"""


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def import_times(python: Path, rounds: int) -> dict[str, tuple[float, int]]:
    """Median ms and modules loaded per statement, each sample a fresh interpreter, statements alternating."""
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in IMPORTS}
    for _ in range(rounds + 1):  # the first round only warms the page cache and writes any missing .pyc
        for name, stmt in IMPORTS.items():
            out = subprocess.run([str(python), "-I", "-c", PROBE.format(stmt=stmt)], capture_output=True,
                                 text=True, check=True).stdout.split()
            samples[name].append((float(out[0]), int(out[1])))
    return {name: (statistics.median(ms for ms, _ in got[1:]), got[-1][1]) for name, got in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="ykafka-footprint-") as tmp:
        wheel = build_wheels(Path(tmp) / "wheels")["ykafka"]
        python = fresh_venv(Path(tmp) / "venv", str(wheel))
        inventory = json.loads(subprocess.run([str(python), "-I", "-c", INVENTORY, *SERVER_MODULES],
                                              capture_output=True, text=True, check=True).stdout)
        site = next((Path(tmp) / "venv" / "lib").glob("python*/site-packages"))
        mb = size_mb(site)
        times = import_times(python, rounds)
    result = {
        "packages": len(inventory["dists"]), "mb": round(mb, 1), "toplevel": inventory["toplevel"],
        "servers_present": inventory["servers_present"], "rounds": rounds,
        **{f"import_{name}_ms": round(ms, 1) for name, (ms, _) in times.items()},
        **{f"import_{name}_modules": modules for name, (_, modules) in times.items()},
        "ratio": round(times["ykafka"][0] / times["confluent_kafka"][0], 2),
        "client_ratio": round(times["ykafka_client"][0] / times["confluent_client"][0], 2),
        "distributions": inventory["dists"],
    }
    result["targets_met"] = (result["packages"] <= TARGETS["packages"] and mb <= TARGETS["mb"]
                             and result["ratio"] <= TARGETS["ratio"] and result["toplevel"] == ["ykafka"]
                             and not result["servers_present"])
    print(f"{result['packages']} packages, {result['mb']} MB: {', '.join(inventory['dists'])}")
    print(f"import confluent_kafka {result['import_confluent_kafka_ms']} ms, import ykafka "
          f"{result['import_ykafka_ms']} ms (ratio {result['ratio']}, target <= {TARGETS['ratio']}); "
          f"Producer + Consumer: confluent {result['import_confluent_client_ms']} ms, ykafka "
          f"{result['import_ykafka_client_ms']} ms ({result['import_ykafka_client_modules']} modules)")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
