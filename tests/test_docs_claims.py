"""What README says about storage is what the servers accept (a claim that outruns the code fails here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _help(module: str) -> str:
    return subprocess.run([sys.executable, "-m", module, "serve", "--help"], capture_output=True, text=True,
                          timeout=60, check=True).stdout


def test_readme_storage_claims_match_what_each_server_accepts() -> None:
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| sqlalchemy"))
    config_service = row.split("config service", 1)[1]
    metaserver = row.split("config service", 1)[0]
    cc_help = _help("metaserver.configcenter").lower()
    # the config service is claimed to store in PostgreSQL only if its serve command takes a PostgreSQL URL
    assert ("postgres" in config_service.lower()) == bool(re.search(r"postgres", cc_help)), (row, cc_help)
    assert "PostgreSQL" in metaserver and "postgresql" in _help("metaserver").lower()
