"""Consumer groups: per-partition lag judged Burrow-style (``pipeline.burrow`` over the pipeline's lag samples
plus one read from the broker now), the lag over time as a chart, and the group lifecycle — idle groups
(``pipeline.groups.candidates``) and ephemeral ones whose clients are gone — deleted through the AdminClient
(``pipeline.groups.delete_groups``) after a typed confirmation."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from ykafka.catalog import Scope

from .. import pipeline_module
from ..domain import configwrites, hotconfig
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..routes.observe import parse_since
from ..storage import db
from ..storage.models import client_state as cs
from . import queries
from .brokers import connection
from .pipeline_reads import StoreUnavailable, pipeline_store, read_store
from .views import _api, _audit, _form, _page, _query, _signed_in, _svc, fmt_time, router

STATUS_PILL = {"OK": "ok", "WARN": "warn", "STALL": "warn", "ERR": "bad", "STOP": "bad"}


_SAMPLERS: dict[str, Any] = {}
_SAMPLERS_LOCK = threading.Lock()


def _sampler(props: dict[str, Any], cluster: str) -> Any:
    """The process's one lag sampler (AdminClient + Consumer) per cluster connection, never closed: a coordinator
    request (describe groups, list group offsets) can outlive a timed-out wait, and a per-request AdminClient
    collected with one in flight crashed the MetaServer (segfault in librdkafka's rdk:main thread, seen on Apache
    Kafka under load; librdkafka issue 4605 reports the same with fresh clients). librdkafka handles are
    thread-safe, so the request threads share it."""
    key = json.dumps([cluster, props], sort_keys=True, default=str)
    with _SAMPLERS_LOCK:
        if key not in _SAMPLERS:
            conf = {k: v for k, v in props.items() if k != "bootstrap.servers"}
            _SAMPLERS[key] = pipeline_module("lag_sampler").LagSampler(props["bootstrap.servers"], cluster,
                                                                       timeout_s=5.0, conf=conf)
        return _SAMPLERS[key]


def _reported(svc: Any, groups: list[str]) -> dict[str, dict[str, Any]]:
    """Per group, from the client reports: the topics its clients read and whether any said ``ephemeral``."""
    out: dict[str, dict[str, Any]] = {g: {"topics": set(), "ephemeral": False} for g in groups}
    if not groups:
        return out
    with db.read(svc.engine) as conn:
        for group, topics, extra in conn.execute(select(cs.c.group_id, cs.c.topics, cs.c.extra).where(
                cs.c.group_id.in_(groups))):
            out[group]["topics"].update(topics or [])
            out[group]["ephemeral"] |= bool((extra or {}).get("ephemeral"))
    return out


def _history(svc: Any, since: dt.timedelta) -> tuple[dict[tuple[str, str, int], list[Any]], str | None]:
    try:
        store = pipeline_store(svc)
        return pipeline_module("alerts").lag_samples(store, since, dt.datetime.now(dt.UTC)), None
    except StoreUnavailable as exc:
        return {}, f"{exc}; the status is judged on the broker's current read alone"
    except OSError as exc:
        return {}, f"cannot read the pipeline's lag samples ({type(exc).__name__})"


def group_lag(svc: Any, props: dict[str, Any], cluster: str, group: str, since: dt.timedelta) -> dict[str, Any]:
    """Per partition: committed, end, lag now and the Burrow verdict over the stored samples plus this read;
    the lag per topic over time for the chart."""
    burrow = pipeline_module("burrow")
    expected = sorted(_reported(svc, [group])[group]["topics"])
    sampler = _sampler(props, cluster)
    alive = sampler.groups([group])  # read once: its state, members and commits
    now = sampler.lag_of(alive, expected={group: expected})
    history, note = _history(svc, since)
    partitions = []
    series: dict[str, dict[int, float]] = {}
    keys = {(r["topic"], int(r["partition"])) for r in now} | {(t, p) for g, t, p in history if g == group}
    live = {(r["topic"], int(r["partition"])): r for r in now}
    for topic, partition in sorted(keys):
        window = list(history.get((group, topic, partition), []))
        row = live.get((topic, partition))
        if row is not None:
            window.append(burrow.Sample(int(row["ts"]), int(row["committed"]), int(row["end_offset"]),
                                        int(row["value"]), bool(row["count"])))
        verdict = burrow.evaluate(window)
        last = max(window, key=lambda s: s.ts) if window else None
        partitions.append({"topic": topic, "partition": partition, "status": verdict.status,
                           "pill": STATUS_PILL.get(verdict.status, "warn"), "reason": verdict.reason,
                           "committed": last.committed if last else None, "end": last.end_offset if last else None,
                           "lag": last.lag if last else None, "samples": len(window)})
        for s in window:
            per_ts = series.setdefault(topic, {})
            per_ts[s.ts] = per_ts.get(s.ts, 0) + s.lag
    latency, latency_note = group_latency(svc, group, since)
    info = alive[0] if alive else None
    return {"partitions": partitions, "note": note, "latency": latency, "latency_note": latency_note,
            "state": info.state if info else "UNKNOWN",
            "members": info.members if info else 0, "expected": expected,
            "chart": {topic: sorted([ts, lag] for ts, lag in points.items()) for topic, points in series.items()}}


#: the latency series of a group's chart: the worst of its consumers' p99 per minute
LATENCY_SERIES = {"consume.latency_ms": "consume p99 (ms)", "process.latency_ms": "handler p99 (ms)"}


def group_latency(svc: Any, group: str, since: dt.timedelta) -> tuple[dict[str, list[list[float]]], str | None]:
    """Per minute over ``since``: the p99 of the time from a message's timestamp to its handing over
    (``consume.latency_ms``) and of the handler (``process.latency_ms``), from the pipeline's aggregates."""
    try:
        rows = read_store(svc, "aggregates:read_aggregates", since, names=list(LATENCY_SERIES), group=group,
                          by=("name",))
    except StoreUnavailable as exc:
        return {}, str(exc)
    series: dict[str, list[list[float]]] = {}
    for row in sorted(rows, key=lambda r: r.get("window_start") or 0):
        label = LATENCY_SERIES.get(str(row.get("name")))
        if label and row.get("p99") is not None and row.get("window_start") is not None:
            series.setdefault(label, []).append([row["window_start"], row["p99"]])
    return series, None


def _check_group(name: str) -> str | None:
    try:
        Scope.parse(f"group:{name}")
    except ValueError as exc:
        return str(exc)
    return None


@router.get("/groups/{group}")
async def group_page(request: Request, group: str) -> Response:
    sess = _signed_in(request)
    q = _query(request, ("cluster", "since"))
    q["since"] = q["since"] or "1h"
    ctx: dict[str, Any] = {"group": group, "q": q, "view": None, "error": _check_group(group)}
    if ctx["error"] is None:
        # the config service's answer (paused?) is read while the broker is
        paused = asyncio.ensure_future(run_in_threadpool(_paused, _svc(request), group))
        try:
            ctx["cluster"], props = connection(_svc(request), q["cluster"] or None)
            ctx["view"] = await run_in_threadpool(group_lag, _svc(request), props, ctx["cluster"], group,
                                                  parse_since(q["since"]))
        except LookupError as exc:
            ctx["error"] = str(exc.args[0])
        except HTTPException as exc:
            ctx["error"] = str(exc.detail)
        ctx["paused"] = await paused
        ctx["members"] = await run_in_threadpool(_members, _svc(request), group)
    return _page(request, "group.html", sess, status_code=400 if ctx["error"] and ctx["view"] is None else 200,
                 can_pause=sess.can("operator"), **ctx)


def _members(svc: Any, group: str) -> list[dict[str, Any]]:
    """The group's live ykafka consumers (their reports), grouped by the process holding each."""
    with db.read(svc.engine) as conn:
        return queries.by_process(queries.group_clients(conn, svc.settings.renew_interval, group), fmt_time)


def _paused(svc: Any, group: str) -> str | None:
    """``consumer.paused`` as released at the group's scope ("true" / "false"; None: not set there, or the
    config center cannot be read)."""
    try:
        released = hotconfig.current(_api(svc), Scope.parse(f"group:{group}"))["released"]
    except (ApolloError, ConfigRejected):
        return None
    value = released.get("consumer.paused")
    return None if value is None else str(value).lower()


@router.post("/groups/pause")
async def group_pause(request: Request) -> Response:
    """Pause or resume a group's consumers (operator): ``consumer.paused`` published at ``group:<name>``, the same
    validated release as a hot-config change (each consumer stops fetching, stays in the group), audited."""
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    svc = _svc(request)
    group, pause = form.get("group", ""), form.get("paused") == "true"
    problem = _check_group(group)
    if problem is None:
        try:
            plan = hotconfig.validate(f"group:{group}", {"consumer.paused": "true" if pause else "false"}, [], None)
            await run_in_threadpool(lambda: configwrites.push(svc, plan, f"console:{sess.username}",
                                                              "pause" if pause else "resume", guard=False))
        except (ConfigRejected, ApolloError) as exc:
            problem = str(exc)
    if problem is not None:
        return _page(request, "error.html", sess, status_code=422, message=f"Not changed: {problem}")
    return RedirectResponse(f"/console/groups/{quote(group, safe='')}?cluster={quote(form.get('cluster', ''))}",
                            status_code=303)


#: groups a page of the groups page shows (and describes on the broker, with their committed offsets)
GROUP_PAGE = 200  # pipeline.groups.GROUP_PAGE (the console imports the pipeline only when it is installed)


def lifecycle(svc: Any, props: dict[str, Any], cluster: str, idle: dt.timedelta, name: str = "",
              after: str | None = None) -> dict[str, Any]:
    """One page of the cluster's groups (state, members, offsets) whose name contains ``name``, after the group
    ``after`` in name order, and the cleanup candidates among them: idle (no member, offsets not moved for
    ``idle``, per the pipeline's samples when there are any) and ephemeral ones with no member.

    Why a page: describing a group and reading its offsets is one broker request each; at 2,000 groups the
    whole list cost two of each per group (the candidates read them again) on every load. The names come from
    one ListGroups request (no paged form exists in Kafka's protocol; a name is a few bytes), and only the page's
    groups are described."""
    lc = pipeline_module("groups")
    try:
        store, note = pipeline_store(svc), None
    except StoreUnavailable as exc:
        store, note = None, f"{exc}; idle time is counted from now"
    sampler = _sampler(props, cluster)
    cut = lc.page_of(sampler.group_names(), name, after, GROUP_PAGE)
    page = cut["page"]
    infos = sampler.groups(page) if page else []
    found = {c["group"]: c for c in lc.candidates(sampler, store, idle, infos=infos)}
    with db.read(svc.engine) as conn:
        ephemeral = queries.ephemeral_groups(conn, [i.group for i in infos if not i.alive])
    for info in infos:
        if not info.alive and info.group in ephemeral and info.group not in found:
            found[info.group] = {"group": info.group, "state": info.state, "members": info.members,
                                 "idle_s": None, "basis": "ephemeral: its clients are gone",
                                 "committed": info.as_dict()["offsets"]}
    for name, cand in found.items():
        cand["kind"] = "ephemeral" if name in ephemeral else "idle"
    return {"groups": [i.as_dict() for i in infos], "candidates": sorted(found.values(), key=lambda c: c["group"]),
            "note": note, "total": cut["total"], "first": cut["first"], "next": cut["next"]}


@router.get("/groups")
async def group_list(request: Request) -> Response:
    sess = _signed_in(request)
    q = _query(request, ("cluster", "idle", "name"))
    q["idle"] = q["idle"] or "7d"
    after = request.query_params.get("after")
    if after is not None and not 0 < len(after) <= 1000:  # any group name; only a place in the sorted names
        return _page(request, "error.html", sess, status_code=400,
                     message="This page link is not valid; start again from the first page.")
    ctx: dict[str, Any] = {"q": q, "view": None, "error": None, "deleted": request.query_params.get("deleted")}
    try:
        ctx["cluster"], props = connection(_svc(request), q["cluster"] or None)
        view = await run_in_threadpool(lifecycle, _svc(request), props, ctx["cluster"],
                                       parse_since(q["idle"], "idle"), q["name"], after)
        kept = {k: v for k, v in q.items() if v}
        ctx["next_url"] = (f"/console/groups?{urlencode({**kept, 'after': view['next']})}"
                           if view["next"] is not None else None)
        ctx["first_url"] = f"/console/groups?{urlencode(kept)}" if after is not None else None
        ctx["view"] = view
    except LookupError as exc:
        ctx["error"] = str(exc.args[0])
    except HTTPException as exc:
        ctx["error"] = str(exc.detail)
    return _page(request, "groups.html", sess, can_delete=sess.can("admin"), page_rows=GROUP_PAGE, **ctx)


def _delete(svc: Any, props: dict[str, Any], cluster: str, group: str) -> str | None:
    delete_groups = pipeline_module("groups").delete_groups
    sampler = _sampler(props, cluster)
    infos = sampler.groups([group])
    if infos and infos[0].alive:
        return f"the group has {infos[0].members} live member(s); stop its consumers first"
    return delete_groups(sampler.admin, [group]).get(group)


@router.post("/groups/delete")
async def group_delete(request: Request) -> Response:
    """Delete one group (admin) once its name is typed again as confirmation; refused while it has members."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    svc = _svc(request)
    group = form.get("group", "")
    problem = _check_group(group)
    if problem is None and form.get("confirm", "").strip() != group:
        problem = "type the group's name to confirm the deletion"
    if problem is None:
        try:
            cluster, props = connection(svc, form.get("cluster") or None)
            problem = await run_in_threadpool(_delete, svc, props, cluster, group)
        except LookupError as exc:
            problem = str(exc.args[0])
    if problem is not None:
        return _page(request, "error.html", sess, status_code=422, message=f"Not deleted: {problem}")
    _audit(svc, sess, "group.delete", f"group:{group}", None, {"cluster": cluster, "at": time.time()})
    return RedirectResponse(f"/console/groups?cluster={quote(cluster)}&idle={quote(form.get('idle') or '7d')}"
                            f"&deleted={quote(group)}", status_code=303)
