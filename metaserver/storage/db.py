"""Engine set-up, migrations to head under a cross-process lock, and the few dialect-specific helpers.

SQLite runs in WAL mode with ``BEGIN IMMEDIATE`` for write transactions: a deferred transaction that
reads and then writes can fail at once with "database is locked" when another process committed in
between, while an immediate one waits politely on the busy timeout. PostgreSQL needs neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, MetaData, Table, create_engine, event, inspect, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.sql.dml import Insert

ALEMBIC_INI = Path(__file__).resolve().parent.parent / "alembic.ini"
_PG_MIGRATION_LOCK = 707_020_251


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(url, pool_size=8, max_overflow=16, connect_args={"check_same_thread": False})
        _configure_sqlite(engine)
        return engine
    return create_engine(url, pool_size=8, max_overflow=16, pool_pre_ping=True)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see module docstring)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextlib.contextmanager
def write(engine: Engine) -> Iterator[Connection]:
    """A write transaction (immediate on SQLite), committed on success."""
    with engine.connect() as conn:
        conn = conn.execution_options(immediate=True)
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn


def upsert(conn: Connection, table: Table, values: Mapping[str, Any], keys: Sequence[str],
           update: Mapping[str, Any] | None = None) -> None:
    """INSERT … ON CONFLICT (keys) DO UPDATE (``update`` or every non-key value) — SQLite and PostgreSQL."""
    stmt: Any = (postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table))
    stmt = stmt.values(**values)
    set_ = dict(update) if update is not None else {k: v for k, v in values.items() if k not in keys}
    conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=set_))


def upsert_many(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                columns: Sequence[str]) -> None:
    """:func:`upsert` of many rows in one executemany; ``columns`` are replaced on conflict."""
    stmt: Any = (postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table))
    stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_={c: stmt.excluded[c] for c in columns})
    conn.execute(stmt, list(rows))


def insert_ignore(conn: Connection, table: Table, values: Mapping[str, Any], keys: Sequence[str]) -> bool:
    """INSERT … ON CONFLICT DO NOTHING RETURNING; True when the row was inserted (rowcount is unreliable)."""
    stmt: Insert
    if conn.dialect.name == "postgresql":
        stmt = postgresql.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(keys))
    else:
        stmt = sqlite.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(keys))
    stmt = stmt.returning(*(table.c[k] for k in keys))
    return conn.execute(stmt).first() is not None


@dataclass(frozen=True)
class Schema:
    """One component's migrations: where its revisions live, its version table and its tables."""

    versions: Path
    version_table: str
    metadata: MetaData
    lock_key: int
    #: a table that exists when the schema was made before migrations existed (then it is stamped, not made)
    legacy_table: str | None = None
    legacy_revision: str | None = None


def migrate(engine: Engine, schema: Schema | None = None) -> None:
    """Bring the schema to head; peers starting together take turns (file lock / advisory lock).

    ``schema`` defaults to the MetaServer's; the config service passes its own (same env.py, own versions
    directory and version table), so both components share one migration set-up.
    """
    from .models import metadata

    schema = schema or Schema(ALEMBIC_INI.with_name("migrations") / "versions", "ms_alembic_version", metadata,
                              _PG_MIGRATION_LOCK)
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(ALEMBIC_INI.with_name("migrations")))
    cfg.set_main_option("version_locations", str(schema.versions))
    cfg.set_main_option("version_table", schema.version_table)
    cfg.attributes["metadata"] = schema.metadata
    with _migration_lock(engine, schema.lock_key), engine.connect() as conn:
        cfg.attributes["connection"] = conn
        if schema.legacy_table and schema.legacy_revision:
            tables = inspect(conn).get_table_names()
            if schema.legacy_table in tables and schema.version_table not in tables:
                command.stamp(cfg, schema.legacy_revision)
        command.upgrade(cfg, "head")
        conn.commit()


@contextlib.contextmanager
def _migration_lock(engine: Engine, key: int) -> Iterator[None]:
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                conn.commit()
        return
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    lock_path = f"{os.path.abspath(database)}.migrate.lock"
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
