"""The Trace page: a message's lifecycle (produced, acked, spilled, replayed, consumed, processed, retried,
dead-lettered) by key or message id and time window, read from the pipeline's trace store without Spark
(``pipeline.trace_store.lookup``), with client, host and the time since the previous step."""

from __future__ import annotations

import time
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from .. import pipeline_module
from .pipeline_reads import StoreUnavailable, read_store
from .views import _page, _query, _signed_in, _svc, router


def _lookup(svc: Any, key: str, msg_id: str, topic: str, since: str) -> list[dict[str, Any]]:
    from ..routes.observe import parse_since

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


AUDIT_BUCKETS = {"1m": 60, "5m": 300, "10m": 600, "1h": 3600}
#: a bucket's shortfall counts as loss only after this long past its end (pipeline's default audit grace)
AUDIT_GRACE_S = 300


def completeness(svc: Any, topic: str, since: str, bucket: str) -> list[dict[str, Any]]:
    """The completeness audit of one topic (``pipeline.audit.buckets``): per bucket of message time and
    consumer group, messages acknowledged to producers vs received by the group, the missing ones' keys."""
    import datetime as dt

    from ..routes.observe import parse_since

    bucket_s = AUDIT_BUCKETS.get(bucket, 600)
    rows = read_store(svc, "audit:buckets", parse_since(since), dt.datetime.now(dt.UTC), bucket_s)
    now_ms = time.time() * 1000
    out = []
    for row in rows:
        if row.get("topic") != topic:
            continue
        closed = row["bucket_end"] + AUDIT_GRACE_S * 1000 <= now_ms
        state = "complete" if not row["missing"] else ("LOSS" if closed else "open")
        out.append({**row, "state": state, "examples": [key or mid for mid, key in row["missing_ids"][:5]]})
    return sorted(out, key=lambda r: (-r["bucket_start"], r["group"]))


@router.get("/trace")
async def trace_page(request: Request) -> Response:
    sess = _signed_in(request)
    q = _query(request, ("key", "msg_id", "topic", "since", "audit_topic", "audit_since", "bucket"), limit=256)
    q["since"] = q["since"] or "1h"
    q["audit_since"] = q["audit_since"] or "3h"
    q["bucket"] = q["bucket"] if q["bucket"] in AUDIT_BUCKETS else "10m"
    messages, audit, error = None, None, None
    try:
        if q["key"] or q["msg_id"]:
            messages = await run_in_threadpool(_lookup, _svc(request), q["key"], q["msg_id"], q["topic"], q["since"])
        if q["audit_topic"]:
            audit = await run_in_threadpool(completeness, _svc(request), q["audit_topic"], q["audit_since"],
                                            q["bucket"])
    except StoreUnavailable as exc:
        error = str(exc)
    except HTTPException as exc:  # a bad window (parse_since's message does not echo it)
        error = str(exc.detail)
    return _page(request, "trace.html", sess, q=q, messages=messages, audit=audit, error=error,
                 buckets=list(AUDIT_BUCKETS), grace_s=AUDIT_GRACE_S)
