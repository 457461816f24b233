"""The Topics page: every topic the live clients report, with its producers, consumer groups and their
consumers (from the client reports), and the max lag per group over the last 15 minutes when the pipeline's
aggregates are there."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .. import db
from . import provision, queries
from .views import (
    StoreUnavailable,
    _form,
    _login_redirect,
    _page,
    _session,
    _svc,
    read_store,
    router,
)


def _lags(svc: Any) -> tuple[dict[tuple[str, str], float], str | None]:
    from ..routes_observe import parse_since

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
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    svc = _svc(request)
    needle = request.query_params.get("q", "").strip()[:200]
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        page = 0
    topics: dict[str, dict[str, Any]] = {}
    with db.read(svc.engine) as conn:
        names = queries.topic_names(conn, svc.settings.renew_interval, needle)
        page = min(page, max(0, (len(names) - 1) // TOPICS_SHOWN))
        shown = names[page * TOPICS_SHOWN:(page + 1) * TOPICS_SHOWN]
        for name in shown:
            topics[name] = {"producers": 0, "groups": {}}
        for name, role, group, count in queries.topic_usage(conn, svc.settings.renew_interval, shown):
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
                 can_move=sess.can("admin"), clusters=clusters, moved=request.query_params.get("moved"))


@router.post("/topics/move")
async def topic_move(request: Request) -> Response:
    """Move a topic to another cluster: the live route switch (``route.cluster`` at ``topic:<name>``)."""
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = await _form(request, sess, "admin")
    topic, cluster = form.get("topic", ""), form.get("cluster", "")
    try:
        await run_in_threadpool(provision.move_topic, _svc(request), topic, cluster, f"console:{sess.username}")
    except provision.RequestError as exc:
        return _page(request, "error.html", sess, status_code=422, message=f"Not moved: {exc}")
    return RedirectResponse(f"/console/topics?q={quote(topic)}&moved={quote(cluster)}", status_code=303)
