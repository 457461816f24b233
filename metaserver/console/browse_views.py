"""Browsing a topic's messages in the console: a partition from an offset or a time, or a key in a time window
(``metaserver.kafka.browse``, bounded). Seeing values is a right (``--console-values-role``, operators by default:
viewers see offsets, times, keys, headers and sizes only); the topic's masking rules apply to what is shown and
exported; exporting the selection as JSON lines is a right of its own (``--console-export-role``). Every
browse and export is audited."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_patterns
from ykafka.timestamps import parse_ms

from ..kafka import browse
from .brokers import connection
from .views import Denied, _audit, _page, _query, _signed_in, _svc, router

FIELDS = ("cluster", "partition", "offset", "since", "until", "key", "limit", "format")


def query_from(q: dict[str, str]) -> browse.Query:
    """The form's read; BrowseRefused saying what is wrong (never echoing the input)."""
    def number(name: str) -> int | None:
        if not q.get(name):
            return None
        try:
            return int(q[name])
        except ValueError:
            raise browse.BrowseRefused(f"{name} must be a whole number") from None

    def when(name: str) -> int | None:
        if not q.get(name):
            return None
        try:
            return parse_ms(q[name])
        except ValueError as exc:
            raise browse.BrowseRefused(f"{name}: {exc}") from None

    return browse.Query(partition=number("partition"), offset=number("offset"), since_ms=when("since"),
                        until_ms=when("until"), key=q.get("key") or None, limit=number("limit") or 50)


def _read(svc: Any, topic: str, q: dict[str, str], values: bool) -> tuple[str, dict[str, Any]]:
    query = query_from(q)
    try:
        cluster, props = connection(svc, q.get("cluster") or None)
    except LookupError as exc:
        raise browse.BrowseRefused(str(exc.args[0])) from None
    masks = browse.masks_for(browse.load_masks(svc.settings.console_masks), topic)
    return cluster, browse.read(props, topic, query, values=values, fmt=q.get("format") or "text", masks=masks)


def _audit_read(svc: Any, sess: Any, action: str, topic: str, cluster: str, q: dict[str, str],
                result: dict[str, Any]) -> None:
    _audit(svc, sess, action, f"topic:{topic}@{cluster}", None,
           {**{k: v for k, v in q.items() if v and k != "cluster"}, "messages": len(result["messages"]),
            "values": result["values"], "masked": bool(result["masks"])})


@router.get("/topics/{topic}/messages")
async def browse_page(request: Request, topic: str) -> Response:
    sess = _signed_in(request)
    if acl_patterns.name_problem(topic):
        return _page(request, "error.html", sess, status_code=400, message="Not a valid topic name.")
    svc = _svc(request)
    q = _query(request, FIELDS)
    values = sess.can(svc.settings.console_values_role)
    ctx: dict[str, Any] = {"topic": topic, "q": q, "result": None, "error": None, "values": values,
                           "can_export": sess.can(svc.settings.console_export_role), "formats": browse.FORMATS}
    if q["offset"] or q["since"] or q["key"]:
        try:
            ctx["cluster"], ctx["result"] = await run_in_threadpool(_read, svc, topic, q, values)
            _audit_read(svc, sess, "topic.browse", topic, ctx["cluster"], q, ctx["result"])
        except browse.BrowseRefused as exc:
            ctx["error"] = str(exc)
    return _page(request, "browse.html", sess, status_code=400 if ctx["error"] else 200, **ctx)


@router.get("/topics/{topic}/export")
async def browse_export(request: Request, topic: str) -> Response:
    """The selection as JSON lines (one message a line, masked as shown), for the export right."""
    sess = _signed_in(request)
    svc = _svc(request)
    if not sess.can(svc.settings.console_export_role):
        raise Denied()
    if acl_patterns.name_problem(topic):
        return _page(request, "error.html", sess, status_code=400, message="Not a valid topic name.")
    q = _query(request, FIELDS)
    try:
        cluster, result = await run_in_threadpool(_read, svc, topic, q, sess.can(svc.settings.console_values_role))
    except browse.BrowseRefused as exc:
        return _page(request, "error.html", sess, status_code=400, message=f"Not exported: {exc}")
    _audit_read(svc, sess, "topic.export", topic, cluster, q, result)
    body = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in result["messages"])
    return Response(body, media_type="application/x-ndjson",
                    headers={"Content-Disposition": f'attachment; filename="{topic}.jsonl"'})
