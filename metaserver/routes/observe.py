"""Observability API: alerts the pipeline raises, and the pipeline's aggregates, under ``/v1/admin``.

* ``POST /v1/admin/alerts`` receives what ``pipeline.alerts.AlertManager`` posts (its ``__ykafka_alerts``
  event, evidence as an object). The alert ``id`` is stable per (rule, subject, level), so a re-post, e.g.
  after a pipeline restart, updates the stored row (last seen, level, status, evidence) instead of adding one.
* ``GET /v1/admin/alerts`` lists them, newest first.
* ``GET /v1/admin/aggregates`` (and ``/aggregates/errors``) reads the pipeline's Parquet store with
  ``pipeline.aggregates`` (pyarrow, no Spark). pyarrow is imported on first use, so a MetaServer without the
  ``pipeline`` extra runs and answers these two with 503 and what to install.

Admin auth as every ``/v1/admin`` route. Alerts are data, not configuration: they are logged, not audited.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from typing import Any, Literal

import structlog
from fastapi import APIRouter, Depends, HTTPException, Query, Response
from sqlalchemy import RowMapping, select

from .. import pipeline_module
from ..schemas import AlertIn
from ..services import Services, services
from ..storage import db
from ..storage.models import alerts
from .admin import operator

log = structlog.get_logger("metaserver.observe")

router = APIRouter(prefix="/v1/admin", tags=["observability"], dependencies=[Depends(operator)])

MAX_SINCE = dt.timedelta(days=366)
AGGREGATE_DIMENSIONS = ("name", "topic", "group", "client_id", "cluster")
INSTALL_HINT = "pip install 'ykafka-server[pipeline]'"


def parse_since(text: str, field: str = "since") -> dt.timedelta:
    """A look-back like ``90s``, ``15m``, ``1h``, ``2d`` (the pipeline's syntax), or 422 naming ``field``."""
    parse_duration = pipeline_module("store").parse_duration  # stdlib only; pyarrow is not needed to parse

    try:
        span = parse_duration(text)
    except ValueError:
        span = dt.timedelta(0)
    if span <= dt.timedelta(0) or span > MAX_SINCE:  # the input is not echoed back
        raise HTTPException(status_code=422, detail=f"{field}: use a positive duration of at most 366d, "
                                                    "a number with s, m, h, d or w, e.g. 90s, 15m, 1h, 2d")
    return span


# --- alerts ----------------------------------------------------------------------------------


def alert_json(row: RowMapping) -> dict[str, Any]:
    return {"id": row["id"], "rule": row["rule"], "level": row["level"], "status": row["status"],
            "topic": row["topic"], "group": row["group_id"], "partition": row["partition"],
            "client_id": row["client_id"], "reason": row["reason"], "evidence": row["evidence"], "ts": row["ts"],
            "first_seen": row["first_seen"], "last_seen": row["last_seen"], "posts": row["posts"],
            "reported_by": row["reported_by"]}


@router.post("/alerts", status_code=201, responses={200: {"description": "an alert with this id was updated"}})
def post_alert(body: AlertIn, response: Response, who: str = Depends(operator),
               svc: Services = Depends(services)) -> dict[str, Any]:
    """Store one alert: 201 when its id is new, 200 when it updated the stored one.

    A re-post carrying an older ``ts`` than the stored judgement (a late duplicate) only bumps
    ``last_seen`` and ``posts``; it never rolls the level, status or evidence back.
    """
    now = time.time()
    judged = {"rule": body.rule, "level": body.level, "status": body.status, "topic": body.topic,
              "group_id": body.group, "partition": body.partition, "client_id": body.client_id,
              "reason": body.reason, "evidence": body.evidence, "ts": body.ts, "reported_by": who}
    with db.write(svc.engine) as conn:
        stored = conn.execute(select(alerts.c.ts).where(alerts.c.id == body.id)).first()
        update: dict[str, Any] = {"last_seen": now, "posts": alerts.c.posts + 1}
        if stored is None or body.ts >= stored.ts:
            update.update(judged)
        db.upsert(conn, alerts, {"id": body.id, **judged, "first_seen": now, "last_seen": now, "posts": 1},
                  ["id"], update=update)
        row = conn.execute(select(alerts).where(alerts.c.id == body.id)).mappings().one()
    response.status_code = 201 if stored is None else 200
    log.info("alert received", id=body.id, rule=body.rule, level=body.level, status=body.status,
             topic=body.topic, group=body.group, partition=body.partition, new=stored is None, operator=who)
    return alert_json(row)


@router.get("/alerts")
def list_alerts(level: list[str] | None = Query(default=None, description="repeatable; WARN, ERR, STALL, …"),
                rule: str | None = None, status: Literal["firing", "resolved"] | None = None,
                topic: str | None = None, group: str | None = None, client: str | None = None,
                since: str | None = Query(default=None, description="last seen within, e.g. 15m, 1h, 2d"),
                limit: int = Query(default=100, ge=1, le=10000),
                svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """Stored alerts, most recently seen first."""
    stmt = select(alerts).order_by(alerts.c.last_seen.desc(), alerts.c.id).limit(limit)
    if level:
        stmt = stmt.where(alerts.c.level.in_([v.strip().upper() for item in level for v in item.split(",")
                                              if v.strip()]))
    if since is not None:
        stmt = stmt.where(alerts.c.last_seen >= time.time() - parse_since(since).total_seconds())
    for column, value in ((alerts.c.rule, rule), (alerts.c.status, status), (alerts.c.topic, topic),
                          (alerts.c.group_id, group), (alerts.c.client_id, client)):
        if value is not None:
            stmt = stmt.where(column == value)
    with db.read(svc.engine) as conn:
        return [alert_json(row) for row in conn.execute(stmt).mappings()]


# --- aggregates ------------------------------------------------------------------------------


def _store(svc: Services) -> Any:
    """The pipeline store (``pipeline.store.Store``), or 503 saying what is missing."""
    root = svc.settings.pipeline_store
    if not root:
        raise HTTPException(status_code=503, detail=(
            "no pipeline store configured: start the MetaServer with --pipeline-store PATH_OR_URI "
            "(env YKAFKA_MS_PIPELINE_STORE, setting pipeline_store)"))
    try:
        import pyarrow  # noqa: F401 - the readers below need it

        Store = pipeline_module("store").Store
    except ImportError as exc:
        raise HTTPException(status_code=503, detail=(
            f"reading the pipeline store needs pyarrow, which is not installed ({exc}): {INSTALL_HINT}")) from None
    if "://" not in root and not os.path.isdir(os.path.expanduser(root)):
        raise HTTPException(status_code=503, detail=f"pipeline store {root!r} does not exist (has the pipeline run?)")
    return Store(root)


def _read(fn: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Run a store reader; an unreadable store is 502, non-finite numbers become null (JSON has none)."""
    import pyarrow as pa

    try:
        rows: list[dict[str, Any]] = fn(*args, **kwargs)
    except (OSError, pa.ArrowException) as exc:
        log.error("pipeline store read failed", error=str(exc))
        raise HTTPException(status_code=502, detail=f"cannot read the pipeline store: {exc}") from None
    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            for row in rows]


@router.get("/aggregates")
def get_aggregates(since: str = Query(default="15m", description="look-back, e.g. 90s, 15m, 1h, 2d"),
                   topic: str | None = None, group: str | None = None,
                   client: str | None = Query(default=None, description="client id"),
                   name: list[str] | None = Query(default=None, description="metric name(s), e.g. send.latency_ms"),
                   by: str = Query(default="name,topic,group",
                                   description=f"comma-separated dimensions of {', '.join(AGGREGATE_DIMENSIONS)}"),
                   whole_range: bool = Query(default=False, description="one row per group over the whole range"),
                   svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """Latency / counter / lag aggregates per window (60 s) from the pipeline store, merged at read time.

    Each row: ``window_start`` (epoch ms, absent with ``whole_range``), the ``by`` fields, ``count``,
    ``mean``, ``max``, ``p50``, ``p95``, ``p99``, ``p99_max``, ``value`` and ``events``
    (``pipeline.aggregates.read_aggregates``).
    """
    span = parse_since(since)
    dims = [d.strip() for d in by.split(",") if d.strip()]
    unknown = [d for d in dims if d not in AGGREGATE_DIMENSIONS]
    if not dims or unknown or len(set(dims)) != len(dims):
        raise HTTPException(status_code=422, detail=(
            f"by: {by!r} must name distinct dimensions among {', '.join(AGGREGATE_DIMENSIONS)}"))
    store = _store(svc)
    read_aggregates = pipeline_module("aggregates").read_aggregates

    return _read(read_aggregates, store, span, names=[n for n in name or [] if n] or None, topic=topic,
                 group=group, client_id=client, by=tuple(dims), whole_range=whole_range)


@router.get("/aggregates/errors")
def get_error_rates(since: str = Query(default="15m", description="look-back, e.g. 90s, 15m, 1h, 2d"),
                    side: Literal["send", "consume"] = "send", topic: str | None = None,
                    whole_range: bool = False, svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """Errors / (errors + messages) per topic and window (``pipeline.aggregates.error_rates``)."""
    span = parse_since(since)
    store = _store(svc)
    error_rates = pipeline_module("aggregates").error_rates

    rows = _read(error_rates, store, span, side=side, whole_range=whole_range)
    return [r for r in rows if topic is None or r["topic"] == topic]
