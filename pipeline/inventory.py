"""Client inventory (batch, Spark): who runs which ykafka / librdkafka version where, for upgrade planning.

Reads the client-event history in the store, keeps each client's latest report with its first and last
time seen, writes ``inventory/data.parquet`` and returns the rows plus a summary per cluster and versions.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .store import Store, days_between

COLUMNS = ("cluster", "app", "client_id", "role", "group", "topics", "ip", "hostname", "pid", "ykafka_version",
           "confluent_kafka_version", "librdkafka_version", "state", "first_seen", "last_seen")


def build(spark: Any, store: Store, since: dt.timedelta = dt.timedelta(days=7),
          now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Latest report per client seen in ``since``; also replaces ``inventory/`` in the store."""
    from pyspark.sql import functions as F

    now = now or dt.datetime.now(dt.UTC)
    paths = [store.uri("clients", f"date={d}") for d in days_between(now - since, now)]
    paths = [p for p, d in zip(paths, days_between(now - since, now), strict=True)
             if store.files("clients", [f"date={d}"])]
    if not paths:
        return []
    history = spark.read.option("basePath", store.uri("clients")).parquet(*paths).where(
        F.col("ts") >= int((now - since).timestamp() * 1000))
    latest = history.groupBy("client_id").agg(
        F.max_by(F.struct(*[F.col(c) for c in COLUMNS if c not in ("client_id", "first_seen", "last_seen")]),
                 F.col("ts")).alias("r"),
        # a closing client may report no topics any more: keep the last topics it reported
        F.max_by(F.col("topics"), F.when(F.coalesce(F.col("topics"), F.lit("")) != "", F.col("ts"))).alias("t"),
        F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
    flat = latest.select("client_id", "r.*", "t", "first_seen", "last_seen").withColumn(
        "topics", F.coalesce(F.col("t"), F.col("topics"))).select(*COLUMNS).orderBy("cluster", "app", "client_id")
    table = flat.toArrow()
    store.replace(table, "inventory")
    return list(table.to_pylist())


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Client counts per (cluster, ykafka version, librdkafka version), live ones apart."""
    cells: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row.get("cluster"), row.get("ykafka_version"), row.get("librdkafka_version"))
        cell = cells.setdefault(key, {"cluster": key[0], "ykafka_version": key[1], "librdkafka_version": key[2],
                                      "clients": 0, "live": 0, "apps": set(), "groups": set()})
        cell["clients"] += 1
        cell["live"] += row.get("state") != "closed"
        cell["apps"].add(row.get("app") or "")
        if row.get("group"):
            cell["groups"].add(row["group"])
    return [{**c, "apps": sorted(c["apps"]), "groups": sorted(c["groups"])}
            for _k, c in sorted(cells.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]


def read(store: Store) -> list[dict[str, Any]]:
    """The last inventory written (no Spark)."""
    table = store.read("inventory")
    return list(table.to_pylist()) if table.num_rows else []
