"""Console pages of what runs: the overview (clusters, live clients, firing alerts, the charts' data), the client
list and one client's page (reports, history, throughput), alerts and the audit log."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import func, select

from ykafka.catalog import Scope, ScopeKind

from ..domain import audit, clients, hotconfig, registry
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..rollouts import drift
from ..routes.observe import parse_since
from ..services import Services
from ..storage import db
from ..storage.models import alerts, apps
from . import queries
from .config_views import readable_change
from .pipeline_reads import StoreUnavailable, read_store, traffic_charts
from .views import _api, _page, _query, _session, _signed_in, _svc, fmt_time, router

# --- overview, clients, alerts, audit ------------------------------------------------------------

@router.get("/")
def overview(request: Request) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        clusters = registry.all_clusters(conn)
        app_count = conn.execute(select(func.count()).select_from(apps)).scalar_one()
        beat = svc.settings.renew_interval
        roles: list[tuple[str, int]] | None
        drifting: int | None
        try:  # None: this MetaServer has just started and a large fleet's first count is under way
            roles = queries.live_roles(conn, beat)
        except queries.Counting:
            roles = None
        firing_count = conn.execute(select(func.count()).select_from(alerts)
                                    .where(alerts.c.status == "firing")).scalar_one()
        firing = conn.execute(select(alerts).where(alerts.c.status == "firing")
                              .order_by(alerts.c.last_seen.desc()).limit(20)).mappings().all()
        try:
            drifting = drift.drifting(conn, beat, roles is None or queries.many(roles))
        except queries.Counting:
            drifting = None
    for c in clusters.values():  # the failover state: where the cluster's writes go now
        c["writes_to"] = writes_to(svc, c["name"]) if c.get("standby") else "primary"
    return _page(request, "overview.html", sess, clusters=list(clusters.values()), app_count=app_count,
                 live_count=None if roles is None else sum(n for _, n in roles), roles=roles or [],
                 firing=firing, firing_count=firing_count,
                 drift_count=drifting)


def writes_to(svc: Services, cluster: str) -> str:
    """Where a cluster's writes go: ``route.active`` released at ``cluster:<name>`` (primary / standby)."""
    try:
        released = hotconfig.current(_api(svc), Scope(ScopeKind.CLUSTER, cluster))["released"]
    except (ApolloError, ConfigRejected):
        return "primary"
    return str(released.get("route.active", "primary"))


_CLIENT_FILTERS = ("app", "cluster", "group", "topic", "ip", "role", "version")
PAGE_ROWS = 200


CHART_METRICS = ("send.msgs", "consume.msgs", "lag")


@router.get("/data/overview")
def overview_data(request: Request) -> Response:
    """Produce / consume rates and max lag per minute over the last hour, from the pipeline's aggregates
    (the overview's charts); ``available: false`` with the reason when there is no pipeline store."""
    sess = _session(request)
    if sess is None:
        return JSONResponse({"detail": "log in"}, status_code=401)
    from ..routes.observe import parse_since

    try:
        rows = read_store(_svc(request), "aggregates:read_aggregates", parse_since("1h"),
                          names=list(CHART_METRICS), by=("name",))
    except StoreUnavailable as exc:
        return JSONResponse({"available": False, "reason": str(exc), "command": exc.command})
    series: dict[str, list[list[float]]] = {name: [] for name in CHART_METRICS}
    for row in sorted(rows, key=lambda r: r.get("window_start") or 0):
        name, value = row.get("name"), row.get("value")
        if name in series and value is not None and row.get("window_start") is not None:
            series[name].append([row["window_start"], value / 60.0 if name != "lag" else value])
    return JSONResponse({"available": True, "series": series})


@router.get("/clients")
def client_list(request: Request) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    f = _query(request, _CLIENT_FILTERS)
    online = request.query_params.get("online", "")
    raw_after = request.query_params.get("after")
    after = parse_cursor(raw_after) if raw_after else None
    if raw_after and after is None:
        return _page(request, "error.html", sess, status_code=400,
                     message="This page link is not valid; start again from the first page.")
    with db.read(svc.engine) as conn:
        rows, total, more, cursor = queries.client_list(conn, svc.settings.renew_interval, f, online == "1",
                                                        PAGE_ROWS, after)
    kept = {k: v for k, v in f.items() if v} | ({"online": online} if online else {})
    next_url = (f"/console/clients?{urlencode({**kept, 'after': json.dumps(list(cursor))})}"
                if cursor is not None else None)
    first_url = f"/console/clients?{urlencode(kept)}" if after is not None else None
    return _page(request, "clients.html", sess, rows=rows, procs=queries.by_process(rows, fmt_time), total=total,
                 more=more, f=f, online=online, next_url=next_url, first_url=first_url, page_rows=PAGE_ROWS)


def parse_cursor(raw: str) -> queries.Cursor | None:
    """The clients page's ``after`` (a JSON ``[last_seen, app_id, client_id]`` the page itself wrote); None when
    it is anything else, so a hand-edited link gets a clear 400 rather than a 500."""
    try:
        value = json.loads(raw[:1000])
    except (ValueError, RecursionError):
        return None
    if (not isinstance(value, list) or len(value) != 3 or isinstance(value[0], bool)
            or not isinstance(value[0], int | float) or not all(isinstance(v, str) for v in value[1:])):
        return None
    return float(value[0]), value[1], value[2]


@router.get("/clients/{app_id}/{client_id}")
def client_page(request: Request, app_id: str, client_id: str) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        client = clients.one(conn, svc.settings.renew_interval, app_id, client_id)
        history = clients.history(conn, app=app_id, client_id=client_id, limit=20) if client else []
        siblings = (queries.process_clients(conn, svc.settings.renew_interval, client["hostname"], client["pid"],
                                            client["process_started"]) if client else [])
    if client is None:
        return _page(request, "error.html", sess, status_code=404, message="No such client.")
    extra = client.get("extra") or {}
    rejections = [e for e in extra.get("errors") or [] if isinstance(e, dict) and e.get("type") == "config_rejected"]
    throughput, throughput_note = client_throughput(svc, client_id)
    charts, charts_note = ({}, None) if throughput_note else traffic_charts(svc, parse_since(CLIENT_WINDOW),
                                                                            client_id=client_id)
    return _page(request, "client.html", sess, c=client, history=history, rejections=rejections,
                 effective=extra.get("effective_config") or {}, dr=dr_summary(extra.get("dr")),
                 throughput=throughput, throughput_note=throughput_note, charts=charts, charts_note=charts_note,
                 siblings=siblings)


#: counters (summed) and latencies (worst window's p99) the client page shows per topic
CLIENT_COUNTERS = ("send.msgs", "send.errors", "consume.msgs", "consume.errors")
CLIENT_LATENCIES = ("send.latency_ms", "process.latency_ms")
#: the window of the client page's throughput table and charts
CLIENT_WINDOW = "15m"


def client_throughput(svc: Services, client_id: str, since: str = CLIENT_WINDOW
                      ) -> tuple[list[dict[str, Any]], str | None]:
    """Per topic over ``since``, from the pipeline's aggregates of this client's metrics: messages per second
    produced / consumed (over the minutes it reported), errors, and the worst minute's p99 send latency and
    handler time; ([], why) when there is no pipeline store."""
    try:
        rows = read_store(svc, "aggregates:read_aggregates", parse_since(since),
                          names=[*CLIENT_COUNTERS, *CLIENT_LATENCIES], client_id=client_id, by=("name", "topic"))
    except StoreUnavailable as exc:
        return [], str(exc)
    topics: dict[str, dict[str, Any]] = {}
    for row in rows:
        t = topics.setdefault(row.get("topic") or "", {"windows": set()})
        t["windows"].add(row.get("window_start"))
        name = str(row.get("name"))
        if name in CLIENT_COUNTERS:
            t[name] = t.get(name, 0) + (row.get("value") or 0)
        elif row.get("p99") is not None:
            t[name] = max(t.get(name) or 0.0, float(row["p99"]))
    out = []
    for topic, t in sorted(topics.items()):
        span_s = 60.0 * max(1, len(t["windows"]))
        out.append({"topic": topic or "(any)", "minutes": len(t["windows"]),
                    "produced_s": t.get("send.msgs", 0) / span_s, "send_errors": int(t.get("send.errors", 0)),
                    "send_p99_ms": t.get("send.latency_ms"), "consumed_s": t.get("consume.msgs", 0) / span_s,
                    "consume_errors": int(t.get("consume.errors", 0)), "process_p99_ms": t.get("process.latency_ms")})
    return out, None


def dr_summary(dr: Any) -> list[str]:
    """One line per route, spill queue and replay from a producer's DR status (spilled / replaying / standby)."""
    if not isinstance(dr, dict):
        return []
    lines = []
    for topic, route in (dr.get("routes") or {}).items():
        standby = " (on standby)" if route.get("failed_over") else ""
        lines.append(f"{topic}: writes to {route.get('active')}{standby}, primary {route.get('primary')}, "
                     f"standby {route.get('standby') or '-'}, failover {route.get('failover')}")
    for cluster, spill in (dr.get("spill") or {}).items():
        if spill.get("depth") or spill.get("spilled"):
            lines.append(f"spill {cluster}: {spill.get('depth', 0)} queued, {spill.get('spilled', 0)} spilled")
    for cluster, replay in (dr.get("replay") or {}).items():
        if replay.get("active") or replay.get("replayed"):
            lines.append(f"replay {cluster}: {'active, ' if replay.get('active') else ''}"
                         f"{replay.get('replayed', 0)} replayed, {replay.get('left', 0)} left")
    return lines or ["no spill, no replay, on primary"]


@router.get("/alerts")
def alert_list(request: Request) -> Response:
    sess = _signed_in(request)
    with db.read(_svc(request).engine) as conn:
        rows = conn.execute(select(alerts).order_by(alerts.c.last_seen.desc()).limit(200)).mappings().all()
    return _page(request, "alerts.html", sess, rows=rows)


@router.get("/audit")
def audit_log(request: Request) -> Response:
    sess = _signed_in(request)
    who = request.query_params.get("operator", "").strip()[:255] or None
    with db.read(_svc(request).engine) as conn:
        rows = audit.query(conn, operator=who, limit=300)
    rows = [{**r, **audit_change(r["action"], r.get("before"), r.get("after"))} for r in rows]
    return _page(request, "audit.html", sess, rows=rows, who=who or "")


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(", ", ": "))


def audit_change(action: str, before: Any, after: Any) -> dict[str, Any]:
    """An audited action as key: before → after lines: a config action as the release history shows it
    (:func:`readable_change`), any other by its top-level fields that differ (values as compact JSON)."""
    if action.startswith("config."):
        return readable_change(before, after)
    old = before if isinstance(before, dict) else ({} if before is None else {"value": before})
    new = after if isinstance(after, dict) else ({} if after is None else {"value": after})
    changes = [{"key": k, "before": None if k not in old else _shown(old[k]),
                "after": None if k not in new else _shown(new[k])}
               for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) or (k in old) != (k in new)]
    return {"changes": changes, "notes": []}


