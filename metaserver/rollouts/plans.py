"""Rollout plans: a hot-config change released in steps (e.g. 5 % → 25 % → 100 %), each baked for a while and
judged on the canary clients' reports against the untouched clients of the same scope (``judge``); within the
thresholds the next step goes out, outside them the canary is rolled back. Every decision is recorded with
its evidence in the plan, the audit log and on the hot-config page. The plan's state is a database row; the
MetaServer holding the drivers' lease moves it (``driver``), so a restarted or killed MetaServer's plan is
carried on by another.

A step below 100 % is a gray release to the instances its stable percentage selects (``targets``); the 100 %
step merges the gray branch into the main release. A rollback or an abort drops the branch: the canary
clients fall back to the main release, which the others never left.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Connection, select

from ykafka.catalog import Scope

from ..domain import audit, configwrites, hotconfig
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..services import Services
from ..storage import db
from . import judge, targeting
from . import targets as tg
from .models import rollout_plans as rp

log = structlog.get_logger("metaserver.rollouts")

ACTIVE = ("running", "paused")


class PlanSpec(BaseModel):
    """What an operator asks for: the change, the scope's clients it may reach, the steps and their bakes."""

    model_config = ConfigDict(extra="forbid")

    scope: str
    set: dict[str, str | int | float | bool | list[int]] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)
    targets: tg.Targets | None = Field(default=None, description="narrows the clients every step draws from")
    steps: list[float] = Field(default=[5, 25, 100], min_length=1, max_length=20)
    bake_s: float | list[float] = Field(default=300.0, description="bake per step (one value for all)")
    thresholds: judge.Thresholds = Field(default_factory=judge.Thresholds)
    apply_timeout_s: float = Field(default=60.0, ge=0, le=3600,
                                   description="after its bake, how long a step waits for canaries still to "
                                               "report the release applied before it fails")
    comment: str = Field(default="", max_length=200)

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: list[float]) -> list[float]:
        if any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)) or steps[-1] != 100:
            raise ValueError("percentages rising strictly, each in (0, 100], the last 100")
        return steps

    @field_validator("bake_s")
    @classmethod
    def _bake(cls, bake: float | list[float]) -> float | list[float]:
        values = bake if isinstance(bake, list) else [bake]
        if any(not 0 <= b <= 86_400 for b in values):
            raise ValueError("each bake between 0 and 86400 seconds")
        return bake

    def bake(self, step: int) -> float:
        return float(self.bake_s[min(step, len(self.bake_s) - 1)] if isinstance(self.bake_s, list) else self.bake_s)


class PlanAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["pause", "resume", "abort", "force"]


def _push_plan(spec: PlanSpec) -> hotconfig.PushPlan:
    return hotconfig.validate(spec.scope, dict(spec.set), list(spec.delete), None, None)


def create(svc: Services, spec: PlanSpec, who: str) -> dict[str, Any]:
    """Validate the change as a push would (catalog, registry, guard rules), then store the plan (running;
    the driver publishes its first step). One active plan per namespace."""
    plan = _push_plan(spec)
    api = _require_api(svc)
    before = configwrites.preview(svc, plan)  # the catalog's diff and the guard rules, as a push
    if api.find_branch(plan.namespace):
        raise ConfigRejected({"scope": f"{plan.namespace} has a gray release already; merge or abandon it first"},
                             "gray release in the way")
    now = time.time()
    with db.write(svc.engine) as conn:
        busy = conn.execute(select(rp.c.id).where(rp.c.namespace == plan.namespace, rp.c.state.in_(ACTIVE))).first()
        if busy is not None:
            raise ConfigRejected({"scope": f"plan {busy[0]} is already rolling out {plan.namespace}"},
                                 "a plan is active")
        spec_json = {**spec.model_dump(mode="json"), "scope": str(plan.scope), "set": plan.set, "delete": plan.delete}
        inserted = conn.execute(rp.insert().values(
            scope=str(plan.scope), namespace=plan.namespace, spec=spec_json, state="running", step=0,
            step_started=None, canary=None, decisions=[], created_by=who[:255], created_at=now, updated_at=now,
        )).inserted_primary_key
        plan_id = int(inserted[0]) if inserted else 0
        audit.record(conn, who, "config.rollout.create", plan.namespace, {k: before.get(k) for k in plan.set},
                     {"plan": plan_id, "values": plan.set, "steps": spec.steps, "bake_s": spec.bake_s})
    return get(svc, plan_id)


def _require_api(svc: Services) -> Any:
    if svc.apollo is None:
        raise ConfigRejected({"config center": "no config center configured"}, "no config center")
    return svc.apollo


def _row(conn: Connection, plan_id: int) -> dict[str, Any] | None:
    row = conn.execute(select(rp).where(rp.c.id == plan_id)).mappings().first()
    return dict(row) if row else None


def get(svc: Services, plan_id: int) -> dict[str, Any]:
    with db.read(svc.engine) as conn:
        row = _row(conn, plan_id)
    if row is None:
        raise LookupError(plan_id)
    return public(row)


def public(row: dict[str, Any]) -> dict[str, Any]:
    canary = row.get("canary") or {}
    steps = row["spec"]["steps"]
    return {"id": row["id"], "scope": row["scope"], "namespace": row["namespace"], "state": row["state"],
            "step": row["step"], "percent": steps[min(row["step"], len(steps) - 1)], "steps": steps,
            "step_started": row["step_started"], "canary": sorted(canary.get("ids") or []),
            "spec": row["spec"], "decisions": row["decisions"], "created_by": row["created_by"],
            "created_at": row["created_at"], "updated_at": row["updated_at"]}


def listing(svc: Services, namespace: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    stmt = select(rp).order_by(rp.c.id.desc()).limit(limit)
    if namespace:
        stmt = stmt.where(rp.c.namespace == namespace)
    with db.read(svc.engine) as conn:
        return [public(dict(r)) for r in conn.execute(stmt).mappings()]


def control(svc: Services, plan_id: int, action: str, who: str) -> dict[str, Any]:
    """An operator's pause / resume / abort / force (skip the rest of this bake: judge now), audited."""
    with db.read(svc.engine) as conn:
        row = _row(conn, plan_id)
    if row is None:
        raise LookupError(plan_id)
    state = row["state"]
    if state not in ACTIVE:
        raise ConfigRejected({"plan": f"plan {plan_id} is {state}"}, "plan finished")
    if action == "abort":  # drop the canary's release first (its own write path, not inside this transaction)
        _abandon(svc, row["namespace"], row["scope"], who)
    with db.write(svc.engine) as conn:
        row = _row(conn, plan_id)
        if row is None or row["state"] not in ACTIVE:
            raise ConfigRejected({"plan": f"plan {plan_id} finished meanwhile"}, "plan finished")
        values: dict[str, Any] = {"updated_at": time.time()}
        if action == "pause":
            values["state"] = "paused"
        elif action == "resume":
            values["state"] = "running"
        elif action == "force":
            values["state"] = "running"
            values["step_started"] = -1.0 if row["step_started"] is not None else None  # bake over: judge now
        elif action == "abort":
            values["state"] = "aborted"
        decision = {"at": time.time(), "step": row["step"], "action": action, "reason": f"{action} by {who}",
                    "evidence": None}
        values["decisions"] = [*row["decisions"], decision]
        conn.execute(rp.update().where(rp.c.id == plan_id).values(**values))
        audit.record(conn, who, f"config.rollout.{action}", row["namespace"], {"plan": plan_id, "state": state},
                     {"plan": plan_id, "state": values.get("state", state)})
    return get(svc, plan_id)


def _abandon(svc: Services, namespace: str, scope: str, who: str = "rollout-driver") -> None:
    """Drop the canary's gray branch (through the config-write path: under the namespace's lock, audited)."""
    if _require_api(svc).find_branch(namespace):
        configwrites.scope_action(svc, Scope.parse(scope), "abandon", who)


# --- driving one plan (called by the lease holder) -------------------------------------------------------

def _health(conn: Connection, svc: Services, scope: Scope, namespace: str) -> dict[str, dict[str, Any]]:
    """client_id -> (health, held release key, rejections of this namespace) of every live client in scope."""
    from ..storage.models import client_state as cs

    clients = tg.in_scope(conn, svc.settings.renew_interval, scope, namespace)
    ids = [c["client_id"] for c in clients]
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(ids), 500):
        rows = conn.execute(select(cs.c.client_id, cs.c.extra, cs.c.config_release_keys)
                            .where(cs.c.client_id.in_(ids[i:i + 500]))).mappings()
        for row in rows:
            extra = row["extra"] or {}
            out[row["client_id"]] = {
                "health": extra.get("health") or {}, "held": (row["config_release_keys"] or {}).get(namespace) or "",
                "rejected": [e.get("release_key") for e in extra.get("errors") or []
                             if isinstance(e, dict) and e.get("type") == "config_rejected"
                             and e.get("namespace") == namespace]}
    for c in clients:
        out.setdefault(c["client_id"], {"health": {}, "held": "", "rejected": []})["row"] = c
    return out


def drive(svc: Services, plan_id: int) -> None:
    """One tick of a running plan: publish its step, or judge it once baked and advance / roll back."""
    with db.read(svc.engine) as conn:
        row = _row(conn, plan_id)
    if row is None or row["state"] != "running":
        return
    spec = PlanSpec.model_validate({**row["spec"]})
    started = row["step_started"]
    if started is None:
        _publish_step(svc, row, spec)
    elif started < 0 or time.time() - started >= spec.bake(row["step"]):
        _judge_step(svc, row, spec)


def _record(svc: Services, row: dict[str, Any], decision: dict[str, Any], **values: Any) -> None:
    """Store the plan's next state with the decision, unless someone changed the plan meanwhile (pause)."""
    with db.write(svc.engine) as conn:
        now = _row(conn, row["id"])
        if now is None or now["state"] != "running" or now["step"] != row["step"] \
                or now["step_started"] != row["step_started"]:
            return
        conn.execute(rp.update().where(rp.c.id == row["id"]).values(
            decisions=[*now["decisions"], decision], updated_at=time.time(), **values))
        audit.record(conn, "rollout-driver", f"config.rollout.{decision['action']}", row["namespace"],
                     {"plan": row["id"], "step": row["step"]},
                     {"plan": row["id"], "percent": decision.get("percent"), "reason": decision["reason"],
                      "evidence": decision.get("evidence")})
    log.info("rollout.decision", plan=row["id"], action=decision["action"], reason=decision["reason"])


def _publish_step(svc: Services, row: dict[str, Any], spec: PlanSpec) -> None:
    """Publish the step in force through the config-write path (``configwrites.push`` / ``scope_action``: under
    the namespace's push lock, so an operator's push never interleaves with it, and audited)."""
    plan = _push_plan(spec)
    percent = spec.steps[row["step"]]
    api = _require_api(svc)
    now = time.time()
    if percent >= 100:
        if api.find_branch(plan.namespace):
            configwrites.scope_action(svc, plan.scope, "promote", "rollout-driver")
        else:  # a one-step plan: straight to everyone
            configwrites.push(svc, plan, "rollout-driver", f"plan {row['id']}")
        _record(svc, row, {"at": now, "step": row["step"], "percent": percent, "action": "promote",
                           "reason": "released to every client", "evidence": None},
                state="done", step_started=now)
        return
    base = spec.targets.model_dump(exclude_none=True) if spec.targets else {}
    base.pop("percent", None)
    t = tg.Targets(**base, percent=percent)
    kept = frozenset((row["canary"] or {}).get("kept") or [])  # the earlier steps' canaries stay in
    try:  # the guard rules are checked again at each step: they may have changed since the plan started
        reach = configwrites.push(svc, plan, "rollout-driver", f"plan {row['id']} step {row['step'] + 1}: "
                                  f"{percent:g} %", target=lambda p: targeting.resolve(svc, p, t, kept))["reach"]
    except ConfigRejected as exc:
        if any(k.startswith("guard:") for k in exc.errors):  # a rule edited since the plan started refuses it
            try:
                _abandon(svc, row["namespace"], row["scope"])
            except ApolloError as err:
                log.warning("rollout.rollback_failed", plan=row["id"], error=str(err))
                return
            _record(svc, row, {"at": now, "step": row["step"], "percent": percent, "action": "rollback",
                               "reason": "refused by guard rules: " + "; ".join(f"{k}: {v}" for k, v in
                                                                             exc.errors.items()),
                               "evidence": None}, state="rolled_back")
            return
        log.info("rollout.step_waits", plan=row["id"], reason=str(exc.errors))  # nobody to canary on yet
        return
    ids = sorted(tg.ids_of(plan.labels or []))
    with db.read(svc.engine) as conn:
        seen = _health(conn, svc, plan.scope, plan.namespace)
    _record(svc, row, {"at": now, "step": row["step"], "percent": percent, "action": "publish",
                       "reason": f"{percent:g} %: {len(ids)} of {reach['in_scope']} clients in scope",
                       "evidence": {"canary": len(ids), "in_scope": reach["in_scope"], "by": reach["by"]}},
            step_started=now, canary={"ids": ids, "kept": ids,
                                      "base": {cid: v["health"] for cid, v in seen.items()}})


def _judge_step(svc: Services, row: dict[str, Any], spec: PlanSpec) -> None:
    api = _require_api(svc)
    scope = Scope.parse(row["scope"])
    canary = row["canary"] or {}
    ids, base = set(canary.get("ids") or []), canary.get("base") or {}
    branch = api.find_branch(row["namespace"])
    gray_key = ((api.branch_latest_release(row["namespace"], branch) or {}).get("releaseKey")) if branch else None
    with db.read(svc.engine) as conn:
        seen = _health(conn, svc, scope, row["namespace"])
    canary_now = {cid: v["health"] for cid, v in seen.items() if cid in ids}
    control_now = {cid: v["health"] for cid, v in seen.items() if cid not in ids}
    pending = sum(1 for cid in ids if cid in seen and (not gray_key or gray_key not in seen[cid]["held"].split("+")))
    started = float(row["step_started"] or 0)
    if pending and started > 0 and time.time() - started < spec.bake(row["step"]) + spec.apply_timeout_s:
        return  # canaries still applying (a loaded host, a long poll in flight): judge once they report
    rejections = sum(1 for cid in ids if cid in seen and gray_key in seen[cid]["rejected"])
    a, b = judge.side(canary_now, base), judge.side(control_now, base)
    why = judge.verdict(a, b, rejections, pending, spec.thresholds)
    percent = spec.steps[row["step"]]
    evidence = {"canary": a, "control": b, "rejections": rejections, "pending": pending,
                "thresholds": spec.thresholds.model_dump()}
    now = time.time()
    if why:
        try:
            _abandon(svc, row["namespace"], row["scope"])
        except ApolloError as exc:
            log.warning("rollout.rollback_failed", plan=row["id"], error=str(exc))
            return  # tried again next tick
        _record(svc, row, {"at": now, "step": row["step"], "percent": percent, "action": "rollback",
                           "reason": "; ".join(why), "evidence": evidence}, state="rolled_back")
        return
    _record(svc, row, {"at": now, "step": row["step"], "percent": percent, "action": "advance",
                       "reason": f"{percent:g} % within thresholds after {spec.bake(row['step']):g} s",
                       "evidence": evidence}, step=row["step"] + 1, step_started=None)


def running(svc: Services) -> list[int]:
    with db.read(svc.engine) as conn:
        return [int(i) for i in conn.execute(select(rp.c.id).where(rp.c.state == "running").order_by(rp.c.id))
                .scalars()]
