"""Raw Kafka rows -> typed event rows, in the JVM (``from_json`` + positional columns, no Python per event).

A message value is an :mod:`ykafka.events` batch ``{"v", "type", "f", "r"}``. Rows are parsed as arrays of
strings (Spark keeps numbers' text and nested JSON as text for string elements) and cast by the position
:mod:`ykafka.events` defines. Batches of another type than asked for are dropped (a topic holds one type;
this guards against mistakes), so are values that are not batches.

Attribution (issue 37): on a secured cluster each app writes its events to its own topics
(``__ykafka_trace.<app>``, ``ykafka.events.app_topic``), which no other app's principal may write. An event
read from such a topic belongs to that app whatever its payload says: its ``app`` is the topic's, and an event
whose payload names another app is forged. It keeps that claim in :data:`FORGED` (null for every honest event,
and for every event of a shared topic, where nothing proves who wrote it); :func:`drop_forged` takes those rows
out of the table the store gets and counts them, so the pipeline's stores and the console never show app A's
forgery as app B's, and the pipeline raises an alert (``telemetry.forged``) naming A.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ykafka import events

ENVELOPE = "struct<v:int,type:string,f:array<string>,c:map<string,string>,r:array<array<string>>>"
#: the column holding a forged event's claimed app (null for the others); never stored
FORGED = "_forged_claim"
#: the app a per-app telemetry topic's name gives (Java regex: the shared names, the separator, the app id)
OWNER_PATTERN = "^(?:" + "|".join(t.replace(".", "\\.") for t in events.TELEMETRY_TOPICS) + ")" + \
    events.TELEMETRY_SEPARATOR.replace(".", "\\.") + "(.+)$"


def event_columns(kind: str) -> list[Any]:
    from pyspark.sql import functions as F

    cols = []
    for i, (name, typ) in enumerate(events.FIELDS[kind]):
        # short rows: trailing fields come from the envelope's constants ("c"); get() is null past the end
        item = F.coalesce(F.get(F.col("_row"), i), F.col("_c").getItem(name))
        if typ == "boolean":
            cols.append((F.lower(item) == F.lit("true")).alias(name))
        else:
            cols.append(item.try_cast(typ).alias(name))  # a malformed value becomes null, not a failed batch
    return cols


def decode(raw: Any, kind: str, keep_source: bool = False) -> Any:
    """Typed events of ``kind`` from a DataFrame of Kafka rows (``value`` binary), attributed to the app of the
    topic they came from (see the module docstring: a forged event's claim is in :data:`FORGED`)."""
    plan = _plan(kind, keep_source, "topic" in raw.columns)
    typed = raw.select(*plan.parsed).where(plan.wanted).select(*plan.exploded).select(*plan.typed)
    if plan.derived:
        typed = typed.withColumns(plan.derived).select(plan.both).select(*plan.unpacked)
    return typed.withColumns(plan.attributed).drop("_src_owner")


@dataclass(frozen=True)
class _Plan:
    """The Column expressions of :func:`decode` for one kind. Built in Python they are a few hundred calls into
    the JVM (0.6-0.75 s of a micro-batch's 0.8-1.0 s of plan building on the driver); they name columns, not a
    DataFrame, so they are built once a Spark context and reused by every batch (issue 39)."""

    parsed: list[Any]
    wanted: Any
    exploded: list[Any]
    typed: list[Any]
    derived: dict[str, Any]  # trace: the times and id derived from the row (empty for the other kinds)
    both: Any  # trace: [row] or [row, its produced step], exploded
    unpacked: list[Any]
    attributed: dict[str, Any]


#: (kind, keep_source, has_topic) -> (the Spark context they were built under, the expressions)
_PLANS: dict[tuple[str, bool, bool], tuple[Any, _Plan]] = {}


def _plan(kind: str, keep_source: bool, has_topic: bool) -> _Plan:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    key = (kind, keep_source, has_topic)
    found = _PLANS.get(key)
    if found is None or found[0] is not context:  # a new context: its own JVM objects
        found = _PLANS[key] = (context, _build(kind, keep_source, has_topic))
    return found[1]


def _build(kind: str, keep_source: bool, has_topic: bool) -> _Plan:
    from pyspark.sql import functions as F

    source = ["_src_topic", "_src_partition", "_src_offset"] if keep_source else []
    parsed = [
        *([F.col("topic").alias("_src_topic"), F.col("partition").alias("_src_partition"),
           F.col("offset").alias("_src_offset")] if keep_source else []),
        (F.regexp_extract(F.col("topic"), OWNER_PATTERN, 1) if has_topic else F.lit("")).alias("_src_owner"),
        F.from_json(F.col("value").cast("string"), ENVELOPE).alias("_b")]
    exploded = [*map(F.col, source), F.col("_src_owner"), F.col("_b.c").alias("_c"),
                F.explode(F.col("_b.r")).alias("_row")]
    typed = [*map(F.col, source), F.col("_src_owner"), *event_columns(kind)]
    names = [*source, "_src_owner", *(name for name, _ in events.FIELDS[kind])]
    derived: dict[str, Any] = {}
    both: Any = None
    unpacked: list[Any] = []
    if kind == "trace":
        # an acked row written without its times: sent at its create timestamp, acked latency_ms later
        # (events.derive_times); every derived value reads the row as written
        timeless = F.col("ts").isNull() & (F.col("kind") == F.lit(events.TraceKind.ACKED.value)) & \
            F.col("msg_ts").isNotNull()
        derived = {
            "sent_ts": F.when(timeless, F.col("msg_ts")).otherwise(F.col("sent_ts")),
            "ts": F.when(timeless, F.col("msg_ts") + F.floor(F.coalesce(F.col("latency_ms"), F.lit(0.0))))
            .otherwise(F.col("ts")),
            # no msg_id: the message is identified by its coordinates (rate-1.0 acks of producers without ids)
            "msg_id": F.coalesce(F.col("msg_id"), F.when(
                F.col("partition").isNotNull() & F.col("offset").isNotNull(),
                F.concat_ws("/", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))))}
        # acked / failed rows of the producer's delivery wrapper imply the produced step (events.sent_ts): both
        # come out of one explode over [row] or [row, produced], so the JSON is parsed once (a union of two
        # selections would parse every batch twice)
        row = F.struct(*[F.col(name) for name in names])
        types = dict(events.FIELDS["trace"])
        produced = F.struct(*[
            F.col("sent_ts").alias("ts") if name == "ts"
            else F.lit(events.TraceKind.PRODUCED.value).alias("kind") if name == "kind"
            else F.col(name) if name in events.PRODUCED_KEEPS or name.startswith("_src_")
            else F.lit(None).cast(types[name]).alias(name)
            for name in names])
        both = F.explode(F.when(F.col("sent_ts").isNotNull(), F.array(row, produced)).otherwise(F.array(row))) \
            .alias("_e")
        unpacked = [F.col(f"_e.{name}").alias(name) for name in names]
    # ``app`` := the topic's app on a per-app topic; FORGED := the payload's claim where it names another app (an
    # empty or missing claim is the topic's app's)
    owner, claimed = F.col("_src_owner"), F.col("app")
    per_app = owner != F.lit("")
    forged = per_app & claimed.isNotNull() & (claimed != F.lit("")) & (claimed != owner)
    attributed = {FORGED: F.when(forged, claimed), "app": F.when(per_app, owner).otherwise(claimed)}
    return _Plan(parsed, F.col("_b.type") == F.lit(kind), exploded, typed, derived, both, unpacked, attributed)


def drop_forged(table: Any) -> tuple[Any, dict[tuple[str, str], int]]:
    """(``table`` without its forged rows and without :data:`FORGED`, {(topic's app, claimed app): events}) of
    an Arrow table of decoded events: the rows the store gets, and what to count and alert on."""
    import pyarrow.compute as pc

    if FORGED not in table.column_names:
        return table, {}
    claims = table.column(FORGED)
    found: dict[tuple[str, str], int] = {}
    if claims.null_count < table.num_rows:
        forged = table.filter(pc.is_valid(claims))
        for owner, claim in zip(forged.column("app").to_pylist(), forged.column(FORGED).to_pylist(), strict=True):
            found[(str(owner), str(claim))] = found.get((str(owner), str(claim)), 0) + 1
        table = table.filter(pc.is_null(claims))
    return table.drop_columns([FORGED]), found


def with_time_partitions(table: Any, ts_col: str = "ts") -> Any:
    """Add ``date`` (yyyy-MM-dd) and ``hour`` (HH) of an epoch-ms column (UTC), the store's layout, to an Arrow
    table (null where the time is null). Done on the collected table with Arrow's vectorised casts: Spark's
    ``date_format`` formats every row through a ``DateTimeFormatter`` and the two columns then travel to the
    driver as strings (issue 39)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stamp = pc.cast(pc.cast(table.column(ts_col), pa.int64()), pa.timestamp("ms"))
    date = pc.cast(pc.cast(stamp, pa.date32()), pa.string())
    hour = pc.utf8_lpad(pc.cast(pc.hour(stamp), pa.string()), 2, "0")
    return table.append_column("date", date).append_column("hour", hour)
