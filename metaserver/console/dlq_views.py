"""The DLQ page: a consumer group's dead letters for a topic (``dlq_topic(group, topic)``) with their failure
headers, and replay of all of them to the original topic (``ykafka.admin.dlq.replay``: progress is the
committed position of ``ykafka-dlq-replay.<group>``, so "pending" is what no replay has re-published yet)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ykafka import headers as H
from ykafka.catalog import Scope
from ykafka.errors import InvalidConfigValue

from ..domain import audit
from ..storage import db
from .brokers import connection
from .views import _audit, _form, _page, _query, _signed_in, _svc, router

PEEK = 50
COUNT_CAP = 100_000


def _row(msg: Any) -> dict[str, Any]:
    raw_headers = msg.headers() or []
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    hdrs = {k: _text(v) for k, v in pairs}
    return {"partition": msg.partition(), "offset": msg.offset(), "key": _text(msg.key())[:200],
            "value": _text(msg.value())[:300], "error": hdrs.get(H.ERROR, ""), "failed_at": hdrs.get(H.FAILED_AT, ""),
            "attempt": hdrs.get(H.ATTEMPT, ""),
            "original": f"{hdrs.get(H.ORIGINAL_TOPIC, '')}/{hdrs.get(H.ORIGINAL_PARTITION, '')}@"
                        f"{hdrs.get(H.ORIGINAL_OFFSET, '')}"}


def _text(raw: str | bytes | None) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")


def _check_names(group: str, topic: str) -> None:
    for kind, name in (("group", group), ("topic", topic)):
        try:
            Scope.parse(f"{kind}:{name}")
        except ValueError as exc:
            raise InvalidConfigValue(kind, name, str(exc)) from None


def peek(props: dict[str, Any], group: str, topic: str) -> dict[str, Any]:
    """Pending count per partition (end − replay position) and the first ``PEEK`` pending messages."""
    from ykafka.admin.dlq import replay_group
    from ykafka.consumer.retry import dlq_topic
    from ykafka.transport import RawConsumer, TopicPartition

    dlq = dlq_topic(group, topic)
    consumer = RawConsumer({**props, "group.id": replay_group(group), "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "enable.partition.eof": False})
    try:
        meta = consumer.list_topics(dlq, timeout=5).topics.get(dlq)
        if meta is None or meta.error is not None or not meta.partitions:
            return {"dlq": dlq, "exists": False, "pending": 0, "messages": []}
        parts = sorted(meta.partitions)
        committed = consumer.committed([TopicPartition(dlq, p) for p in parts], timeout=5)
        starts, pending = {}, 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(dlq, tp.partition), timeout=5)
            starts[tp.partition] = tp.offset if tp.offset is not None and tp.offset >= 0 else low
            pending += max(0, high - starts[tp.partition])
        messages: list[dict[str, Any]] = []
        # counted by reading, even when the watermarks say 0 (a broker's high watermark can lag a freshly
        # written batch); bounded in time and count
        counted = 0
        consumer.assign([TopicPartition(dlq, p, starts[p]) for p in parts])
        deadline, idle_since = time.monotonic() + 5, time.monotonic()
        while counted < COUNT_CAP and time.monotonic() < deadline and time.monotonic() - idle_since < 0.5:
            batch = [m for m in consumer.consume(500, 0.1) if m.error() is None]
            if batch:
                idle_since = time.monotonic()
            counted += len(batch)
            for msg in batch[:max(0, PEEK - len(messages))]:
                messages.append(_row(msg))
        pending = max(pending, counted)
        return {"dlq": dlq, "exists": True, "pending": pending, "messages": messages}
    finally:
        consumer.close()


def _replayed(svc: Any, dlq: str) -> dict[str, dict[str, Any]]:
    """``"partition@offset"`` -> who re-published it and when, for dead letters replayed one by one (from the
    audit log: their position cannot move past them while an older one is left)."""
    with db.read(svc.engine) as conn:
        rows = audit.query(conn, action="dlq.replay", target=dlq, limit=200)
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        for ref in (row.get("after") or {}).get("offsets") or []:
            out.setdefault(str(ref), {"by": row["operator"], "at": row["at"]})
    return out


def _refs(values: list[str]) -> list[tuple[int, int]] | None:
    """``partition@offset`` values as pairs; None when one is not that."""
    out = []
    for value in values[:MAX_SELECTED]:
        part, sep, offset = value.partition("@")
        if not sep or not part.isdigit() or not offset.isdigit():
            return None
        out.append((int(part), int(offset)))
    return out


MAX_SELECTED = 1000


@router.get("/dlq")
async def dlq_page(request: Request) -> Response:
    sess = _signed_in(request)
    q = _query(request, ("group", "topic", "cluster"))
    ctx: dict[str, Any] = {"q": q, "view": None, "error": None, "replayed": request.query_params.get("replayed")}
    if q["group"] and q["topic"]:
        try:
            _check_names(q["group"], q["topic"])
            ctx["cluster"], props = connection(_svc(request), q["cluster"] or None)
            ctx["view"] = await run_in_threadpool(peek, props, q["group"], q["topic"])
            done = _replayed(_svc(request), ctx["view"]["dlq"])
            for m in ctx["view"]["messages"]:
                m["ref"] = f"{m['partition']}@{m['offset']}"
                m["replayed"] = done.get(m["ref"])
            ctx["view"]["replayed_count"] = sum(1 for m in ctx["view"]["messages"] if m["replayed"])
        except (InvalidConfigValue, LookupError) as exc:
            ctx["error"] = str(exc.reason if isinstance(exc, InvalidConfigValue) else exc.args[0])
    return _page(request, "dlq.html", sess, can_replay=sess.can("operator"), chunk=CHUNK, **ctx)


#: the page re-publishes a selection this many messages per request, showing progress between requests
CHUNK = 2


@router.post("/dlq/replay")
async def dlq_replay(request: Request) -> Response:
    """Re-publish the selected dead letters (``offsets``: ``partition@offset``, repeated), or every pending one
    but those already re-published one by one, to the topic; waits for the broker's acknowledgements. With
    ``Accept: application/json`` it answers the counts (the page's progress) instead of redirecting."""
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    group, topic = form.get("group", ""), form.get("topic", "")
    svc = _svc(request)
    wants_json = "application/json" in request.headers.get("accept", "")
    selected = [str(v) for v in (await request.form()).getlist("offsets")]
    only = _refs(selected) if selected else None
    try:
        _check_names(group, topic)
        cluster, props = connection(svc, form.get("cluster") or None)
        if selected and only is None:
            raise LookupError("offsets: each one partition@offset")
    except (InvalidConfigValue, LookupError) as exc:
        message = str(exc.reason if isinstance(exc, InvalidConfigValue) else exc.args[0])
        if wants_json:
            return JSONResponse({"detail": message}, status_code=422)
        return _page(request, "error.html", sess, status_code=422, message=message)
    from ykafka.admin.dlq import replay
    from ykafka.consumer.retry import dlq_topic

    done = set(_refs(list(_replayed(svc, dlq_topic(group, topic)))) or [])
    if only is not None:
        only = [ref for ref in only if ref not in done]
    result = await run_in_threadpool(replay, props, group, topic, None, None, False, 1.0, None,
                                     only, [] if only is not None else done)
    after: dict[str, Any] = {"replayed": result.replayed, "failed": result.failed, "cluster": cluster}
    if only is not None:
        after["offsets"] = [f"{p}@{o}" for p, o in only]
    _audit(svc, sess, "dlq.replay", result.dlq, None, after)
    if wants_json:
        return JSONResponse({"replayed": result.replayed, "failed": result.failed, "asked": len(only or [])})
    return RedirectResponse(f"/console/dlq?group={quote(group)}&topic={quote(topic)}&cluster={quote(cluster)}"
                            f"&replayed={result.replayed}", status_code=303)
