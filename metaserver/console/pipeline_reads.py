"""What console pages read from the pipeline's store, through the observe API's checks: rows, or
StoreUnavailable with the reason (never the store's path or URI) and what to run when no pipeline ran yet."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import pipeline_module
from ..services import Services


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

    from ..routes import observe as routes_observe

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

    from ..routes import observe as routes_observe

    store = pipeline_store(svc)
    module, _, name = reader.partition(":")
    try:
        return routes_observe._read(getattr(pipeline_module(module), name), store, *args, **kwargs)
    except HTTPException as exc:
        raise StoreUnavailable(_without_location(svc, str(exc.detail))) from None




#: the traffic charts of a topic's and a client's page: metric -> (chart, series label, per second?)
CHART_SERIES = {"send.msgs": ("rates", "produced / s", True), "consume.msgs": ("rates", "consumed / s", True),
                "send.latency_ms": ("latency", "send p99 (ms)", False),
                "send.errors": ("errors", "send errors / min", False),
                "consume.errors": ("errors", "consume errors / min", False)}


def traffic_charts(svc: Services, since: dt.timedelta, *, topic: str | None = None, client_id: str | None = None
                   ) -> tuple[dict[str, dict[str, list[list[float]]]], str | None]:
    """Per minute over ``since``, from the pipeline's aggregates of the metrics of every client of ``topic`` or
    of one client (``client_id``): messages produced and consumed per second, the p99 send latency, send and
    consume errors; ({}, why) when there is no pipeline store."""
    try:
        rows = read_store(svc, "aggregates:read_aggregates", since, names=list(CHART_SERIES), topic=topic,
                          client_id=client_id, by=("name",))
    except StoreUnavailable as exc:
        return {}, str(exc)
    charts: dict[str, dict[str, list[list[float]]]] = {"rates": {}, "latency": {}, "errors": {}}
    for row in sorted(rows, key=lambda r: r.get("window_start") or 0):
        chart, label, per_s = CHART_SERIES.get(str(row.get("name")), ("", "", False))
        value = row.get("p99") if chart == "latency" else row.get("value")
        if chart and value is not None and row.get("window_start") is not None:
            charts[chart].setdefault(label, []).append([row["window_start"], round(value / 60.0, 3) if per_s
                                                        else value])
    return charts, None
