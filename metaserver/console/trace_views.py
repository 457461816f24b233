"""The Trace page: a message's lifecycle (produced, acked, spilled, replayed, consumed, processed, retried,
dead-lettered) by key or message id and time window, read from the pipeline's trace store without Spark
(``pipeline.trace_store.lookup``), with client, host and the time since the previous step."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from metaserver import pipeline_module
from metaserver.console.views import StoreUnavailable, _login_redirect, _page, _session, _svc, read_store, router


def _lookup(svc: Any, key: str, msg_id: str, topic: str, since: str) -> list[dict[str, Any]]:
    from metaserver.routes_observe import parse_since

    rows = read_store(svc, "trace_store:lookup", key or None, msg_id=msg_id or None, topic=topic or None,
                      since=parse_since(since), limit=2000)
    timelines = pipeline_module("trace_store").timelines

    out = []
    for mid, steps in timelines(rows).items():
        first = steps[0].get("ts") or 0
        previous = first
        shown = []
        for step in steps:
            ts = step.get("ts") or previous
            shown.append({**step, "since_previous_ms": ts - previous, "since_first_ms": ts - first})
            previous = ts
        out.append({"msg_id": mid, "steps": shown, "kinds": [s.get("kind") for s in steps]})
    return out


@router.get("/trace")
async def trace_page(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    q = {k: request.query_params.get(k, "").strip()[:256] for k in ("key", "msg_id", "topic", "since")}
    q["since"] = q["since"] or "1h"
    messages, error = None, None
    if q["key"] or q["msg_id"]:
        try:
            messages = await run_in_threadpool(_lookup, _svc(request), q["key"], q["msg_id"], q["topic"], q["since"])
        except StoreUnavailable as exc:
            error = str(exc)
        except HTTPException as exc:  # a bad window (parse_since's message does not echo it)
            error = str(exc.detail)
    return _page(request, "trace.html", sess, q=q, messages=messages, error=error)
