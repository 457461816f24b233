"""The console's tables: users, database-held sessions and login lockouts (shared by every MetaServer peer).

They hang off the MetaServer's one ``metadata`` so the Alembic environment sees them; migration 0003
creates exactly these.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Float, Index, Integer, String, Table

from ..storage.models import metadata

ROLES = ("viewer", "operator", "admin")

users = Table(
    "ms_console_users", metadata,
    Column("username", String(64), primary_key=True),
    Column("password_hash", String(255), nullable=False),  # argon2id, never the password
    Column("role", String(16), nullable=False),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("created_at", Float, nullable=False),
)

sessions = Table(
    "ms_console_sessions", metadata,
    # sha256 of the cookie value: a database dump does not hand out live sessions
    Column("id", String(64), primary_key=True),
    Column("username", String(64), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_ms_console_sessions_expires_at", "expires_at"),
)

logins = Table(
    "ms_console_logins", metadata,
    # one row per (user, source address): wrong passwords counted, locked until a time
    Column("username", String(64), primary_key=True),
    Column("source", String(64), primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("locked_until", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

requests = Table(
    "ms_console_requests", metadata,
    # a topic or consumer-group request by an app owner, decided by an admin (ZMS style)
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(8), nullable=False),  # topic | group
    Column("app_id", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("partitions", Integer),
    Column("retention_ms", BigInteger),
    Column("expected_rate", Float),  # messages per second the owner expects
    Column("note", String(500), nullable=False, default=""),
    Column("status", String(16), nullable=False),  # pending | approved | rejected
    Column("cluster", String(255)),
    Column("requested_by", String(64), nullable=False),
    Column("decided_by", String(64)),
    Column("reason", String(1000)),
    Column("created_at", Float, nullable=False),
    Column("decided_at", Float),
    Index("ix_ms_console_requests_status", "status"),
)
