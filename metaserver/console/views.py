"""The console's pages: server-rendered (Jinja2, autoescaped), one small script for the live panels.

Every page needs a session cookie; every POST carries the session's CSRF token; roles gate actions
(viewer reads, operator changes config, admin manages users). Every action lands in the audit log.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from ykafka import catalog
from ykafka.catalog import Scope, ScopeKind

from .. import audit, clients, configwrites, db, hotconfig, pipeline_module, registry
from ..apollo import ApolloError, ApolloOpenApi
from ..hotconfig import ConfigRejected
from ..models import alerts, apps
from ..services import Services
from . import loop, queries, titles, users

COOKIE = "ykafka_console"
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
_DICT_ATTRIBUTES = frozenset(dir(dict))
_jinja_getattr = templates.env.getattr


def _getattr(obj: Any, attribute: str) -> Any:
    """``row.name`` in a template, as Jinja resolves it, without first raising AttributeError for every field
    of a plain dict (most rows are dicts: on a page of hundreds of rows that failed lookup was the cost)."""
    if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
        try:
            return obj[attribute]
        except KeyError:
            return templates.env.undefined(obj=obj, name=attribute)
    return _jinja_getattr(obj, attribute)


templates.env.getattr = _getattr  # type: ignore[method-assign]
router = APIRouter(prefix="/console", include_in_schema=False)
log = structlog.get_logger("metaserver.console")


class Denied(Exception):
    """403: wrong role or missing / wrong CSRF token."""


class FormIncomplete(Exception):
    """400: a POSTed form lacks fields its page always sends (a hand-made or truncated request)."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"missing form field(s): {', '.join(missing)}")


def required(form: dict[str, str], *names: str) -> dict[str, str]:
    """``form`` when it holds every one of ``names`` (FormIncomplete → 400 naming the missing ones, never a value)."""
    missing = [name for name in names if name not in form]
    if missing:
        raise FormIncomplete(missing)
    return form


def _svc(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


def _source(request: Request) -> str:
    return request.client.host if request.client else "?"


def _page(request: Request, name: str, sess: users.Session | None, status_code: int = 200,
          **ctx: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"session": sess, "nav": name.split(".")[0],
                                                      "page_title": titles.page_title(name, ctx), **ctx},
                                      status_code=status_code)


def _session(request: Request) -> users.Session | None:
    return users.session(_svc(request).engine, request.cookies.get(COOKIE))


async def _form(request: Request, sess: users.Session, role: str) -> dict[str, str]:
    """The POSTed form after the CSRF and role checks (Denied → 403)."""
    form = await request.form()
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    if values.get("csrf") != sess.csrf or not sess.can(role):
        raise Denied()
    return values


def _login_redirect() -> RedirectResponse:
    return RedirectResponse("/console/login", status_code=303)


def _audit(svc: Services, sess: users.Session, action: str, target: str, before: Any, after: Any) -> None:
    with db.write(svc.engine) as conn:
        audit.record(conn, f"console:{sess.username}", action, target, before, after)


# --- login ---------------------------------------------------------------------------------------

@router.get("/login")
def login_form(request: Request) -> Response:
    return _page(request, "login.html", None, error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await request.form()
    username, password = str(form.get("username") or ""), str(form.get("password") or "")
    svc = _svc(request)
    try:
        got = await run_in_threadpool(users.login, svc.engine, username, password, _source(request))
    except users.UserError:
        return _page(request, "login.html", None, status_code=429,
                     error="Too many failed logins for this user from this address; try again later.")
    if got is None:
        return _page(request, "login.html", None, status_code=401, error="Wrong username or password.")
    token, sess = got
    _audit(svc, sess, "console.login", sess.username, None, {"source": _source(request)})
    resp = RedirectResponse("/console/", status_code=303)
    resp.set_cookie(COOKIE, token, max_age=users.SESSION_TTL_S, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/console")
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    await _form(request, sess, "viewer")
    users.logout(_svc(request).engine, request.cookies.get(COOKIE, ""))
    resp = _login_redirect()
    resp.delete_cookie(COOKIE, path="/console")
    return resp


# --- overview, clients, alerts, audit ------------------------------------------------------------

@router.get("/")
def overview(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        clusters = registry.all_clusters(conn)
        app_count = conn.execute(select(func.count()).select_from(apps)).scalar_one()
        roles = queries.live_roles(conn, svc.settings.renew_interval)
        firing_count = conn.execute(select(func.count()).select_from(alerts)
                                    .where(alerts.c.status == "firing")).scalar_one()
        firing = conn.execute(select(alerts).where(alerts.c.status == "firing")
                              .order_by(alerts.c.last_seen.desc()).limit(20)).mappings().all()
    for c in clusters.values():  # the failover state: where the cluster's writes go now
        c["writes_to"] = writes_to(svc, c["name"]) if c.get("standby") else "primary"
    return _page(request, "overview.html", sess, clusters=list(clusters.values()), app_count=app_count,
                 live_count=sum(n for _, n in roles), roles=roles, firing=firing, firing_count=firing_count)


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


class StoreUnavailable(Exception):
    """The pipeline store cannot be read; the message says why without naming its path or URI, and
    ``command`` is what to run when the pipeline has simply not run yet."""

    def __init__(self, message: str, command: str | None = None) -> None:
        super().__init__(message)
        self.command = command


#: what an operator runs when no pipeline has written the store yet (docs/observability.md)
PIPELINE_RUN = "ykafka pipeline run"
NOT_RUN_YET = ("no pipeline run yet: start it with `ykafka pipeline run` (continuously; `--once` for one pass), "
               "on the dev stack after `source .ykafka/dev.env`")


def pipeline_store(svc: Services) -> Any:
    """The pipeline store (``pipeline.store.Store``) through the observe API's checks, or StoreUnavailable
    with the reason; the store's location never reaches a page."""
    import os

    from fastapi import HTTPException

    from .. import routes_observe

    root = svc.settings.pipeline_store
    if root and "://" not in root and not os.path.isdir(os.path.expanduser(root)):
        raise StoreUnavailable(NOT_RUN_YET, PIPELINE_RUN)  # configured, but nothing written there yet
    try:
        return routes_observe._store(svc)
    except HTTPException as exc:
        raise StoreUnavailable(_without_location(svc, str(exc.detail))) from None


def _without_location(svc: Services, detail: str) -> str:
    root = svc.settings.pipeline_store or ""
    for shown in (repr(root), root) if root else ():
        detail = detail.replace(shown, "the configured pipeline store")
    return detail


def read_store(svc: Services, reader: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Rows from a pipeline-store reader (``"module:function"`` of the pipeline, imported once the store is known
    to be readable), through the observe API's checks; the store's location never reaches a page."""
    from fastapi import HTTPException

    from .. import routes_observe

    store = pipeline_store(svc)
    module, _, name = reader.partition(":")
    try:
        return routes_observe._read(getattr(pipeline_module(module), name), store, *args, **kwargs)
    except HTTPException as exc:
        raise StoreUnavailable(_without_location(svc, str(exc.detail))) from None


@router.get("/data/overview")
def overview_data(request: Request) -> Response:
    """Produce / consume rates and max lag per minute over the last hour, from the pipeline's aggregates
    (the overview's charts); ``available: false`` with the reason when there is no pipeline store."""
    sess = _session(request)
    if sess is None:
        return JSONResponse({"detail": "log in"}, status_code=401)
    from ..routes_observe import parse_since

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
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    svc = _svc(request)
    f = {k: request.query_params.get(k, "").strip()[:200] for k in _CLIENT_FILTERS}
    online = request.query_params.get("online", "")
    with db.read(svc.engine) as conn:
        rows, total = queries.client_list(conn, svc.settings.renew_interval, f, online == "1", PAGE_ROWS)
    return _page(request, "clients.html", sess, rows=rows, procs=queries.by_process(rows), total=total, f=f,
                 online=online)


@router.get("/clients/{app_id}/{client_id}")
def client_page(request: Request, app_id: str, client_id: str) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
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
    return _page(request, "client.html", sess, c=client, history=history, rejections=rejections,
                 effective=extra.get("effective_config") or {}, dr=dr_summary(extra.get("dr")),
                 throughput=throughput, throughput_note=throughput_note, siblings=siblings)


#: counters (summed) and latencies (worst window's p99) the client page shows per topic
CLIENT_COUNTERS = ("send.msgs", "send.errors", "consume.msgs", "consume.errors")
CLIENT_LATENCIES = ("send.latency_ms", "process.latency_ms")


def client_throughput(svc: Services, client_id: str, since: str = "15m") -> tuple[list[dict[str, Any]], str | None]:
    """Per topic over ``since``, from the pipeline's aggregates of this client's metrics: messages per second
    produced / consumed (over the minutes it reported), errors, and the worst minute's p99 send latency and
    handler time; ([], why) when there is no pipeline store."""
    from ..routes_observe import parse_since

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
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    with db.read(_svc(request).engine) as conn:
        rows = conn.execute(select(alerts).order_by(alerts.c.last_seen.desc()).limit(200)).mappings().all()
    return _page(request, "alerts.html", sess, rows=rows)


@router.get("/audit")
def audit_log(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
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


# --- hot config: catalog, edit → validate → diff → reach → publish → live panel → promote / roll back ---

def _scope(text: str) -> Scope:
    return catalog.GLOBAL if text in ("", "global") else hotconfig.parse_scope(text)


def _api(svc: Services) -> ApolloOpenApi:
    if svc.apollo is None:
        raise ConfigRejected({"config center": "no config center configured"}, "no config center")
    return svc.apollo


def _parse_changes(text: str) -> tuple[dict[str, str], list[str]]:
    """``key=value`` lines set, ``-key`` lines delete; blank lines and ``#`` comments are skipped."""
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            deletes.append(line[1:].strip())
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigRejected({line[:80]: "expected key=value (or -key to delete)"})
        sets[key.strip()] = value.strip()
    return sets, deletes


def _state(svc: Services, scope: Scope) -> tuple[dict[str, Any], loop.Target]:
    current, main, gray = hotconfig.current_with_releases(_api(svc), scope)
    return current, loop.target(current, main, gray)


PANEL_ROWS = 100  # rows of the live panel (polled every second); the counts cover every client
#: a third-party Apollo client counts as live when the config service saw it within this many seconds (its
#: record is refreshed at least once a minute while it polls)
APOLLO_FRESH_S = 600


def apollo_clients(svc: Services, tgt: loop.Target) -> list[dict[str, Any]]:
    """Third-party Apollo clients holding a release of the target's namespace (main line, and the gray
    branch's holders), from the config service's instance records; [] when it cannot tell."""
    if svc.apollo is None:
        return []
    try:
        found = svc.apollo.instances(tgt.namespace)
        if tgt.gray_branch:
            found += svc.apollo.instances(tgt.namespace, cluster=tgt.gray_branch)
    except ApolloError as exc:
        log.warning("console.instances_unavailable", namespace=tgt.namespace, error=str(exc))
        return []
    with db.read(svc.engine) as conn:
        known = queries.reported_ips(conn, {str(i.get("ip")) for i in found if i.get("ip")})
    return loop.apollo_clients(found, tgt.namespace, known, time.time() - APOLLO_FRESH_S)


#: the config service's instance records are fetched on these threads while the panel's SQL runs
_INSTANCES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="console-instances")


def _live(svc: Services, scope: Scope, tgt: loop.Target) -> dict[str, Any]:
    """The panel: counts per status over every live client the scope reaches (grouped in SQL), rows for the
    first hundred, the unsettled ones (pending, rejected) first since those need the operator. A scope
    reaching at most a panel's worth of clients is read in one query; a larger one reads only what the
    counts say is there (the clients holding the release with errors, a page of the pending ones)."""
    third_party = _INSTANCES.submit(apollo_clients, svc, tgt)  # an HTTP call: overlap it with the SQL below
    beat, kind = svc.settings.renew_interval, scope.kind.value
    counts = {"applied": 0, "pending": 0, "rejected": 0}
    total = 0
    keys = [k for k in (tgt.main_key, tgt.gray_key) if k]
    with db.read(svc.engine) as conn:
        def rejections_of(c: dict[str, Any]) -> list[dict[str, Any]]:
            return queries.rejections(conn, c["app_id"], c["client_id"])

        errored_holders = False  # any client holding a key in force and reporting errors
        for held, has_errors, gray, n in queries.reached_summary(conn, beat, kind, scope.name, tgt.namespace,
                                                                   tgt.gray_ips, tgt.gray_labels):
            total += n
            parts = (held or "").split("+")
            errored_holders |= has_errors and any(k in parts for k in keys)
            want = tgt.gray_key if gray and tgt.gray_key else tgt.main_key
            if not want or want not in parts:
                counts["pending"] += n
            elif not has_errors:
                counts["applied"] += n
        if total <= PANEL_ROWS:  # every client fits on the panel: one read, each classified
            rows = loop.panel(queries.reached(conn, beat, kind, scope.name, tgt.namespace), scope, tgt,
                              rejections_of)
        else:
            # every client that holds the key but reports errors is classified (few, usually none: their count
            # must be exact); of the pending ones (counted by the summary) only the rows shown are read
            unsettled = queries.reached(conn, beat, kind, scope.name, tgt.namespace, limit=5000,
                                        where=queries.holding_with_errors(tgt.namespace, keys)
                                        ) if errored_holders else []
            if counts["pending"]:
                unsettled += queries.reached(conn, beat, kind, scope.name, tgt.namespace,
                                             where=queries.pending(tgt.namespace, keys), limit=PANEL_ROWS)
            rows = loop.panel(unsettled, scope, tgt, rejections_of)
        for row in rows:  # errors reported, key held: rejected, or applied when the errors are not this release's
            if row["client"]["has_errors"] and row["status"] in ("applied", "rejected"):
                counts[row["status"]] += 1
        if len(rows) < PANEL_ROWS < total:
            seen = {(r["client"]["app_id"], r["client"]["client_id"]) for r in rows}
            more = queries.reached(conn, beat, kind, scope.name, tgt.namespace, limit=PANEL_ROWS + len(seen))
            rows += [r for r in loop.panel(more, scope, tgt, rejections_of)
                     if (r["client"]["app_id"], r["client"]["client_id"]) not in seen]
    for row in loop.panel(third_party.result(), scope, tgt):  # third-party Apollo clients: no report
        total += 1
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        rows.insert(0, row)
    order = {"rejected": 0, "pending": 1, "none": 2, "applied": 3}
    rows.sort(key=lambda r: order.get(r["status"], 9))
    return {"rows": rows[:PANEL_ROWS], "total": total, "counts": counts}


def readable_change(before: Any, after: Any) -> dict[str, Any]:
    """An audited config action as the history shows it: ``changes`` (key, before, after) for every key whose
    value moved, and ``notes`` (release name, gray IPs). Handles both shapes the console writes: a publish
    (``before`` = old values, ``after.values`` = new ones) and a rollback / promote / abandon (``released``
    and ``gray`` on both sides)."""
    before, after = before if isinstance(before, dict) else {}, after if isinstance(after, dict) else {}
    notes: list[str] = []
    if "released" in after or "released" in before:
        old, new = dict(before.get("released") or {}), dict(after.get("released") or {})
        for side, label in ((before, "gray before"), (after, "gray after")):
            gray = side.get("gray")
            if isinstance(gray, dict):
                targets = [*(gray.get("ips") or []), *(f"label {x}" for x in gray.get("labels") or [])]
                notes.append(f"{label}: {', '.join(targets) or 'no IPs'}")
    else:
        old, new = dict(before), dict(after.get("values") or {})
        new = {**{k: old[k] for k in old if k not in new}, **new}
        if after.get("ips") or after.get("labels"):
            targets = [str(ip) for ip in after.get("ips") or []] + [f"label {x}" for x in after.get("labels") or []]
            notes.append(f"gray to {', '.join(targets)}")
        release = after.get("release")
        if isinstance(release, dict) and release.get("name"):
            notes.append(f"release {release['name']}")
        if after.get("error"):
            notes.append("failed, nothing released" + {True: "; its items were put back",
                                                         False: "; its items could not be put back"}.get(
                after.get("restored"), ""))
        if after.get("discarded"):
            notes.append(f"put back unreleased items first: {', '.join(after['discarded'])}")
    changes = [{"key": k, "before": old.get(k), "after": new.get(k)}
               for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return {"changes": changes, "notes": notes}


def _history(svc: Services, namespace: str) -> list[dict[str, Any]]:
    with db.read(svc.engine) as conn:
        rows = [r for r in audit.query(conn, target=namespace, limit=50) if r["action"].startswith("config.")]
    return [{**r, **readable_change(r.get("before"), r.get("after"))} for r in rows]


def _config_page(request: Request, sess: users.Session, scope: Scope, status_code: int = 200,
                 **ctx: Any) -> Response:
    svc = _svc(request)
    try:
        current, tgt = _state(svc, scope)
        error = None
    except (ApolloError, ConfigRejected) as exc:
        current, tgt, error = None, None, str(exc)
    keys = [k for k in catalog.KEYS.values() if scope.kind in k.scopes]
    ctx.setdefault("form", {"changes": "", "ips": "", "labels": "", "comment": ""})
    return _page(request, "config.html", sess, status_code=status_code, scope=str(scope), keys=keys,
                 current=current, error=ctx.pop("error", None) or error,
                 panel=_live(svc, scope, tgt) if tgt else None, history=_history(svc, scope.namespace()),
                 can_edit=sess.can("operator"), **ctx)


@router.get("/config")
def config(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    try:
        scope = _scope(request.query_params.get("scope", "global"))
    except ConfigRejected as exc:
        return _page(request, "error.html", sess, status_code=400, message="; ".join(exc.errors.values()))
    return _config_page(request, sess, scope)


@router.get("/config/panel")
def config_panel(request: Request) -> Response:
    """The live panel alone (polled by console.js every second while the page is open)."""
    sess = _session(request)
    if sess is None:
        return Response(status_code=401)
    try:
        scope = _scope(request.query_params.get("scope", "global"))
        _, tgt = _state(_svc(request), scope)
    except (ConfigRejected, ApolloError):
        return Response(status_code=400)
    return _page(request, "panel.html", sess, panel=_live(_svc(request), scope, tgt))


def _plan(form: dict[str, str], svc: Services) -> hotconfig.PushPlan:
    sets, deletes = _parse_changes(form["changes"])
    ips = [ip.strip() for ip in form.get("ips", "").replace(",", " ").split() if ip.strip()] or None
    labels = [x.strip() for x in form.get("labels", "").replace(",", " ").split() if x.strip()] or None
    plan = hotconfig.validate(form["scope"] or "global", dict(sets), deletes, ips, labels)
    with db.read(svc.engine) as conn:
        hotconfig.check_group_protocol(plan, conn, svc.settings.renew_interval)
    return plan


@router.post("/config/preview")
async def config_preview(request: Request) -> Response:
    """Validate as the MetaServer validates (catalog, guard rules), diff against what is in force, list the
    clients it reaches; the config service and the database are asked off the event loop."""
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = required(await _form(request, sess, "operator"), "scope", "changes")
    return await run_in_threadpool(_preview, request, sess, form)


def _preview(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
    svc = _svc(request)
    try:
        scope = _scope(form["scope"])
        plan = _plan(form, svc)
        configwrites.preview(svc, plan)
    except ConfigRejected as exc:
        return _config_page(request, sess, catalog.GLOBAL if "scope" in exc.errors else _scope(form["scope"]),
                            status_code=422, form=form, errors=exc.errors)
    with db.read(svc.engine) as conn:
        everyone = queries.reached(conn, svc.settings.renew_interval, scope.kind.value, scope.name, plan.namespace)
    try:
        _, tgt = _state(svc, scope)
        everyone += apollo_clients(svc, tgt)
    except (ApolloError, ConfigRejected) as exc:
        log.warning("console.preview_instances", error=str(exc))
    reach = [c for c in everyone if loop.gray_match(c, plan.ips, plan.labels)]
    gray_to = [*(plan.ips or []), *(f"label {x}" for x in plan.labels or [])]
    return _config_page(request, sess, scope, form=form, preview={"changes": plan.changes, "reach": reach,
                                                                  "ips": gray_to})


@router.post("/config/publish")
async def config_publish(request: Request) -> Response:
    """Publish what the preview showed, through the one config-write path (all or nothing, audited)."""
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = required(await _form(request, sess, "operator"), "scope", "changes")
    return await run_in_threadpool(_publish, request, sess, form)


def _publish(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
    try:
        scope = _scope(form["scope"])
        svc = _svc(request)
        configwrites.push(svc, _plan(form, svc), f"console:{sess.username}", form.get("comment", "")[:200])
    except ConfigRejected as exc:
        return _config_page(request, sess, catalog.GLOBAL, status_code=422, form=form, errors=exc.errors)
    return RedirectResponse(f"/console/config?scope={scope}&published=1", status_code=303)


async def _scope_action(request: Request, action: str) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = required(await _form(request, sess, "operator"), "scope")
    try:
        scope = _scope(form["scope"])
        await run_in_threadpool(configwrites.scope_action, _svc(request), scope, action, f"console:{sess.username}")
    except ConfigRejected as exc:
        return _page(request, "error.html", sess, status_code=409, message="; ".join(exc.errors.values()))
    return RedirectResponse(f"/console/config?scope={scope}", status_code=303)


@router.post("/config/rollback")
async def config_rollback(request: Request) -> Response:
    return await _scope_action(request, "rollback")


@router.post("/config/promote")
async def config_promote(request: Request) -> Response:
    return await _scope_action(request, "promote")


@router.post("/config/abandon")
async def config_abandon(request: Request) -> Response:
    return await _scope_action(request, "abandon")


def fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


templates.env.filters["time"] = fmt_time


def code_spans(text: Any) -> Markup:
    """A message escaped as text, with its `backticked` commands shown as code (the escaping comes first, so a
    value holding markup still shows as text)."""
    return Markup(re.sub(r"`([^`<>]+)`", r"<code>\1</code>", str(escape(str(text)))))


templates.env.filters["code_spans"] = code_spans
