"""Aggregates: per window and topic / group / client, send and consume latency percentiles, error rates, lag.

Each micro-batch writes *partial* aggregates of the windows its events fall in (count, sum, max,
count-weighted percentile sums, counter totals); :func:`read_aggregates` merges the partials of a window
at read time. Partials merge exactly for counts, sums, maxima and rates; percentiles are the count-weighted
mean of the per-interval percentiles clients reported (librdkafka windows and SDK reservoirs), the usual
approximation when only summaries travel (``p99_max``, the worst reported p99, is exact).

MetaServer contract::

    read_aggregates(store_root, since=timedelta(minutes=15), until=None, *, names=None, topic=None,
                    group=None, client_id=None, by=("name", "topic", "group"), window_s=60) -> list[dict]

Each dict: ``window_start`` (epoch ms), the ``by`` fields, ``count``, ``mean``, ``max``, ``p50``, ``p95``,
``p99``, ``p99_max``, ``value`` (counter total / max lag) and, for ``*.errors`` windows, nothing more:
use :func:`error_rates` for errors / messages per topic and window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from ykafka.events import MetricName

from .store import Store, days_between

WINDOW_S = 60
GROUP_COLS = ("name", "topic", "group", "client_id", "cluster")


#: the partials' columns and Arrow types, in the order every aggregates file has them
PARTIAL_TYPES: tuple[tuple[str, str], ...] = (
    ("window_start", "int64"), *((c, "string") for c in GROUP_COLS), ("count", "int64"), ("sum", "float64"),
    ("max", "float64"), ("p50w", "float64"), ("p95w", "float64"), ("p99w", "float64"), ("pcount", "int64"),
    ("p99_max", "float64"), ("value", "float64"), ("events", "int64"), ("date", "string"))


def partials(metrics: Any, window_s: int = WINDOW_S) -> Any:
    """Partial aggregates of one micro-batch of metric events (an Arrow table), per window and dimension.

    Computed with pyarrow on the table the micro-batch already collected for the metric history, not as a
    second Spark job: that job cached the decoded batch, shuffled it and started its own tasks, and cost the
    metrics micro-batch more than the few thousand rows it groups (docs/benchmarks.md, issue 39)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    window_ms = window_s * 1000
    n = metrics.num_rows
    col = {name: metrics.column(name) if name in metrics.column_names else pa.nulls(n, typ)
           for name, typ in (("ts", pa.int64()), ("name", pa.string()), ("count", pa.int64()),
                             ("sum", pa.float64()), ("max", pa.float64()), ("value", pa.float64()),
                             ("p50", pa.float64()), ("p95", pa.float64()), ("p99", pa.float64()),
                             *((c, pa.string()) for c in GROUP_COLS if c != "name"))}
    count = pc.fill_null(pc.cast(col["count"], pa.int64()), 0)
    lag = pc.fill_null(pc.equal(col["name"], str(MetricName.LAG)), False)
    window_start = pc.multiply(pc.cast(pc.floor(pc.divide(pc.cast(col["ts"], pa.float64()), float(window_ms))),
                                       pa.int64()), window_ms)
    zero = pa.scalar(0, pa.int64())
    work = pa.table({
        "window_start": window_start, **{c: col[c] for c in GROUP_COLS},
        "count": pc.if_else(lag, zero, count),
        "sum": pc.fill_null(pc.cast(col["sum"], pa.float64()), 0.0),
        "max": pc.if_else(lag, col["value"], col["max"]),
        **{f"{p}w": pc.multiply(pc.cast(col[p], pa.float64()), pc.cast(count, pa.float64()))
           for p in ("p50", "p95", "p99")},
        "pcount": pc.if_else(pc.is_valid(col["p50"]), count, zero),
        "p99_max": col["p99"],
        "value": pc.if_else(lag, pa.scalar(None, pa.float64()), col["value"]),
        "events": pa.repeat(pa.scalar(1, pa.int64()), n),
    })
    keys = ["window_start", *GROUP_COLS]
    how = {"count": "sum", "sum": "sum", "max": "max", "p50w": "sum", "p95w": "sum", "p99w": "sum", "pcount": "sum",
           "p99_max": "max", "value": "sum", "events": "sum"}
    # sums and maxima skip nulls and are null when every input is (as Spark's sum / max)
    out = work.group_by(keys, use_threads=False).aggregate([(c, f) for c, f in how.items()])
    out = out.rename_columns([{f"{c}_{f}": c for c, f in how.items()}.get(c, c) for c in out.column_names])
    date = pc.cast(pc.cast(pc.cast(out.column("window_start"), pa.timestamp("ms")), pa.date32()), pa.string())
    out = out.append_column("date", date)
    # the schema Spark's groupBy wrote before (``events``, a count, is never null), so old and new files read as one
    schema = pa.schema([pa.field(name, typ, nullable=name != "events") for name, typ in PARTIAL_TYPES])
    return pa.Table.from_arrays([pc.cast(out.column(f.name), f.type) for f in schema], schema=schema)


def write_batch(store: Store, metrics: Any, batch_id: int, window_s: int = WINDOW_S) -> int:
    """Write one micro-batch's partials; ``metrics`` is an Arrow table of metric events (or a Spark DataFrame of
    them, collected here). Returns the partial rows written."""
    table = metrics if hasattr(metrics, "num_rows") else metrics.toArrow()
    return store.write(partials(table, window_s), "aggregates", ["date"], batch_id, "agg")


def read_aggregates(store: Store | str, since: dt.timedelta = dt.timedelta(minutes=15),
                    until: dt.datetime | None = None, *, names: Sequence[str] | None = None,
                    topic: str | None = None, group: str | None = None, client_id: str | None = None,
                    by: Sequence[str] = ("name", "topic", "group"), window_s: int = WINDOW_S,
                    whole_range: bool = False) -> list[dict[str, Any]]:
    """Merged aggregates per window (or over the whole range with ``whole_range``); see module docstring."""
    import pyarrow.compute as pc

    store = Store(store) if isinstance(store, str) else store
    end = until or dt.datetime.now(dt.UTC)
    start = end - since
    expr = (pc.field("window_start") >= int(start.timestamp() * 1000) // (window_s * 1000) * window_s * 1000) & (
        pc.field("window_start") <= int(end.timestamp() * 1000))
    for name, value in (("topic", topic), ("group", group), ("client_id", client_id)):
        if value is not None:
            expr = expr & (pc.field(name) == value)
    if names:
        expr = expr & pc.field("name").isin(list(names))
    table = store.read("aggregates", [f"date={d}" for d in days_between(start, end)], filter=expr)
    if table.num_rows == 0:
        return []
    keys = list(by) if whole_range else ["window_start", *by]
    merged = table.group_by(keys, use_threads=False).aggregate([
        ("count", "sum"), ("sum", "sum"), ("max", "max"), ("p50w", "sum"), ("p95w", "sum"), ("p99w", "sum"),
        ("pcount", "sum"), ("p99_max", "max"), ("value", "sum"), ("events", "sum"),
    ])
    out = []
    for row in merged.to_pylist():
        count = row["count_sum"] or 0
        pcount = row["pcount_sum"] or 0
        item = {k: row[k] for k in keys}
        is_lag = item.get("name") == MetricName.LAG
        item.update({
            "count": count,
            "mean": round((row["sum_sum"] or 0.0) / count, 3) if count and pcount and not is_lag else None,
            "max": row["max_max"],
            "p50": round(row["p50w_sum"] / pcount, 3) if pcount else None,
            "p95": round(row["p95w_sum"] / pcount, 3) if pcount else None,
            "p99": round(row["p99w_sum"] / pcount, 3) if pcount else None,
            "p99_max": row["p99_max_max"],
            "value": row["max_max"] if is_lag else row["value_sum"],
            "events": row["events_sum"],
        })
        out.append(item)
    out.sort(key=lambda r: tuple("" if r.get(k) is None else r.get(k) for k in keys))
    return out


def error_rates(store: Store | str, since: dt.timedelta = dt.timedelta(minutes=15),
                until: dt.datetime | None = None, *, side: str = "send", whole_range: bool = False,
                window_s: int = WINDOW_S) -> list[dict[str, Any]]:
    """Errors / messages per topic (and window): ``side`` is ``send`` or ``consume``."""
    errors_name, msgs_name = f"{side}.errors", f"{side}.msgs"
    rows = read_aggregates(store, since, until, names=[errors_name, msgs_name], by=("name", "topic"),
                           window_s=window_s, whole_range=whole_range)
    cells: dict[tuple[Any, ...], dict[str, float]] = {}
    for row in rows:
        cell = cells.setdefault((row.get("window_start"), row.get("topic")), {"errors": 0.0, "msgs": 0.0})
        cell["errors" if row["name"] == errors_name else "msgs"] += float(row["value"] or 0)
    out = []
    for (window_start, topic_name), cell in sorted(cells.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or "")):
        total = cell["errors"] + cell["msgs"]
        out.append({"window_start": window_start, "topic": topic_name, "side": side, "errors": cell["errors"],
                    "msgs": cell["msgs"], "rate": round(cell["errors"] / total, 6) if total else 0.0})
    return out
