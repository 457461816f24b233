"""Config writes: the one path by which the admin API and the console change hot config.

A push is all-or-nothing per namespace. It runs under the namespace's lock, a row of ``ms_config_locks`` that every
MetaServer on the database sees, so two pushes to one namespace never interleave their items; it diffs against
what is in force under that lock (the audit's "before" is what the release replaced); and
:func:`hotconfig.apply` puts the items back when the release fails, so nothing unreleased is left for the next
push to publish. Every attempt is audited with its outcome: ``config.set`` / ``config.gray`` (or the caller's
action) when released, the same action with ``.failed`` and the error when not.

Everything here blocks on the network and the database: async handlers call it through ``run_in_threadpool``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from sqlalchemy import Engine, delete

from ykafka.catalog import Scope

from ..rollouts import guardcheck
from ..services import Services
from ..storage import db
from ..storage.models import config_locks
from . import audit, hotconfig
from .apollo import ApolloError, ApolloOpenApi
from .hotconfig import ConfigRejected, PushFailed, PushPlan

log = structlog.get_logger("metaserver.domain.configwrites")

#: how long a push waits for another push to the same namespace before answering "busy"
LOCK_WAIT_S = 30.0
#: a lock older than this was left by a MetaServer that died mid-push: the next push takes it over
LOCK_LEASE_S = 300.0

SCOPE_ACTIONS = {"rollback": "config.rollback", "promote": "config.gray_merge", "abandon": "config.gray_abandon"}


class ConfigBusy(ConfigRejected):
    """Another push to the namespace held its lock for the whole wait (409)."""

    def __init__(self, namespace: str) -> None:
        super().__init__({"namespace": f"another change to {namespace} is being published; try again"},
                         "config namespace busy")


def config_api(svc: Services) -> ApolloOpenApi:
    if svc.apollo is None:
        raise ConfigRejected({"config center": "no config center configured (--configcenter-url)"},
                             "no config center")
    return svc.apollo


@contextlib.contextmanager
def namespace_lock(engine: Engine, namespace: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold ``namespace``'s lock across MetaServer instances (a row inserted if absent: SQLite and PostgreSQL
    alike, no transaction held open over the config center's calls)."""
    holder = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    pause = 0.02
    while True:
        with db.write(engine) as conn:
            now = time.time()
            conn.execute(delete(config_locks).where(config_locks.c.namespace == namespace,
                                                    config_locks.c.expires_at < now))
            if db.insert_ignore(conn, config_locks, {"namespace": namespace, "holder": holder,
                                                     "expires_at": now + LOCK_LEASE_S}, ["namespace"]):
                break
        if time.monotonic() >= deadline:
            raise ConfigBusy(namespace)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    try:
        yield
    finally:
        with db.write(engine) as conn:
            conn.execute(delete(config_locks).where(config_locks.c.namespace == namespace,
                                                    config_locks.c.holder == holder))


def preview(svc: Services, plan: PushPlan, guard: bool = True) -> dict[str, str]:
    """Fill ``plan.changes`` against what is in force and check the guard rules; the 'before' values."""
    before = hotconfig.plan_changes(config_api(svc), plan)
    if guard:
        guardcheck.enforce(svc, plan, before)
    return before


def push(svc: Services, plan: PushPlan, who: str, comment: str, *, guard: bool = True, action: str | None = None,
         extra: dict[str, Any] | None = None, target: Callable[[PushPlan], Any] | None = None) -> dict[str, Any]:
    """Publish ``plan`` all-or-nothing under the namespace's lock and audit the attempt; ``before`` (the values
    the changed keys had), ``release`` and ``gray``. ``action`` / ``extra``: the audit row's action and more
    fields of its 'after' (a failover records where the writes go); ``target`` points the plan at its clients
    once it is diffed (rollout targets), its answer is the result's ``reach``."""
    api = config_api(svc)
    with namespace_lock(svc.engine, plan.namespace):
        before = preview(svc, plan, guard)
        reach = {"reach": target(plan)} if target is not None else {}
        action = action or ("config.gray" if plan.gray else "config.set")
        changed = {c["key"]: c["after"] for c in plan.changes}
        after: dict[str, Any] = {"values": changed, "ips": plan.ips, "labels": plan.labels, **(extra or {})}
        try:
            result = hotconfig.apply(api, plan, who, comment)
        except Exception as exc:
            restored = exc.restored if isinstance(exc, PushFailed) else None
            _audit(svc, who, f"{action}.failed", plan.namespace, {k: before.get(k) for k in changed},
                   {**after, "error": _reason(exc), "restored": restored})
            log.error("config.push_failed", namespace=plan.namespace, operator=who, error=_reason(exc),
                      restored=restored)
            raise
        after["release"] = result.get("release")
        if result.get("discarded"):
            after["discarded"] = result["discarded"]
        _audit(svc, who, action, plan.namespace, {k: before.get(k) for k in changed}, after)
    return {**result, **reach, "before": before}


def scope_action(svc: Services, scope: Scope, action: str, who: str) -> dict[str, Any]:
    """Roll back the namespace's latest release, promote its gray release or abandon it, under its lock, audited
    with what was released (main line and gray) before and after; ``result``, ``before``, ``after``."""
    api = config_api(svc)
    namespace = scope.namespace()
    with namespace_lock(svc.engine, namespace):
        before = hotconfig.current(api, scope)
        shown = {"released": before["released"], "gray": before["gray"]}
        try:
            if action == "rollback":
                result = hotconfig.rollback(api, scope)
            elif action == "promote":
                result = hotconfig.merge_gray(api, scope, who)
            else:
                result = hotconfig.abandon_gray(api, scope)
        except ApolloError as exc:
            _audit(svc, who, f"{SCOPE_ACTIONS[action]}.failed", namespace, shown, {"error": _reason(exc)})
            raise
        after = hotconfig.current(api, scope)
        _audit(svc, who, SCOPE_ACTIONS[action], namespace, shown,
               {"released": after["released"], "gray": after["gray"]})
    return {"result": result, "before": before, "after": after}


def _audit(svc: Services, who: str, action: str, namespace: str, before: Any, after: Any) -> None:
    with db.write(svc.engine) as conn:
        audit.record(conn, who, action, namespace, before, after)


def _reason(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:300]
