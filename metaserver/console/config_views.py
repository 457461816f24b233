"""The console's hot-config page: key catalog, edit -> validate -> diff -> reach -> publish (through
``configwrites``, off the event loop), the live panel of who applied it, promote / abandon gray, roll back."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ykafka import catalog
from ykafka.catalog import Scope

from ..domain import audit, configwrites, hotconfig
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..rollouts import targeting
from ..services import Services
from ..storage import db
from . import loop, queries, users
from .views import _api, _form, _page, _session, _signed_in, _svc, log, required, router

# --- hot config: catalog, edit → validate → diff → reach → publish → live panel → promote / roll back ---

def _scope(text: str) -> Scope:
    return catalog.GLOBAL if text in ("", "global") else hotconfig.parse_scope(text)


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


def apollo_clients(svc: Services, tgt: loop.Target, main: Future[list[dict[str, Any]]] | None = None
                   ) -> list[dict[str, Any]]:
    """Third-party Apollo clients holding a release of the target's namespace (main line, and the gray
    branch's holders), from the config service's instance records; [] when it cannot tell. ``main``: the main
    line's records, asked already (:func:`config_panel` asks them with the release, not after it)."""
    if svc.apollo is None:
        return []
    try:
        found = main.result() if main is not None else svc.apollo.instances(tgt.namespace)
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
#: the main line's records asked before the release is read (config_panel): a pool of their own, since the
#: tasks on _INSTANCES wait for them (on one pool, four panels at once could wait for each other for ever)
_MAIN_INSTANCES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="console-main-instances")


def _live(svc: Services, scope: Scope, tgt: loop.Target, main: Future[list[dict[str, Any]]] | None = None
          ) -> dict[str, Any]:
    """The panel: counts per status over every live client the scope reaches (grouped in SQL), rows for the
    first hundred, the unsettled ones (pending, rejected) first since those need the operator. A scope
    reaching at most a panel's worth of clients is read in one query; a larger one reads only what the
    counts say is there (the clients holding the release with errors, a page of the pending ones)."""
    third_party = _INSTANCES.submit(apollo_clients, svc, tgt, main)  # HTTP: overlap it with the SQL below
    beat, kind = svc.settings.renew_interval, scope.kind.value
    counts = {"applied": 0, "pending": 0, "rejected": 0}
    total = 0
    keys = [k for k in (tgt.main_key, tgt.gray_key) if k]
    with db.read(svc.engine) as conn:
        def rejections_of(c: dict[str, Any]) -> list[dict[str, Any]]:
            return queries.rejections(conn, c["app_id"], c["client_id"])

        errored_holders = False  # any client holding a key in force and reporting errors
        try:
            summary = queries.reached_summary(conn, beat, kind, scope.name, tgt.namespace, tgt.gray_ips,
                                              tgt.gray_labels)
        except queries.Counting:  # just started, a large fleet's first count under way: a page of rows, no counts
            rows = loop.panel(queries.reached(conn, beat, kind, scope.name, tgt.namespace, limit=PANEL_ROWS),
                              scope, tgt, rejections_of)
            return {"rows": rows, "total": None, "counts": None, "counting": True}
        for held, has_errors, gray, n in summary:
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
            unsettled = queries.errored_holders(conn, beat, kind, scope.name, tgt.namespace, keys
                                                ) if errored_holders else []
            if counts["pending"]:
                unsettled += queries.pending_page(conn, beat, kind, scope.name, tgt.namespace, keys,
                                                  counts["pending"], total, PANEL_ROWS)
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
    sess = _signed_in(request)
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
    svc = _svc(request)
    try:
        scope = _scope(request.query_params.get("scope", "global"))
        # the main line's instance records asked with the release (they need only the namespace): the panel
        # waits for the slower of the config service's answers, not for each in turn
        main = _MAIN_INSTANCES.submit(svc.apollo.instances, scope.namespace()) if svc.apollo is not None else None
        _, tgt = _state(svc, scope)
    except (ConfigRejected, ApolloError):
        return Response(status_code=400)
    return _page(request, "panel.html", sess, panel=_live(svc, scope, tgt, main))


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
    clients it reaches."""
    return await off_loop(request, "operator", _preview, "scope", "changes")


async def off_loop(request: Request, role: str, handle: Callable[[Request, users.Session, dict[str, str]], Response],
                   *fields: str) -> Response:
    """A POSTed form (session, CSRF and role checked, ``fields`` present: else 400) handled on a worker thread:
    the config service and the database are asked off the event loop that serves grants and reports."""
    sess = _signed_in(request)
    form = required(await _form(request, sess, role), *fields)
    return await run_in_threadpool(handle, request, sess, form)


def _preview(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
    svc = _svc(request)
    try:
        scope = _scope(form["scope"])
        plan = _plan(form, svc)
        configwrites.preview(svc, plan)
        t = targeting.from_form(form)
        split = targeting.resolve(svc, plan, t) if t is not None else None
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
    if split is not None:  # a target: the instances it resolved to, split by app / cluster / host / version
        chosen = {c["client_id"] for c in split["clients"]}
        reach = [c for c in everyone if c.get("client_id") in chosen]
        gray_to = [split["target"]]
    else:
        reach = [c for c in everyone if loop.gray_match(c, plan.ips, plan.labels)]
        gray_to = [*(plan.ips or []), *(f"label {x}" for x in plan.labels or [])]
    return _config_page(request, sess, scope, form=form, preview={"changes": plan.changes, "reach": reach,
                                                                  "ips": gray_to, "split": split})


@router.post("/config/publish")
async def config_publish(request: Request) -> Response:
    """Publish what the preview showed, through the one config-write path (all or nothing, audited)."""
    return await off_loop(request, "operator", _publish, "scope", "changes")


def _publish(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
    try:
        scope = _scope(form["scope"])
        svc = _svc(request)
        t = targeting.from_form(form)
        configwrites.push(svc, _plan(form, svc), f"console:{sess.username}", form.get("comment", "")[:200],
                          target=(lambda p: targeting.resolve(svc, p, t)) if t is not None else None)
    except ConfigRejected as exc:
        return _config_page(request, sess, catalog.GLOBAL, status_code=422, form=form, errors=exc.errors)
    return RedirectResponse(f"/console/config?scope={scope}&published=1", status_code=303)


async def _scope_action(request: Request, action: str) -> Response:
    def handle(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
        try:
            scope = _scope(form["scope"])
            configwrites.scope_action(_svc(request), scope, action, f"console:{sess.username}")
        except ConfigRejected as exc:
            return _page(request, "error.html", sess, status_code=409, message="; ".join(exc.errors.values()))
        return RedirectResponse(f"/console/config?scope={scope}", status_code=303)

    return await off_loop(request, "operator", handle, "scope")


@router.post("/config/rollback")
async def config_rollback(request: Request) -> Response:
    return await _scope_action(request, "rollback")


@router.post("/config/promote")
async def config_promote(request: Request) -> Response:
    return await _scope_action(request, "promote")


@router.post("/config/abandon")
async def config_abandon(request: Request) -> Response:
    return await _scope_action(request, "abandon")


