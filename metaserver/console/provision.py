"""Topic and consumer-group requests (the ZMS way): an app owner asks for a topic (partitions, retention,
expected rate) or a group; an admin approves it onto a cluster, and approval does everything a user would
otherwise ask three people for: the topic is created on that cluster (confluent-kafka's AdminClient, through
``ykafka.admin.topics``), the app's ACL is granted (produce + consume for a topic, the group for a group)
and, for a topic, the route is set (hot config ``route.cluster`` at ``topic:<name>``), so users only ever
name topics. Approval is idempotent: a step that fails leaves the request pending and approving again
redoes only what is missing.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, func, select, update

from ykafka import acl as acl_rules
from ykafka.admin.topics import TopicAdminError, create_topic

from ..domain import audit, configwrites, hotconfig, registry
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..routes import admin as routes_admin
from ..services import Services
from ..storage import db
from ..storage.models import apps
from ..storage.models import client_state as cs
from . import queries
from .brokers import connection
from .models import requests as reqs

KINDS = ("topic", "group")
MAX_PARTITIONS = 1000
MAX_RETENTION_H = 24 * 366


class RequestError(ValueError):
    """A request that cannot be made or decided; the message says why (never echoing the input)."""


def _number(text: str, field: str, low: float, high: float, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise RequestError(f"{field}: a {'whole ' if integer else ''}number from {low:g} to {high:g}") from None
    if not low <= value <= high:
        raise RequestError(f"{field}: a {'whole ' if integer else ''}number from {low:g} to {high:g}")
    return value


def submit(engine: Any, who: str, app_id: str, form: dict[str, str]) -> int:
    """Store a pending request from the app page's form; returns its id."""
    kind, name = form.get("kind", ""), form.get("name", "").strip()
    if kind not in KINDS:
        raise RequestError("kind: topic or group")
    if (problem := acl_rules.name_problem(name)) is not None:
        raise RequestError(f"{kind} name: {problem}")
    row: dict[str, Any] = {"kind": kind, "app_id": app_id, "name": name, "note": form.get("note", "").strip()[:500],
                           "status": "pending", "requested_by": who[:64], "created_at": time.time()}
    if kind == "topic":
        row["partitions"] = int(_number(form.get("partitions", ""), "partitions", 1, MAX_PARTITIONS, integer=True))
        hours = _number(form.get("retention_h", ""), "retention (hours)", 0.01, MAX_RETENTION_H)
        row["retention_ms"] = int(hours * 3_600_000)
        row["expected_rate"] = _number(form.get("rate", "0") or "0", "expected messages per second", 0, 1e9)
    with db.write(engine) as conn:
        if conn.execute(select(apps.c.app_id).where(apps.c.app_id == app_id)).first() is None:
            raise RequestError("no such app")
        if conn.execute(select(reqs.c.id).where(reqs.c.kind == kind, reqs.c.name == name,
                                                reqs.c.status.in_(["pending", "approved"]))).first() is not None:
            raise RequestError(f"that {kind} is already requested or approved")
        key = conn.execute(reqs.insert().values(**row)).inserted_primary_key
        new_id = int(key[0]) if key else 0
        audit.record(conn, who, f"request.{kind}", f"app:{app_id}", None, {**row, "id": new_id})
    return new_id


def listing(conn: Connection, app_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
    """Requests, pending first, newest first."""
    stmt = select(reqs).order_by((reqs.c.status != "pending"), reqs.c.id.desc()).limit(limit)
    if app_id:
        stmt = stmt.where(reqs.c.app_id == app_id)
    return [dict(r) for r in conn.execute(stmt).mappings()]


def live_per_cluster(conn: Connection, heartbeat_s: int) -> list[tuple[str | None, int]]:
    """(cluster, live clients): a count over every live client (80 ms of PostgreSQL at 100,000 clients, on every
    view of the topics page before it was reused: :func:`cluster_loads`)."""
    return [(c, int(n)) for c, n in conn.execute(select(cs.c.cluster, func.count()).where(
        queries.live(heartbeat_s)).group_by(cs.c.cluster))]


def cluster_loads(conn: Connection, heartbeat_s: int) -> list[dict[str, Any]]:
    """Every active registered cluster with its load — live clients in the reports, approved topics and
    their expected rate — least loaded first (the page's suggestion). The clients per cluster are a summary
    over every live client, reused as the overview's counts are (``queries.reuse_when_slow``): the topics page
    shows this to an admin on every view."""
    clusters = [c for c in registry.all_clusters(conn).values() if c.get("status", "active") == "active"]
    try:
        counts: list[tuple[str | None, int]] | None = queries.reuse_when_slow(
            conn, ("cluster_loads", heartbeat_s), queries.OVERVIEW_TTL_S,
            lambda c: live_per_cluster(c, heartbeat_s), queries.many)
    except queries.Counting:  # just started: a large fleet's first count is under way (clients shown as "?")
        counts = None
    live = dict(counts or [])
    placed = {c: (int(n), float(r or 0)) for c, n, r in conn.execute(
        select(reqs.c.cluster, func.count(), func.sum(reqs.c.expected_rate)).where(
            reqs.c.status == "approved", reqs.c.kind == "topic").group_by(reqs.c.cluster)).all()}
    rows = [{"name": c["name"], "dc": c.get("dc") or "",
             "clients": int(live.get(c["name"], 0)) if counts is not None else None,
             "topics": placed.get(c["name"], (0, 0.0))[0], "rate": placed.get(c["name"], (0, 0.0))[1]}
            for c in clusters]
    return sorted(rows, key=lambda r: (r["rate"], r["clients"] or 0, r["topics"], r["name"]))


def _pending(conn: Connection, req_id: int) -> dict[str, Any]:
    row = conn.execute(select(reqs).where(reqs.c.id == req_id)).mappings().first()
    if row is None:
        raise RequestError("no such request")
    if row["status"] != "pending":
        raise RequestError(f"request already {row['status']}")
    return dict(row)


def _grant(conn: Connection, who: str, req: dict[str, Any]) -> bool:
    """Add the exact name to the app's ACL where no pattern allows it yet; whether anything changed."""
    row = conn.execute(select(apps.c.acl).where(apps.c.app_id == req["app_id"])).first()
    if row is None:
        raise RequestError("the requesting app no longer exists")
    acl: dict[str, list[str]] = {o: list((row[0] or {}).get(o) or []) for o in acl_rules.OPERATIONS}
    ops = ("produce", "consume") if req["kind"] == "topic" else ("group",)
    missing = [op for op in ops if not acl_rules.allowed(acl[op], req["name"])]
    for op in missing:
        acl[op] = sorted({*acl[op], req["name"]})
    if missing:
        routes_admin.replace_acl(conn, who, req["app_id"], acl)
    return bool(missing)


def _create(svc: Services, cluster: str, req: dict[str, Any]) -> bool:
    """Create the requested topic on ``cluster`` (False when it is there already)."""
    _, props = connection(svc, cluster)
    config = {"retention.ms": str(req["retention_ms"])} if req["retention_ms"] else None
    try:
        return create_topic(props, req["name"], int(req["partitions"] or 1), config)
    except TopicAdminError as exc:
        raise RequestError(str(exc)) from None


def approve(svc: Services, req_id: int, cluster: str, who: str) -> dict[str, Any]:
    """Create the topic on ``cluster``, grant the ACL, set the route; then mark the request approved."""
    with db.read(svc.engine) as conn:
        req = _pending(conn, req_id)
        if cluster not in {c["name"] for c in cluster_loads(conn, svc.settings.renew_interval)}:
            raise RequestError("cluster: pick an active registered cluster")
    done: dict[str, Any] = {"cluster": cluster}
    if req["kind"] == "topic":
        done["created"] = _create(svc, cluster, req)
    with db.write(svc.engine) as conn:
        done["acl_granted"] = _grant(conn, who, req)
    if req["kind"] == "topic":
        try:
            done["route_release"] = set_route(svc, req["name"], cluster, who, f"request {req_id} approved")
        except RequestError as exc:
            raise RequestError(f"topic created and ACL granted, but the route was not set: {exc}") from None
    with db.write(svc.engine) as conn:
        conn.execute(update(reqs).where(reqs.c.id == req_id).values(
            status="approved", cluster=cluster, decided_by=who[:64], decided_at=time.time()))
        audit.record(conn, who, "request.approve", f"{req['kind']}:{req['name']}", {"id": req_id}, done)
    routes_admin.issue_principals(svc, req["app_id"], also=[cluster])  # its principal and bindings there
    return done


def set_route(svc: Services, topic: str, cluster: str, who: str, comment: str) -> Any:
    """Point ``topic`` at ``cluster`` (hot config ``route.cluster`` at ``topic:<topic>``, validated and released
    like any change: running clients switch live); the release, or None when it pointed there already."""
    if svc.apollo is None:
        raise RequestError("no config center configured: the route cannot be set")
    try:
        plan = hotconfig.validate(f"topic:{topic}", {"route.cluster": cluster}, [], None)
        if configwrites.preview(svc, plan, guard=False).get("route.cluster") == cluster:
            return None
        return configwrites.push(svc, plan, who, comment, guard=False).get("release")
    except ConfigRejected as exc:
        raise RequestError("; ".join(exc.errors.values())) from None
    except ApolloError as exc:
        raise RequestError(str(exc)) from None


def move_topic(svc: Services, topic: str, cluster: str, who: str) -> Any:
    """Move a topic's clients to another active cluster: a topic approved through a request is created there
    first (its partitions and retention), then the route is switched (running clients follow live); audited."""
    if (problem := acl_rules.name_problem(topic)) is not None:
        raise RequestError(f"topic: {problem}")
    with db.read(svc.engine) as conn:
        if cluster not in {c["name"] for c in cluster_loads(conn, svc.settings.renew_interval)}:
            raise RequestError("cluster: pick an active registered cluster")
        approved = conn.execute(select(reqs).where(reqs.c.kind == "topic", reqs.c.name == topic,
                                                   reqs.c.status == "approved")).mappings().first()
    created = None
    if approved is not None:
        created = _create(svc, cluster, dict(approved))
    release = set_route(svc, topic, cluster, who, f"moved to {cluster}")
    with db.write(svc.engine) as conn:
        if approved is not None:
            conn.execute(update(reqs).where(reqs.c.id == approved["id"]).values(cluster=cluster))
        audit.record(conn, who, "topic.move", f"topic:{topic}", {"cluster": approved["cluster"] if approved else None},
                     {"cluster": cluster, "created": created, "release": release})
    return release


def reject(engine: Any, req_id: int, who: str, reason: str) -> None:
    with db.write(engine) as conn:
        req = _pending(conn, req_id)
        conn.execute(update(reqs).where(reqs.c.id == req_id).values(
            status="rejected", decided_by=who[:64], decided_at=time.time(), reason=reason[:1000]))
        audit.record(conn, who, "request.reject", f"{req['kind']}:{req['name']}", {"id": req_id},
                     {"reason": reason[:1000]})
