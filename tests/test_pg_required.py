"""PostgreSQL tests skip locally with a reason and fail under CI's ``YKAFKA_TEST_PG_REQUIRED=1`` (issue #17 §5)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.ms_fixtures import pg_dsn, pg_unavailable, require_pg


def _closed_port_dsn() -> str:
    with socket.socket() as sock:  # a port nothing listens on: the connection is refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"


def test_missing_server_skips_locally_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("YKAFKA_TEST_PG_REQUIRED", raising=False)
    dsn = _closed_port_dsn()
    with pytest.raises(pytest.skip.Exception) as info:
        require_pg(dsn)
    assert "does not answer" in str(info.value) and "YKAFKA_TEST_PG_REQUIRED=1" in str(info.value)


def test_missing_server_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("YKAFKA_TEST_PG_REQUIRED", "1")
    with pytest.raises(pytest.fail.Exception) as info:
        require_pg(_closed_port_dsn())
    assert "must run" in str(info.value)


def test_ci_entry_point_requires_postgres() -> None:
    script = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert 'export YKAFKA_TEST_PG_REQUIRED="${YKAFKA_TEST_PG_REQUIRED:-1}"' in script
    assert script.index("YKAFKA_TEST_PG_REQUIRED") < script.index("make test")


def test_reachable_server_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    if pg_unavailable():
        pytest.skip("no PostgreSQL here; the two tests above cover the missing-server paths")
    monkeypatch.setenv("YKAFKA_TEST_PG_REQUIRED", "1")
    require_pg(pg_dsn())  # no skip, no failure


def test_private_server_starts_on_loopback_and_stops_by_pid() -> None:
    """tests.pg_server: initdb + postgres in a temporary folder on a free port; stop() ends that pid and
    removes the folder."""
    from tests import pg_server

    if pg_server.server_bindir() is None:
        pytest.skip(pg_server.INSTALL_HINT)
    server = pg_server.start()
    try:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="test") as conn:
            listen = conn.execute("SHOW listen_addresses").fetchone()
            assert listen == ("127.0.0.1",)
        assert server.proc.poll() is None and server.folder.is_dir()
    finally:
        server.stop()
    assert server.proc.poll() is not None
    assert not server.folder.exists()
