"""Keeps every secured cluster's SCRAM users and ACL bindings equal to the MetaServer's tables.

Desired: for each live principal of an enabled app (metaserver/domain/credentials.py) its SCRAM user and the
bindings of the app's ACL (metaserver/kafka/acls.py), and the topics they name that must exist before an app
can write them (the shared telemetry topics and each app's own). Actual: ``describe_user_scram_credentials`` and
``describe_acls``. The difference is repaired (missing users and bindings created; every user and binding the
tables do not hold deleted, whoever made it: a hand-made user, ``User:*`` or ``User:ANONYMOUS`` binding is
foreign, and besides the audit it raises an ERR alert ``kafka.foreign_access``), every repair is audited,
and the pass is recorded per cluster (``ms_kafka_reconciles``: when, whether it worked, the bindings in force).
Kept: the MetaServer's own super user and the nodes' (``--kafka-system-users``), and what was issued for
another registry name of the same brokers (its own reconciler's).
A pass runs after every change that affects it (``kick``) and every ``--acl-reconcile-interval`` seconds;
each peer runs its own, and passes are idempotent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import select

from ykafka import events

from ..domain import audit, configkeys, credentials, registry
from ..services import Services
from ..storage import db
from ..storage.models import alerts, apps, kafka_reconciles
from . import acls as kafka_acls
from .acls import Binding
from .admin import SETTLE_S, ClusterAdmin

log = structlog.get_logger("metaserver.kafka.reconciler")

OPERATOR = "reconciler"


@dataclass
class Outcome:
    """What one cluster's pass found and did."""

    cluster: str
    ok: bool = True
    error: str | None = None
    created: list[Binding] = field(default_factory=list)
    deleted: list[Binding] = field(default_factory=list)
    users_created: list[str] = field(default_factory=list)
    users_deleted: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # deleted users and bindings the MetaServer never issued
    in_force: set[Binding] = field(default_factory=set)

    @property
    def repairs(self) -> int:
        return len(self.created) + len(self.deleted) + len(self.users_created) + len(self.users_deleted)


def desired(svc: Services, cluster: str, now: float) -> tuple[dict[str, str], set[Binding], set[str]]:
    """(SCRAM users with passwords, bindings, users never sent yet) the tables want on ``cluster``."""
    with db.read(svc.engine) as conn:
        rows = credentials.by_cluster(conn, cluster, now)
        acls = {row["app_id"]: (row["acl"] or {}) for row in conn.execute(
            select(apps.c.app_id, apps.c.acl).where(apps.c.enabled)).mappings()}
    users: dict[str, str] = {}
    bindings: set[Binding] = set()
    fresh: set[str] = set()
    for row in rows:
        if row["app_id"] not in acls:
            continue
        try:
            users[row["username"]] = svc.box.decrypt(row["password"].encode()).decode()
        except Exception:  # noqa: BLE001 - sealed under another key: leave it out (the app gets a new one)
            continue
        bindings |= kafka_acls.app_bindings(row["username"], row["app_id"], acls[row["app_id"]])
        if row["provisioned_at"] is None:
            fresh.add(row["username"])
    return users, bindings, fresh


def siblings(clusters: dict[str, dict[str, Any]], name: str) -> frozenset[str]:
    """Registry names (``name`` included) whose bootstrap servers name the same brokers as ``name``'s."""
    def servers(spec: dict[str, Any]) -> frozenset[str]:
        return frozenset(s.strip() for s in str(spec.get("bootstrap_servers") or "").split(",") if s.strip())

    mine = servers(clusters[name])
    return frozenset(n for n, spec in clusters.items() if servers(spec) & mine) | {name}


def reconcile_cluster(svc: Services, name: str, spec: dict[str, Any],
                      same_brokers: frozenset[str] = frozenset(), registered: frozenset[str] = frozenset()) -> Outcome:
    """One pass over one secured cluster; never raises (a failure is the outcome's error). ``same_brokers``:
    the registry names sharing its brokers; ``registered``: every registry name (what "issued" means)."""
    out = Outcome(name)
    others = same_brokers - {name}
    kept = svc.settings.kafka_kept_users
    now = time.time()
    try:
        users, want, fresh = desired(svc, name, now)
        admin = ClusterAdmin(spec, svc.settings)
        # the shared telemetry topics and each app's own (made with its bindings: an app may write its own but
        # not create it); an existing cluster gets the per-app ones, and loses the older bindings that let every
        # app write the shared ones, at its first pass (issue 37)
        own = sorted({b.name for b in want if b.resource == "TOPIC" and b.permission == "ALLOW"
                      and events.topic_owner(b.name) is not None})
        made = admin.ensure_topics([*kafka_acls.TELEMETRY_TOPICS, *own])
        if made:
            log.info("telemetry topics created", cluster=name, topics=made)
        have_users = admin.scram_users()
        send = {u: p for u, p in users.items() if u not in have_users or u in fresh}
        admin.upsert_users(send)
        out.users_created = sorted(u for u in send if u not in have_users)
        have = admin.bindings()
        out.created = sorted(want - have)
        out.deleted = sorted(b for b in have - want if kafka_acls.owned(b.principal, name, others))
        admin.create(out.created)
        admin.delete(out.deleted)
        out.users_deleted = sorted(u for u in have_users if u not in users and u not in kept
                                   and kafka_acls.owned(kafka_acls.principal(u), name, others))
        admin.delete_users(out.users_deleted)
        issued = registered | {name}
        out.foreign = sorted({*(u for u in out.users_deleted if kafka_acls.foreign(u, issued)),
                              *(_show(b) for b in out.deleted if kafka_acls.foreign(b.principal, issued))})
        out.in_force = (have | set(out.created)) - set(out.deleted)
        if (out.created or send) and not admin.settle(out.created, send):
            log.warning("brokers not yet answering with the new users and bindings", cluster=name,
                        timeout_s=SETTLE_S)
        with db.write(svc.engine) as conn:
            for user in send:
                credentials.mark_provisioned(conn, user, now)
    except Exception as exc:  # noqa: BLE001 - recorded and retried at the next pass
        out.ok, out.error = False, str(exc)[:500]
        log.warning("reconcile failed", cluster=name, error=out.error)
    _record(svc, out, now)
    return out


def _record(svc: Services, out: Outcome, now: float) -> None:
    values = {"cluster": out.cluster, "at": now, "ok": out.ok, "error": out.error, "repairs": out.repairs,
              "bindings": [b.as_json() for b in sorted(out.in_force)]}
    if not out.ok:
        values.pop("bindings")
    with db.write(svc.engine) as conn:
        if not out.ok and conn.execute(select(kafka_reconciles.c.cluster).where(
                kafka_reconciles.c.cluster == out.cluster)).first() is None:
            values["bindings"] = []
        db.upsert(conn, kafka_reconciles, values, ["cluster"])
        if out.repairs:
            audit.record(conn, OPERATOR, "kafka.reconcile", f"cluster:{out.cluster}",
                         {"missing": [_show(b) for b in out.created], "extra": [_show(b) for b in out.deleted],
                          "users_missing": out.users_created, "users_extra": out.users_deleted,
                          "foreign": out.foreign},
                         {"created": len(out.created) + len(out.users_created),
                          "deleted": len(out.deleted) + len(out.users_deleted)})
            log.info("reconciled", cluster=out.cluster, created=len(out.created), deleted=len(out.deleted),
                     users_created=len(out.users_created), users_deleted=len(out.users_deleted))
        if out.foreign:
            _alert_foreign(conn, out, now)


def _alert_foreign(conn: Any, out: Outcome, now: float) -> None:
    """An ERR alert (``GET /v1/admin/alerts``, the console's alert list) for users and bindings someone made on
    a managed cluster behind the MetaServer's back: one row per cluster, re-fired at each such find."""
    ts = int(now * 1000)
    judged = {"rule": "kafka.foreign_access", "level": "ERR", "status": "firing", "topic": None, "group_id": None,
              "partition": None, "client_id": None, "ts": ts, "reported_by": OPERATOR,
              "reason": f"{len(out.foreign)} user(s) or ACL binding(s) the MetaServer did not issue were on "
                        f"cluster {out.cluster}; deleted",
              "evidence": {"cluster": out.cluster, "deleted": out.foreign}}
    db.upsert(conn, alerts, {"id": f"kafka-foreign-{out.cluster}"[:64], **judged, "first_seen": now,
                             "last_seen": now, "posts": 1}, ["id"],
              update={**judged, "last_seen": now, "posts": alerts.c.posts + 1})
    log.error("foreign users or bindings deleted", cluster=out.cluster, foreign=out.foreign)


def _show(b: Binding) -> str:
    return b.show()


def reconcile(svc: Services, only: Iterable[str] | None = None) -> dict[str, Outcome]:
    """One pass over every secured cluster (or ``only`` those); retired principals are purged first."""
    now = time.time()
    with db.write(svc.engine) as conn:
        credentials.purge_retired(conn, now)
        clusters = registry.all_clusters(conn)
    wanted = set(only) if only is not None else None
    registered = frozenset(clusters)
    return {name: reconcile_cluster(svc, name, spec, siblings(clusters, name), registered)
            for name, spec in clusters.items()
            if credentials.secured(spec) and (wanted is None or name in wanted)}


def retire_cluster(svc: Services, name: str, spec: dict[str, Any]) -> Outcome:
    """Delete every SCRAM user and binding the MetaServer issued for ``name`` (a cluster that left the registry);
    never raises. Audited as ``kafka.retire``; a failure is the outcome's error (the caller retries)."""
    out = Outcome(name)
    now = time.time()
    try:
        admin = ClusterAdmin(spec, svc.settings)
        out.deleted = sorted(b for b in admin.bindings()
                             if kafka_acls.user_cluster(b.principal.removeprefix("User:")) == name)
        admin.delete(out.deleted)
        out.users_deleted = sorted(u for u in admin.scram_users() if kafka_acls.user_cluster(u) == name)
        admin.delete_users(out.users_deleted)
    except Exception as exc:  # noqa: BLE001 - retried at the next pass
        out.ok, out.error = False, str(exc)[:500]
    with db.write(svc.engine) as conn:
        if out.ok:
            audit.record(conn, OPERATOR, "kafka.retire", f"cluster:{name}", None,
                         {"users_deleted": out.users_deleted, "bindings_deleted": [_show(b) for b in out.deleted]})
        else:
            ts = int(now * 1000)
            judged = {"rule": "kafka.retire_pending", "level": "WARN", "status": "firing", "topic": None,
                      "group_id": None, "partition": None, "client_id": None, "ts": ts, "reported_by": OPERATOR,
                      "reason": f"cluster {name} left the registry but its brokers did not answer; its principals "
                                "are deleted as soon as they do (retried every pass)",
                      "evidence": {"cluster": name, "error": out.error}}
            db.upsert(conn, alerts, {"id": f"kafka-retire-{name}"[:64], **judged, "first_seen": now,
                                     "last_seen": now, "posts": 1}, ["id"],
                      update={**judged, "last_seen": now, "posts": alerts.c.posts + 1})
    if out.ok:
        log.info("retired cluster's principals deleted", cluster=name, users=len(out.users_deleted),
                 bindings=len(out.deleted))
    else:
        log.warning("cannot reach a deleted cluster to revoke its principals; retrying", cluster=name,
                    error=out.error)
    return out


def last(svc: Services) -> dict[str, dict[str, Any]]:
    """Each cluster's last recorded pass."""
    with db.read(svc.engine) as conn:
        return {row["cluster"]: dict(row) for row in conn.execute(select(kafka_reconciles)).mappings()}


class Reconciler:
    """The background loop: a pass every ``interval_s`` and soon after every ``kick``."""

    def __init__(self, svc: Services, interval_s: float) -> None:
        self.svc = svc
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._requested = 0  # kicks so far; a pass serves every kick made before it started
        self._retiring: dict[str, dict[str, Any]] = {}  # clusters deleted from the registry, not yet cleaned
        self._retire_lock = threading.Lock()
        self._served = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ykafka-acl-reconciler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def kick(self) -> None:
        """Reconcile soon (after a change to apps, ACLs, principals or the registry)."""
        self._wake.set()

    def retire(self, name: str, spec: dict[str, Any]) -> None:
        """A secured cluster left the registry: delete its principals and bindings at the next pass, and at
        every pass after until its brokers answer (kept in this process's memory: a restart forgets it, and
        the reconciler of any registry name sharing those brokers deletes them as foreign anyway)."""
        with self._retire_lock:
            self._retiring[name] = dict(spec)
        if self._thread is None:
            self._retire_pass()
        self._wake.set()

    def _retire_pass(self) -> None:
        with self._retire_lock:
            pending = dict(self._retiring)
        for name, spec in pending.items():
            if retire_cluster(self.svc, name, spec).ok:
                with self._retire_lock:
                    if self._retiring.get(name) is spec or self._retiring.get(name) == spec:
                        self._retiring.pop(name, None)

    def kick_and_wait(self, timeout_s: float) -> bool:
        """Reconcile now and wait for that pass (a new principal must exist before its grant is used)."""
        if self._thread is None:
            reconcile(self.svc)
            return True
        with self._done:
            self._requested += 1
            target = self._requested
            self._wake.set()
            return self._done.wait_for(lambda: self._served >= target, timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s if self.interval_s > 0 else None)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._done:
                serving = self._requested
            try:
                self._retire_pass()
                reconcile(self.svc)
            except Exception as exc:  # noqa: BLE001 - the database may be briefly unavailable
                log.warning("reconcile pass failed", error=str(exc)[:500])
            try:
                configkeys.sync(self.svc)  # per-app config-center keys: retire, re-scope, retry
            except Exception as exc:  # noqa: BLE001 - the database or the config service may be briefly away
                log.warning("config-center key sync failed", error=str(exc)[:500])
            with self._done:
                self._served = serving
                self._done.notify_all()
