"""Contracts load without the client; confluent_kafka stays behind ykafka.transport; header names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ykafka import headers as H

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", ["ykafka.catalog", "ykafka.events", "ykafka.errors", "ykafka.signing",
                                    "ykafka.acl", "ykafka.headers"])
def test_contract_modules_import_without_the_client(module: str) -> None:
    code = (f"import sys, {module}; bad = [m for m in ('confluent_kafka', 'diskcache', 'ykafka.producer', "
            "'ykafka.dr.engine', 'ykafka.consumer') if m in sys.modules]; print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_lazy_exports_resolve() -> None:
    import ykafka
    from ykafka.producer import Producer

    assert ykafka.Producer is Producer
    assert issubclass(ykafka.AclDenied, ykafka.YKafkaError)
    assert "Consumer" in dir(ykafka)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = ykafka.Nope  # type: ignore[attr-defined]


def test_confluent_kafka_is_imported_by_the_transport_only() -> None:
    users = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ykafka").rglob("*.py")
                   if "confluent_kafka" in p.read_text())
    # transport builds clients; events names the reported version field confluent_kafka_version
    assert users == ["ykafka/events.py", "ykafka/transport.py"]


def test_synced_from_reads_both_spellings() -> None:
    assert H.synced_from([(H.SYNCED_FROM, b"dc-b")]) == "dc-b"
    assert H.synced_from([("ykafka.synced.from", b"dc-b")]) == "dc-b"
    assert H.synced_from([(H.MESSAGE_ID, b"x")]) is None
    assert H.synced_from(None) is None
    names = [v for k, v in vars(H).items() if k.isupper() and isinstance(v, str)]
    assert all(n.startswith("ykafka-") for n in names if n != H.LEGACY_SYNCED_FROM)


def test_pipeline_commands_say_what_to_install_without_pyspark() -> None:
    """An SDK install without the pipeline extra still lists `trace` / `pipeline` / `admin groups`, and running
    one says which extra to install (exit 1), instead of the commands silently missing."""
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from click.testing import CliRunner\nfrom ykafka.cli import main\n"
            "for args in (['pipeline', 'run', '--once'], ['trace', 'k1'], ['admin', 'groups', 'list']):\n"
            "    r = CliRunner().invoke(main, args)\n"
            "    print(r.exit_code, r.output.strip())\n"
            "print(CliRunner().invoke(main, ['--help']).output)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    lines = out.splitlines()
    for line, name in zip(lines[:3], ("pipeline", "trace", "groups list"), strict=True):
        assert line.startswith("1 Error: `" + name + "` needs the pipeline extra"), line
        assert "pip install 'ykafka-server[pipeline]'" in line
    assert "pipeline" in out.split("Commands:")[1] and "trace" in out.split("Commands:")[1]


def test_pipeline_commands_attach_when_installed() -> None:
    pytest.importorskip("pyspark")
    from click.testing import CliRunner

    from ykafka.cli import main

    out = CliRunner().invoke(main, ["pipeline", "--help"])
    assert out.exit_code == 0 and "run" in out.output and "inventory" in out.output
