"""A consumer group's offset reset in the console: the dry run (each partition's current and new offset and the
lag after, and how the reset would go or why it is refused) for everyone; the reset for operators and admins;
the reset's live panel (its steps and the group's consumers, paused / left) refreshing while it runs."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_patterns
from ykafka.timestamps import parse_ms

from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..kafka import offset_jobs
from ..kafka.offsets import TARGETS, GroupOffsets, ResetRefused, ResetSpec
from .brokers import connection
from .views import _form, _page, _query, _signed_in, _svc, router

FIELDS = ("cluster", "to", "value", "topic", "partitions")


def _spec(q: dict[str, str]) -> ResetSpec:
    """The form's reset; ResetRefused saying what is wrong (never echoing the input)."""
    if q["to"] not in TARGETS:
        raise ResetRefused(f"reset to one of {', '.join(TARGETS)}")
    value: int | None = None
    if q["value"]:
        try:
            value = parse_ms(q["value"]) if q["to"] == "timestamp" else int(q["value"])
        except ValueError:
            raise ResetRefused("the value must be a whole number (a timestamp: epoch ms or ISO-8601)") from None
    topic = q["topic"] or None
    if topic is not None and acl_patterns.name_problem(topic):
        raise ResetRefused("not a valid topic name")
    parts: tuple[int, ...] | None = None
    if q["partitions"]:
        try:
            parts = tuple(sorted({int(p) for p in q["partitions"].replace(" ", "").split(",") if p}))
        except ValueError:
            raise ResetRefused("partitions are numbers separated by commas") from None
    spec = ResetSpec(q["to"], value, topic, parts)
    spec.check()
    return spec


def _preview(svc: Any, group: str, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
    spec = _spec(q)
    try:
        cluster, props = connection(svc, q["cluster"] or None)
    except LookupError as exc:
        raise ResetRefused(str(exc.args[0])) from None
    return cluster, offset_jobs.preview(GroupOffsets(props), svc, group, spec)


@router.get("/groups/{group}/reset")
async def reset_page(request: Request, group: str) -> Response:
    sess = _signed_in(request)
    if acl_patterns.name_problem(group):
        return _page(request, "error.html", sess, status_code=400, message="Not a valid group name.")
    svc = _svc(request)
    q = _query(request, FIELDS)
    ctx: dict[str, Any] = {"group": group, "q": q, "preview": None, "error": None, "targets": TARGETS,
                           "resets": await run_in_threadpool(offset_jobs.recent, svc, group)}
    if q["to"]:
        try:
            ctx["cluster"], ctx["preview"] = await run_in_threadpool(_preview, svc, group, q)
        except ResetRefused as exc:
            ctx["error"] = str(exc)
    return _page(request, "reset.html", sess, can_reset=sess.can("operator"), **ctx)


@router.post("/groups/reset")
async def reset_start(request: Request) -> Response:
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    svc = _svc(request)
    group = form.get("group", "")
    q = {k: form.get(k, "").strip()[:200] for k in FIELDS}
    problem = "not a valid group name" if acl_patterns.name_problem(group) else None
    if problem is None:
        try:
            spec = _spec(q)
            cluster, props = connection(svc, q["cluster"] or None)
            job = await run_in_threadpool(offset_jobs.start, svc, GroupOffsets(props), cluster, group, spec,
                                          f"console:{sess.username}")
            return RedirectResponse(f"/console/groups/{quote(group, safe='')}/resets/{job['id']}", status_code=303)
        except LookupError as exc:
            problem = str(exc.args[0])
        except (ResetRefused, ConfigRejected, ApolloError) as exc:
            problem = str(exc)
    return _page(request, "error.html", sess, status_code=409, message=f"Not reset: {problem}")


@router.get("/groups/{group}/resets/{job_id}")
async def reset_panel(request: Request, group: str, job_id: str) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    job = await run_in_threadpool(offset_jobs.get, svc, job_id[:32])
    if job is None or job["group_id"] != group:
        return _page(request, "error.html", sess, status_code=404, message="No such reset.")

    def consumers() -> list[dict[str, Any]]:
        rows = offset_jobs.consumers_of(svc, group)
        for r in rows:
            state = (r.get("extra") or {}).get("consumer") or {}
            r["paused"], r["left"] = bool(state.get("paused")), bool(state.get("left"))
        return rows

    return _page(request, "reset_panel.html", sess, group=group, job=job,
                 consumers=await run_in_threadpool(consumers))
