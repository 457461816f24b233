"""Per-app Kafka principals: one SCRAM user per (app, cluster), issued, rotated and revoked by the MetaServer.

Passwords are random, stored sealed (Fernet) under the sealing key kept outside the database
(metaserver/domain/sealing.py: a database copy alone opens none; every peer holds the same key), and handed
only to the app they belong to, only for the clusters its grant reaches. The broker side (SCRAM users and ACL
bindings) is written by the reconciler (metaserver/kafka/reconciler.py) from these rows; this module only
touches the table.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.fernet import InvalidToken
from sqlalchemy import Connection, delete, func, select, update

from ..kafka import acls as kafka_acls
from ..storage.models import kafka_principals
from .sealing import Box


def secured(spec: Mapping[str, Any]) -> bool:
    """Whether a registry entry's brokers authenticate clients (so apps need principals there)."""
    return bool(spec.get("security"))


def ensure(conn: Connection, app_id: str, clusters: Iterable[str], box: Box, now: float | None = None) -> list[str]:
    """Give ``app_id`` a principal on each of ``clusters`` lacking one; the clusters that got one."""
    now = time.time() if now is None else now
    have = set(conn.execute(select(kafka_principals.c.cluster).where(
        kafka_principals.c.app_id == app_id, kafka_principals.c.retire_at.is_(None))).scalars())
    made = []
    for cluster in sorted(set(clusters) - have):
        generation = (conn.execute(select(func.max(kafka_principals.c.generation)).where(
            kafka_principals.c.app_id == app_id, kafka_principals.c.cluster == cluster)).scalar() or 0) + 1
        _insert(conn, app_id, cluster, generation, box, now)
        made.append(cluster)
    return made


def _insert(conn: Connection, app_id: str, cluster: str, generation: int, box: Box, now: float) -> None:
    password = secrets.token_urlsafe(32)
    conn.execute(kafka_principals.insert().values(
        app_id=app_id, cluster=cluster, generation=generation,
        username=kafka_acls.username(app_id, cluster, generation),
        password=box.encrypt(password.encode()).decode(), created_at=now))


def rotate(conn: Connection, app_id: str, box: Box, grace_s: float, now: float | None = None) -> list[str]:
    """New credentials on every cluster where the app has some; the old ones keep working ``grace_s`` more
    (clients pick the new ones up at their next renewal), then the reconciler deletes them."""
    now = time.time() if now is None else now
    current = conn.execute(select(kafka_principals.c.cluster, kafka_principals.c.generation).where(
        kafka_principals.c.app_id == app_id, kafka_principals.c.retire_at.is_(None))).all()
    for cluster, generation in current:
        conn.execute(update(kafka_principals).where(
            kafka_principals.c.app_id == app_id, kafka_principals.c.cluster == cluster,
            kafka_principals.c.generation == generation).values(retire_at=now + grace_s))
        _insert(conn, app_id, cluster, generation + 1, box, now)
    return sorted(cluster for cluster, _ in current)


def revoke(conn: Connection, app_id: str) -> int:
    """Forget every principal of the app (the reconciler then deletes its users and bindings)."""
    return conn.execute(delete(kafka_principals).where(kafka_principals.c.app_id == app_id)).rowcount or 0


def revoke_cluster(conn: Connection, cluster: str) -> int:
    """Forget every principal on a cluster leaving the registry (the reconciler's ``retire`` deletes them)."""
    return conn.execute(delete(kafka_principals).where(kafka_principals.c.cluster == cluster)).rowcount or 0


def for_grant(conn: Connection, app_id: str, box: Box) -> dict[str, tuple[str, str]]:
    """``{cluster: (username, password)}`` of the app's current principals."""
    rows = conn.execute(select(kafka_principals.c.cluster, kafka_principals.c.username,
                               kafka_principals.c.password).where(
        kafka_principals.c.app_id == app_id, kafka_principals.c.retire_at.is_(None)))
    out: dict[str, tuple[str, str]] = {}
    for cluster, user, sealed in rows:
        try:
            out[cluster] = (user, box.decrypt(sealed.encode()).decode())
        except InvalidToken:  # sealed under another token key: the reconciler re-issues it
            continue
    return out


def unprovisioned(conn: Connection, app_id: str, clusters: Iterable[str]) -> list[str]:
    """The clusters among ``clusters`` where the app's current principal has not reached the brokers yet."""
    return sorted(conn.execute(select(kafka_principals.c.cluster).where(
        kafka_principals.c.app_id == app_id, kafka_principals.c.retire_at.is_(None),
        kafka_principals.c.provisioned_at.is_(None), kafka_principals.c.cluster.in_(list(clusters)))).scalars())


def by_cluster(conn: Connection, cluster: str, now: float) -> list[dict[str, Any]]:
    """Every live principal on a cluster (current and not yet retired), with its app."""
    stmt = select(kafka_principals).where(kafka_principals.c.cluster == cluster).where(
        (kafka_principals.c.retire_at.is_(None)) | (kafka_principals.c.retire_at > now))
    return [dict(row) for row in conn.execute(stmt).mappings()]


def of_app(conn: Connection, app_id: str) -> list[dict[str, Any]]:
    """The app's principals (no passwords), for the console and the admin API."""
    rows = conn.execute(select(kafka_principals.c.cluster, kafka_principals.c.generation, kafka_principals.c.username,
                               kafka_principals.c.created_at, kafka_principals.c.provisioned_at,
                               kafka_principals.c.retire_at).where(kafka_principals.c.app_id == app_id)
                        .order_by(kafka_principals.c.cluster, kafka_principals.c.generation)).mappings()
    return [dict(row) for row in rows]


def purge_retired(conn: Connection, now: float) -> int:
    return conn.execute(delete(kafka_principals).where(kafka_principals.c.retire_at <= now)).rowcount or 0


def mark_provisioned(conn: Connection, username: str, now: float) -> None:
    conn.execute(update(kafka_principals).where(kafka_principals.c.username == username).values(provisioned_at=now))
