"""Running a consumer-group offset reset (:mod:`metaserver.kafka.offsets`) and recording each step in
``ms_offset_resets`` — the console's live panel and ``ykafka admin groups reset --wait`` read it from there.

A group with members is reset only when every member is a live ykafka consumer: ``consumer.paused=true`` and
``consumer.leave=true`` are released at ``group:<name>`` (each consumer stops fetching, commits what it
finished and leaves), the job waits until each consumer reports both and the broker lists no member, resets,
then releases both keys as they were (each consumer rejoins and reads from the new offsets).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from sqlalchemy import select, update

from ykafka.catalog import Scope

from ..domain import audit, clients, configwrites, hotconfig
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..services import Services
from ..storage import db
from ..storage.models import offset_resets
from .offsets import (
    GroupOffsets,
    ResetRefused,
    ResetSpec,
    apply_direct,
    audit_maps,
    foreign_members,
    plan,
)

log = structlog.get_logger("metaserver.kafka.offsets")

#: how long the consumers have to report paused-and-left (and the broker to list no member)
WAIT_S = 60.0
KEYS = ("consumer.paused", "consumer.leave")


def preview(broker: GroupOffsets, svc: Services, group: str, spec: ResetSpec) -> dict[str, Any]:
    """The dry run: the plan, and how the reset would go (direct / coordinated) or why it is refused."""
    rows = plan(broker, group, spec)
    view = broker.describe(group)
    mode, refusal = "direct", None
    consumers = consumers_of(svc, group)
    if view.active:
        foreign = foreign_members(view, consumers)
        if foreign:
            hosts = ", ".join(sorted({h or "not listed" for _, h in foreign}))
            refusal = (f"the group is {view.state} with {view.member_count} member(s), "
                       f"{len(foreign) if view.members else 'its'} not ykafka consumers reporting it (hosts "
                       f"{hosts}): they would commit over the reset; stop them first, or reset the group once it "
                       "is empty")
        mode = "coordinated"
    return {"group": group, "spec": spec.as_dict(), "describe": spec.describe(), "rows": rows,
            "state": view.state, "members": view.member_count, "active": view.active,
            "ykafka_consumers": len(consumers), "mode": mode, "refused": refusal}


def consumers_of(svc: Services, group: str) -> list[dict[str, Any]]:
    """The live ykafka consumers reporting ``group`` (their reports say paused / left in ``extra.consumer``)."""
    with db.read(svc.engine) as conn:
        return [c for c in clients.current(conn, svc.settings.renew_interval, group=group, online=True)
                if c.get("role") == "consumer"]


def start(svc: Services, broker: GroupOffsets, cluster: str, group: str, spec: ResetSpec, operator: str,
          wait_s: float = WAIT_S) -> dict[str, Any]:
    """Start a reset; returns the job (an empty group's is done already). ResetRefused with the reason."""
    pre = preview(broker, svc, group, spec)
    if pre["refused"]:
        raise ResetRefused(pre["refused"])
    job_id = uuid.uuid4().hex
    now = time.time()
    job = {"id": job_id, "group_id": group, "cluster": cluster, "operator": operator, "mode": pre["mode"],
           "state": "running", "spec": spec.as_dict(), "plan": pre["rows"], "steps": [], "error": None,
           "created_at": now, "updated_at": now}
    with db.write(svc.engine) as conn:
        conn.execute(offset_resets.insert().values(**job))
    if pre["mode"] == "direct":
        _run(svc, job_id, lambda step: _direct(svc, broker, cluster, group, spec, operator, step))
    else:
        threading.Thread(target=_run, name=f"ykafka-reset-{group}", daemon=True,
                         args=(svc, job_id, lambda step: _coordinated(svc, broker, cluster, group, spec, operator,
                                                                      step, wait_s))).start()
    return get(svc, job_id) or job


def get(svc: Services, job_id: str) -> dict[str, Any] | None:
    with db.read(svc.engine) as conn:
        row = conn.execute(select(offset_resets).where(offset_resets.c.id == job_id)).mappings().first()
    return dict(row) if row is not None else None


def recent(svc: Services, group: str, limit: int = 10) -> list[dict[str, Any]]:
    with db.read(svc.engine) as conn:
        rows = conn.execute(select(offset_resets).where(offset_resets.c.group_id == group)
                            .order_by(offset_resets.c.created_at.desc()).limit(limit)).mappings()
        return [dict(r) for r in rows]


Step = Callable[[str, str], None]


def _run(svc: Services, job_id: str, body: Callable[[Step], list[dict[str, Any]]]) -> None:
    steps: list[dict[str, Any]] = []

    def step(name: str, detail: str) -> None:
        steps.append({"at": time.time(), "step": name, "detail": detail})
        _update(svc, job_id, steps=list(steps))

    try:
        rows = body(step)
        _update(svc, job_id, state="done", plan=rows)
    except (ResetRefused, ConfigRejected, ApolloError, TimeoutError) as exc:
        step("failed", str(exc))
        _update(svc, job_id, state="failed", error=str(exc))
    except Exception as exc:  # a job thread must not die silently: the panel says what happened
        log.exception("offset reset failed", job=job_id)
        step("failed", f"unexpected error: {type(exc).__name__}")
        _update(svc, job_id, state="failed", error=type(exc).__name__)


def _update(svc: Services, job_id: str, **values: Any) -> None:
    with db.write(svc.engine) as conn:
        conn.execute(update(offset_resets).where(offset_resets.c.id == job_id)
                     .values(updated_at=time.time(), **values))


def _reset(svc: Services, broker: GroupOffsets, cluster: str, group: str, spec: ResetSpec, operator: str,
           step: Step) -> list[dict[str, Any]]:
    rows = plan(broker, group, spec)  # planned again: the consumers' last commits moved "current"
    apply_direct(broker, group, rows)
    before, after = audit_maps(rows)
    with db.write(svc.engine) as conn:
        audit.record(conn, operator, "group.offsets.reset", f"group:{group}@{cluster}", before,
                     {**after, "reset": spec.describe()})
    step("reset", ", ".join(f"{r['topic']}[{r['partition']}] {r['current']} → {r['new']}" for r in rows))
    return rows


def _direct(svc: Services, broker: GroupOffsets, cluster: str, group: str, spec: ResetSpec, operator: str,
            step: Step) -> list[dict[str, Any]]:
    step("check", "the group has no member: reset directly")
    return _reset(svc, broker, cluster, group, spec, operator, step)


def publish(svc: Services, group: str, values: dict[str, str], delete: list[str], operator: str,
            comment: str) -> dict[str, str | None]:
    """Release ``values`` (and remove ``delete``) at ``group:<group>`` through the one config-write path
    (validated, under the namespace's lock, audited); returns what those keys were before (None: not set)."""
    change = hotconfig.validate(f"group:{group}", values, delete, None)
    result = configwrites.push(svc, change, operator, comment)
    before = result.get("before") or {}
    return {k: before.get(k) for k in [*values, *delete]}


def _state_of(c: dict[str, Any]) -> tuple[bool, bool]:
    consumer = (c.get("extra") or {}).get("consumer") or {}
    return bool(consumer.get("paused")), bool(consumer.get("left"))


def _coordinated(svc: Services, broker: GroupOffsets, cluster: str, group: str, spec: ResetSpec, operator: str,
                 step: Step, wait_s: float) -> list[dict[str, Any]]:
    released = hotconfig.current(svc.apollo, Scope.parse(f"group:{group}"))["released"] if svc.apollo else {}
    previous = {k: released.get(k) for k in KEYS}
    publish(svc, group, {k: "true" for k in KEYS}, [], operator, f"offset reset of {group}: pause")
    step("pause", "released consumer.paused=true, consumer.leave=true at group:" + group)
    try:
        deadline = time.monotonic() + wait_s
        last = ""
        while True:
            live = consumers_of(svc, group)
            done = sum(1 for c in live if _state_of(c) == (True, True))
            view = broker.describe(group)
            status = (f"{done} of {len(live)} consumer(s) report paused and left; the group is {view.state} "
                      f"with {view.member_count} member(s)")
            if status != last:
                step("wait", status)
                last = status
            if done == len(live) and not view.active:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every consumer paused and left within {wait_s:.0f} s: {status}")
            time.sleep(0.5)
        return _reset(svc, broker, cluster, group, spec, operator, step)
    finally:
        restore = {k: str(v) for k, v in previous.items() if v is not None}
        publish(svc, group, restore, [k for k, v in previous.items() if v is None], operator,
                f"offset reset of {group}: resume")
        step("resume", "released " + ", ".join(
            f"{k}={previous[k]}" if previous[k] is not None else f"{k} removed" for k in KEYS))
