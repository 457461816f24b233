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
