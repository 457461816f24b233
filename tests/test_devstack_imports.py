"""Services `ykafka dev up` starts run from a clean import path: their data folders never shadow a package."""

from __future__ import annotations

import subprocess
from pathlib import Path

import requests

from tests.support import LocalStack
from ykafka.devstack import ephemeral_config, services


def test_no_data_folder_on_a_services_import_path(tmp_path: Path) -> None:
    cfg = ephemeral_config(tmp_path, external_bootstrap="127.0.0.1:1")
    (tmp_path / "pipeline" / "aggregates").mkdir(parents=True)  # the pipeline store's folder, as after a run
    python = [svc for svc in services(cfg) if "-m" in svc.argv]
    assert {svc.name for svc in python} == {"configcenter", "metaserver"}
    for svc in python:
        interpreter = svc.argv[:svc.argv.index("-m")]
        # the MetaServer migrates its database at start (alembic) before it serves: probe after the same step
        probe = subprocess.run([*interpreter, "-c", "import sys; from metaserver.storage import db; "
                                "db.migrate(db.make_engine('sqlite:///probe.db')); import pipeline.aggregates as a; "
                                "print(a.read_aggregates.__module__, repr(sys.path[0]))"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, f"{svc.name}: {probe.stderr}"
        assert probe.stdout.split()[0] == "pipeline.aggregates"
        assert str(tmp_path) not in probe.stdout and "''" not in probe.stdout


def test_dev_metaserver_serves_aggregates_with_the_store_in_its_working_folder(stack: LocalStack) -> None:
    (stack.home / "pipeline" / "aggregates").mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {stack.admin_token}"}
    for path in ("/v1/admin/aggregates?since=15m&topic=orders", "/v1/admin/aggregates/errors?since=15m",
                 "/v1/admin/alerts?since=1h"):
        resp = requests.get(stack.metaserver + path, headers=headers, timeout=30)
        assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text[:300]}"
        assert resp.json() == []
