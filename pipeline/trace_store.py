"""Trace store: trace events -> Parquet by date / hour / topic; lookup of a key's lifecycle without Spark.

``lookup`` lists only the ``date=/hour=/topic=`` directories of the asked time range (and topic), and
pushes the key filter into the Parquet scan, so finding a message is a few small file reads even when
the store holds months of events.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from ykafka import events

from .decode import drop_forged, with_time_partitions
from .store import Store, hour_prefixes

PARTITIONS = ("date", "hour", "topic")


def write_batch(store: Store, trace: Any, batch_id: int,
                forged: Callable[[dict[tuple[str, str], int]], None] | None = None) -> int:
    """Write one micro-batch of decoded trace events (an Arrow table, ``topic`` never null: the pipeline's
    ``Pipeline.decoded``); returns the rows written. Forged events (an app's own topic claiming another app,
    ``decode.drop_forged``) are left out and handed to ``forged``."""
    table, found = drop_forged(with_time_partitions(trace))
    if found and forged is not None:
        forged(found)
    return store.write(table, "trace", PARTITIONS, batch_id, "trace")


def lookup(store: Store, key: str | None = None, *, msg_id: str | None = None, topic: str | None = None,
           since: dt.timedelta = dt.timedelta(hours=1), until: dt.datetime | None = None,
           limit: int = 10_000) -> list[dict[str, Any]]:
    """Trace events of messages with ``key`` (or id ``msg_id``) in the time range, in lifecycle order."""
    import pyarrow.compute as pc

    if key is None and msg_id is None:
        raise ValueError("give a key or a message id")
    end = until or dt.datetime.now(dt.UTC)
    start = end - since
    prefixes = hour_prefixes(start, end, topic)
    expr = pc.field("key") == key if key is not None else pc.field("msg_id") == msg_id
    expr = expr & (pc.field("ts") >= int(start.timestamp() * 1000)) & (pc.field("ts") <= int(end.timestamp() * 1000))
    table = store.read("trace", prefixes, filter=expr)
    if table.num_rows == 0:
        return []
    ids = {i for i in table.column("msg_id").to_pylist() if i}
    if key is not None and ids:
        # consumer-side steps of retry copies may carry the key too, but the id ties everything together
        more = store.read("trace", prefixes, filter=pc.field("msg_id").isin(sorted(ids)) & (pc.field("ts") >= int(
            start.timestamp() * 1000)))
        rows = {(_row_key(r)): r for r in table.to_pylist() + more.to_pylist()}
        found = list(rows.values())
    else:
        found = table.to_pylist()
    # same millisecond: earlier attempts first, then the usual order of steps
    found.sort(key=lambda r: (r.get("ts") or 0, r.get("attempt") or 0, events.KIND_ORDER.get(r.get("kind") or "", 99)))
    return found[:limit]


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row.get("msg_id"), row.get("kind"), row.get("ts"), row.get("group"), row.get("client_id"),
            row.get("attempt"), row.get("offset"))


def timelines(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Events grouped by message id, each list in lifecycle order, messages by first appearance."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row.get("msg_id") or "?", []).append(row)
    return out
