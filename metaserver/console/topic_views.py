"""The Topics page: every topic the live clients report, with its producers, consumer groups and their
consumers (from the client reports), and the max lag per group over the last 15 minutes when the pipeline's
aggregates are there.

A topic's own page: the cluster it is routed to (and why), its partitions (one metadata request through
``ykafka.admin.topics``), the groups consuming it with their lag per partition judged Burrow-style (the group
page's read: ``LagSampler`` plus the pipeline's stored samples), produce / consume rates, send latency and
errors over time from the pipeline's aggregates, the live clients naming it, and the admin's move."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_rules
from ykafka.admin.topics import TopicAdminError, describe_topic
from ykafka.catalog import Scope

from .. import pipeline_module
from ..domain import hotconfig, placements
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..routes.observe import parse_since
from ..storage import db
from . import provision, queries
from .brokers import connection
from .group_views import STATUS_PILL, _history, _sampler
from .models import requests as reqs
from .pipeline_reads import StoreUnavailable, read_store, traffic_charts
from .views import _api, _form, _page, _query, _signed_in, _svc, router

#: live clients listed on a topic's page (the count covers all of them), and groups whose lag is read
TOPIC_CLIENTS = 50
TOPIC_GROUPS = 20
#: Burrow statuses from the best to the worst (a group's row shows its worst partition)
SEVERITY = ("OK", "WARN", "STALL", "ERR", "STOP")


def _lags(svc: Any) -> tuple[dict[tuple[str, str], float], str | None]:
    from ..routes.observe import parse_since

    try:
        rows = read_store(svc, "aggregates:read_aggregates", parse_since("15m"), names=["lag"],
                          by=("topic", "group"), whole_range=True)
    except StoreUnavailable as exc:
        return {}, str(exc)
    return {(r.get("topic") or "", r.get("group") or ""): r.get("value") or 0 for r in rows}, None


#: topics listed per page (the filter and the pages reach the rest; rendering thousands of rows, and counting
#: every topic's clients, is what made the page slow)
TOPICS_SHOWN = 100


@router.get("/topics")
def topic_list(request: Request) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    needle = request.query_params.get("q", "").strip()[:200]
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        page = 0
    topics: dict[str, dict[str, Any]] = {}
    with db.read(svc.engine) as conn:
        try:
            names = queries.topic_names(conn, svc.settings.renew_interval, needle)
            counting = False
        except queries.Counting:  # just started: a large fleet's first read of the names is under way
            names, counting = [], True
        page = min(page, max(0, (len(names) - 1) // TOPICS_SHOWN))
        shown = names[page * TOPICS_SHOWN:(page + 1) * TOPICS_SHOWN]
        for name in shown:
            topics[name] = {"producers": 0, "groups": {}}
        for name, role, group, count in queries.topic_usage(conn, svc.settings.renew_interval, shown, len(names)):
            t = topics[name]
            if role == "producer":
                t["producers"] += count
            elif group:
                t["groups"][group] = t["groups"].get(group, 0) + count
        # the move form's clusters, least loaded first (only an admin sees the form)
        clusters = [c["name"] for c in provision.cluster_loads(conn, svc.settings.renew_interval)
                    ] if sess.can("admin") else []
    lags, lag_note = _lags(svc)
    rows = [{"topic": name, "producers": t["producers"],
             "groups": [{"group": g, "consumers": n, "lag": lags.get((name, g))}
                        for g, n in sorted(t["groups"].items())]}
            for name, t in topics.items()]
    return _page(request, "topics.html", sess, rows=rows, q=needle, total=len(names), lag_note=lag_note,
                 page=page, first=page * TOPICS_SHOWN, pages=(len(names) + TOPICS_SHOWN - 1) // TOPICS_SHOWN,
                 can_move=sess.can("admin"), clusters=clusters, moved=request.query_params.get("moved"),
                 counting=counting)


def _route(svc: Any, topic: str) -> tuple[str | None, str | None]:
    """``route.cluster`` as released at the topic's scope (None: not set there), and why it is unknown if so."""
    try:
        released = hotconfig.current(_api(svc), Scope.parse(f"topic:{topic}"))["released"]
    except (ApolloError, ConfigRejected) as exc:
        return None, f"the config center cannot be read ({exc}); the topic's route is not known"
    route = released.get("route.cluster")
    return (str(route) if route else None), None


def _reported(svc: Any, topic: str, loads: bool) -> dict[str, Any]:
    """From the database: the topic's placement, the approved request that placed it, its live clients, the
    groups reading it and (``loads``: for the move form) the active clusters."""
    with db.read(svc.engine) as conn:
        placed = placements.lookup(conn, topic)
        approved = conn.execute(select(reqs.c.id, reqs.c.app_id, reqs.c.cluster, reqs.c.partitions).where(
            reqs.c.kind == "topic", reqs.c.name == topic, reqs.c.status == "approved")).mappings().first()
        clients, client_count = queries.topic_clients(conn, svc.settings.renew_interval, topic, TOPIC_CLIENTS)
        groups = queries.topic_groups(conn, topic, TOPIC_GROUPS)
        clusters = [c["name"] for c in provision.cluster_loads(conn, svc.settings.renew_interval)] if loads else []
    return {"placed": placed, "approved": dict(approved) if approved else None, "clients": clients,
            "client_count": client_count, "groups": groups, "clusters": clusters}


def _routed(svc: Any, route: str | None, placed: str | None) -> tuple[str, str]:
    """The cluster the SDK sends the topic to, in its order (its route, its placement, the default cluster)."""
    if route:
        return route, "route.cluster at the topic's scope"
    if placed:
        return placed, "its placement"
    return svc.settings.default_cluster or "", "the default cluster"


def _broker(svc: Any, cluster: str | None, topic: str, groups: list[str],
            history: dict[tuple[str, str, int], list[Any]]) -> tuple[str, dict[str, Any] | None, str | None]:
    """(cluster read, the topic's partitions and groups there, or the reason it could not be read)."""
    try:
        name, props = connection(svc, cluster or None)
    except LookupError as exc:
        return cluster or "", None, str(exc.args[0])
    try:
        return name, topic_lag(svc, props, name, topic, groups, history), None
    except TopicAdminError as exc:
        return name, None, str(exc)


def topic_lag(svc: Any, props: dict[str, Any], cluster: str, topic: str, groups: list[str],
              history: dict[tuple[str, str, int], list[Any]]) -> dict[str, Any]:
    """The topic's partitions (one metadata request) and, per group reading it (reported by its clients or in
    the pipeline's samples), the lag per partition now with the Burrow verdict over the samples plus this read."""
    burrow = pipeline_module("burrow")
    names = sorted({*groups, *(g for g, t, _ in history if t == topic)})[:TOPIC_GROUPS]
    sampler = _sampler(props, cluster)  # the process's own, kept open (group_views._sampler)
    partitions = describe_topic(props, topic, timeout=5.0, admin=sampler.admin)
    infos = sampler.groups(names) if names else []
    ends = sampler.end_offsets((topic, p["partition"]) for p in partitions or [])
    for p in partitions or []:
        p["end"] = ends.get((topic, p["partition"]))
    reported = set(groups)
    out = []
    for info in infos:
        committed_any = any(t == topic for t, _ in info.offsets)
        if not committed_any and info.group not in reported and not any(
                g == info.group and t == topic for g, t, _ in history):
            continue
        rows = []
        for p in partitions or []:
            window = list(history.get((info.group, topic, p["partition"]), []))
            end = p["end"]
            if end is not None:
                committed = info.offsets.get((topic, p["partition"]), -1)
                window.append(burrow.Sample(int(dt.datetime.now(dt.UTC).timestamp() * 1000), committed, end,
                                            max(0, end - committed) if committed >= 0 else end, info.alive))
            verdict = burrow.evaluate(window)
            last = max(window, key=lambda s: s.ts) if window else None
            rows.append({"partition": p["partition"], "status": verdict.status, "reason": verdict.reason,
                         "pill": STATUS_PILL.get(verdict.status, "warn"), "samples": len(window),
                         "committed": last.committed if last else None, "end": last.end_offset if last else None,
                         "lag": last.lag if last else None})
        worst = max((r["status"] for r in rows), key=lambda s: SEVERITY.index(s) if s in SEVERITY else 1,
                    default="OK")
        out.append({"group": info.group, "state": info.state, "members": info.members, "partitions": rows,
                    "lag": sum(r["lag"] or 0 for r in rows), "status": worst,
                    "pill": STATUS_PILL.get(worst, "warn")})
    return {"partitions": partitions, "groups": out}


@router.get("/topics/{topic}")
async def topic_page(request: Request, topic: str) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    q = _query(request, ("cluster", "since"))
    q["since"] = q["since"] or "1h"
    problem = acl_rules.name_problem(topic)
    if problem is not None:
        return _page(request, "error.html", sess, status_code=400, message=f"topic: {problem}")
    try:
        since = parse_since(q["since"])
    except HTTPException as exc:
        q["since"], since = "1h", dt.timedelta(hours=1)
        problem = str(exc.detail)
    # the config service (the route), the database and the pipeline store are read at once; the broker is read
    # as soon as the database and the samples are, on the cluster they point to (the route, slower to come, is
    # almost always that cluster too: a move updates the request's cluster; when it is not, it is read again)
    route_f = asyncio.ensure_future(run_in_threadpool(_route, svc, topic))
    charts_f = asyncio.ensure_future(run_in_threadpool(traffic_charts, svc, since, topic=topic))
    reported, (history, lag_note) = await asyncio.gather(
        run_in_threadpool(_reported, svc, topic, sess.can("admin")), run_in_threadpool(_history, svc, since))
    approved = reported["approved"] or {}
    guess = q["cluster"] or _routed(svc, approved.get("cluster"), reported["placed"])[0]
    broker_f = asyncio.ensure_future(run_in_threadpool(_broker, svc, guess, topic, reported["groups"], history))
    route, route_note = await route_f
    cluster, basis = _routed(svc, route, reported["placed"])
    read_on, view, error = await broker_f
    if (q["cluster"] or cluster or read_on) != read_on:
        read_on, view, error = await run_in_threadpool(_broker, svc, q["cluster"] or cluster, topic,
                                                       reported["groups"], history)
    charts, charts_note = await charts_f
    placed = {**reported, "cluster": cluster, "basis": basis, "route_note": route_note}
    return _page(request, "topic.html", sess, topic=topic, q=q, placed=placed, view=view, error=problem or error,
                 lag_note=lag_note, charts=charts, charts_note=charts_note, cluster=read_on,
                 moved=request.query_params.get("moved"), can_move=sess.can("admin"),
                 clusters=[c for c in reported["clusters"] if c != cluster])


@router.post("/topics/move")
async def topic_move(request: Request) -> Response:
    """Move a topic to another cluster: the live route switch (``route.cluster`` at ``topic:<name>``)."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    topic, cluster = form.get("topic", ""), form.get("cluster", "")
    try:
        await run_in_threadpool(provision.move_topic, _svc(request), topic, cluster, f"console:{sess.username}")
    except provision.RequestError as exc:
        return _page(request, "error.html", sess, status_code=422, message=f"Not moved: {exc}")
    if form.get("back") == "topic":  # moved from the topic's own page: back there
        return RedirectResponse(f"/console/topics/{quote(topic, safe='')}?moved={quote(cluster)}", status_code=303)
    return RedirectResponse(f"/console/topics?q={quote(topic)}&moved={quote(cluster)}", status_code=303)
