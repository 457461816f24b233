"""Console users, sessions and login lockout — all in the database so several MetaServer peers agree.

Passwords are argon2id hashes (argon2-cffi). A session is a random cookie value; the table keeps its
sha256 with the user and that session's CSRF token. Five wrong passwords for one user from one source
address lock that pair for ``LOCK_S`` seconds (a right password does not unlock it early).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Connection, Engine, delete, select, update

from ..storage import db
from .models import ROLES, logins, sessions, users

SESSION_TTL_S = 12 * 3600
MAX_FAILURES = 5
LOCK_S = 900
_USERNAME_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
_hasher = PasswordHasher()
# verifying against this when the user is unknown keeps the answer time the same as for a wrong password
_DUMMY_HASH = _hasher.hash(secrets.token_hex(16))

#: the password hash of single sign-on users: not an argon2 hash, so no password ever matches it
SSO_PASSWORD_HASH = "!sso"
#: what each role may do; a role has its own rights and every lower role's
RANK = {role: i for i, role in enumerate(ROLES)}


class UserError(ValueError):
    """A bad username, role or password (the message says which rule)."""


@dataclass(frozen=True)
class Session:
    username: str
    role: str
    csrf: str

    def can(self, role: str) -> bool:
        return RANK[self.role] >= RANK[role]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_new(username: str, password: str, role: str) -> None:
    if not _USERNAME_RE.match(username):
        raise UserError("username: 1-64 letters, digits, '.', '_', '@', '-'")
    if role not in ROLES:
        raise UserError(f"role must be one of {', '.join(ROLES)}")
    if len(password) < 8:
        raise UserError("password: at least 8 characters")


def create(engine: Engine, username: str, password: str, role: str, replace: bool = False) -> bool:
    """Add a user (or, with ``replace``, reset its password and role); False when it existed and not replaced."""
    check_new(username, password, role)
    values = {"username": username, "password_hash": _hasher.hash(password), "role": role, "enabled": True,
              "created_at": time.time()}
    with db.write(engine) as conn:
        if replace:
            db.upsert(conn, users, values, ["username"])
            return True
        return db.insert_ignore(conn, users, values, ["username"])


def set_enabled(engine: Engine, username: str, enabled: bool) -> bool:
    """Enable or disable a user (a disabled user's sessions stop answering at once); False when there is none."""
    with db.write(engine) as conn:
        return conn.execute(update(users).where(users.c.username == username[:64])
                            .values(enabled=enabled)).rowcount > 0


def list_users(engine: Engine) -> list[dict[str, object]]:
    with db.read(engine) as conn:
        rows = conn.execute(select(users.c.username, users.c.role, users.c.enabled, users.c.created_at)
                            .order_by(users.c.username)).mappings()
        return [dict(r) for r in rows]


def locked(engine: Engine, username: str, source: str, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    with db.read(engine) as conn:
        row = conn.execute(select(logins.c.locked_until).where(logins.c.username == username[:64],
                                                               logins.c.source == source[:64])).first()
    return row is not None and row[0] > now


def _record_failure(engine: Engine, username: str, source: str, now: float) -> None:
    with db.write(engine) as conn:
        row = conn.execute(select(logins.c.failures).where(logins.c.username == username,
                                                           logins.c.source == source)).first()
        failures = (row[0] if row else 0) + 1
        locked_until = now + LOCK_S if failures >= MAX_FAILURES else 0.0
        if failures >= MAX_FAILURES:
            failures = 0  # the lock is the penalty; counting starts again after it
        db.upsert(conn, logins, {"username": username, "source": source, "failures": failures,
                                 "locked_until": locked_until, "updated_at": now}, ["username", "source"])


def login(engine: Engine, username: str, password: str, source: str) -> tuple[str, Session] | None:
    """Check a password; returns (cookie value, session) or None. Raises UserError('locked') when locked."""
    now = time.time()
    username, source = username[:64], (source or "?")[:64]
    if locked(engine, username, source, now):
        raise UserError("locked")
    with db.read(engine) as conn:
        row = conn.execute(select(users).where(users.c.username == username)).mappings().first()
    try:
        _hasher.verify(row["password_hash"] if row else _DUMMY_HASH, password)
        ok = row is not None and bool(row["enabled"])
    except (VerificationError, InvalidHashError):
        ok = False
    if not ok or row is None:
        _record_failure(engine, username, source, now)
        return None
    with db.write(engine) as conn:
        conn.execute(delete(logins).where(logins.c.username == username, logins.c.source == source))
        return _open_session(conn, username, row["role"], now)


def _open_session(conn: Connection, username: str, role: str, now: float) -> tuple[str, Session]:
    token = secrets.token_urlsafe(32)
    session = Session(username, role, secrets.token_urlsafe(24))
    conn.execute(delete(sessions).where(sessions.c.expires_at < now))
    conn.execute(sessions.insert().values(id=_digest(token), username=username, csrf=session.csrf,
                                          created_at=now, expires_at=now + SESSION_TTL_S))
    return token, session


def sso_login(engine: Engine, username: str, role: str) -> tuple[str, Session]:
    """A session for a user the identity provider vouched for: created on first login, its role set from the
    provider's claim on every login; an administrator's disabling still holds (UserError('disabled'))."""
    now = time.time()
    with db.write(engine) as conn:
        row = conn.execute(select(users.c.enabled).where(users.c.username == username)).first()
        if row is None:
            conn.execute(users.insert().values(username=username, password_hash=SSO_PASSWORD_HASH, role=role,
                                               enabled=True, created_at=now))
        elif not row.enabled:
            raise UserError("disabled")
        else:
            conn.execute(update(users).where(users.c.username == username).values(role=role))
        return _open_session(conn, username, role, now)


def session(engine: Engine, token: str | None) -> Session | None:
    if not token or len(token) > 128:
        return None
    with db.read(engine) as conn:
        row = conn.execute(
            select(sessions.c.username, sessions.c.csrf, users.c.role, users.c.enabled)
            .join(users, users.c.username == sessions.c.username)
            .where(sessions.c.id == _digest(token), sessions.c.expires_at > time.time())).first()
    if row is None or not row.enabled:
        return None
    return Session(row.username, row.role, row.csrf)


def logout(engine: Engine, token: str) -> None:
    with db.write(engine) as conn:
        conn.execute(update(sessions).where(sessions.c.id == _digest(token)).values(expires_at=0.0))
