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


def partials(metrics: Any, window_s: int = WINDOW_S) -> Any:
    """Spark: partial aggregates of one micro-batch of metric events, per window and dimension."""
    from pyspark.sql import functions as F

    window_ms = window_s * 1000
    count = F.coalesce(F.col("count"), F.lit(0))
    df = metrics.withColumn("window_start", (F.floor(F.col("ts") / window_ms) * window_ms).cast("bigint"))
    lag = F.col("name") == F.lit(str(MetricName.LAG))
    out = df.groupBy("window_start", *GROUP_COLS).agg(
        F.sum(F.when(lag, F.lit(0)).otherwise(count)).cast("bigint").alias("count"),
        F.sum(F.coalesce(F.col("sum"), F.lit(0.0))).alias("sum"),
        F.max(F.when(lag, F.col("value")).otherwise(F.col("max"))).alias("max"),
        F.sum(F.col("p50") * count).alias("p50w"),
        F.sum(F.col("p95") * count).alias("p95w"),
        F.sum(F.col("p99") * count).alias("p99w"),
        F.sum(F.when(F.col("p50").isNotNull(), count).otherwise(F.lit(0))).cast("bigint").alias("pcount"),
        F.max("p99").alias("p99_max"),
        F.sum(F.when(lag, F.lit(None)).otherwise(F.col("value"))).alias("value"),
        F.count(F.lit(1)).cast("bigint").alias("events"),
    )
    return out.withColumn("date", F.date_format(F.timestamp_millis(F.col("window_start")), "yyyy-MM-dd"))


def write_batch(store: Store, metrics: Any, batch_id: int, window_s: int = WINDOW_S) -> int:
    return store.write(partials(metrics, window_s).toArrow(), "aggregates", ["date"], batch_id, "agg")


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
