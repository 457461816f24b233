"""The SDK's event batches -> typed events, decoded where Spark's Python workers read them, handed on packed.

A message value is an :mod:`ykafka.events` batch ``{"v", "type", "f", "c", "r"}``. Each value is parsed once
(orjson) and its positional rows become Arrow columns a field at a time, cast by the type :mod:`ykafka.events`
gives the field's position: a column of well-formed values is converted by Arrow in C, only a column holding
a value of the wrong kind is converted value by value, and a value that does not convert becomes null (never
a failed batch). Batches of another type than asked for are dropped (a topic holds one type; this guards
against mistakes), so are values that are not batches.

Why here and packed (issue 39; docs/architecture.md *Pipeline*, docs/benchmarks.md): every handler collects
its micro-batch to the driver as Arrow and writes the stores with pyarrow. Decoded by Spark (``from_json``,
``explode``, casts) and carried as Spark rows, each event was parsed by Jackson, turned into a row, and turned
back into Arrow for the driver: ~0.09 CPU-s a 1,000 events, most of it the JVM and its JIT. The executors'
Python workers decode it instead (:func:`decode_parts`, ~0.005 CPU-s a 1,000 events) and hand Spark one row per
:data:`PACK_ROWS` events: an Arrow IPC stream of the typed events (:func:`packed`), which the handler opens
(:func:`unpack`). Spark still plans the offsets, schedules the reads on its executors, keeps the checkpoint and
retries a failed task; it no longer copies every event twice.

Attribution (issue 37): on a secured cluster each app writes its events to its own topics
(``__ykafka_trace.<app>``, ``ykafka.events.app_topic``), which no other app's principal may write. An event
read from such a topic belongs to that app whatever its payload says: its ``app`` is the topic's, and an event
whose payload names another app is forged. It keeps that claim in :data:`FORGED` (null for every honest event,
and for every event of a shared topic, where nothing proves who wrote it); :func:`drop_forged` takes those rows
out of the table the store gets and counts them, so the pipeline's stores and the console never show app A's
forgery as app B's, and the pipeline raises an alert (``telemetry.forged``) naming A.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import zip_longest
from typing import Any

from ykafka import events

#: the column holding a forged event's claimed app (null for the others); never stored
FORGED = "_forged_claim"
#: the schema of a packed frame: one row per Arrow IPC stream of typed events (:func:`packed`)
PACKED_DDL = "events binary"
#: events a pack holds at most (the last of a read task holds the rest): ~4-8 MB of Arrow
PACK_ROWS = 50_000
_INTEGRAL = re.compile(r"\s*[+-]?[0-9]+\s*")
_LIMITS = {"bigint": 2**63, "int": 2**31}


def decode(raw: Any, kind: str) -> Any:
    """A packed frame (:data:`PACKED_DDL`) of typed events of ``kind`` from a DataFrame of Kafka rows (``value``
    binary, ``topic`` if it has one), such as Spark's own ``kafka`` source reads; decoded in the executors'
    Python workers (``mapInArrow``, which needs pandas installed)."""
    _check(kind)
    columns = ["topic", "value"] if "topic" in raw.columns else ["value"]
    return raw.select(*columns).mapInArrow(partial(packed, kind), PACKED_DDL)


def packed(kind: str, batches: Iterable[Any], rows: int = PACK_ROWS) -> Iterator[Any]:
    """Arrow record batches of Kafka rows -> one-row record batches (:data:`PACKED_DDL`), each an Arrow IPC
    stream of up to ``rows`` typed events of ``kind`` (:func:`decode_parts`); nothing for no events."""
    _check(kind)
    held: list[Any] = []
    count = 0
    for batch in batches:
        for part in decode_parts(kind, batch):
            held.append(part)
            count += part.num_rows
            if count >= rows:
                yield _pack(held)
                held, count = [], 0
    if held:
        yield _pack(held)


def _pack(parts: list[Any]) -> Any:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, parts[0].schema) as writer:
        for part in parts:
            writer.write_batch(part)
    blob = sink.getvalue()  # one binary value over the stream's own buffer (no copy)
    offsets = pa.array([0, blob.size], pa.int32()).buffers()[1]
    return pa.RecordBatch.from_arrays([pa.Array.from_buffers(pa.binary(), 1, [None, offsets, blob])], names=["events"])


def unpack(kind: str, table: Any) -> Any:
    """The typed events (an Arrow table: :mod:`ykafka.events`' fields of ``kind`` and :data:`FORGED`) of a
    collected packed frame."""
    import pyarrow as pa

    tables = [pa.ipc.open_stream(blob.as_buffer()).read_all()  # over the collected buffer: no copy
              for chunk in table.column("events").chunks for blob in chunk if blob.is_valid]
    if not tables:
        return _SCHEMAS[_check(kind)].empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _check(kind: str) -> str:
    if kind not in events.TELEMETRY_KINDS:
        raise ValueError(f"no telemetry events of kind {kind!r} (one of {', '.join(events.TELEMETRY_KINDS)})")
    return kind


def decode_parts(kind: str, batch: Any) -> Iterator[Any]:
    """The typed events of each well-formed event batch of ``kind`` among an Arrow batch of Kafka rows, a
    record batch each."""
    import orjson

    values = batch.column("value").to_pylist()
    topics = batch.column("topic").to_pylist() if "topic" in batch.schema.names else [None] * len(values)
    for topic, value in zip(topics, values, strict=True):
        try:
            doc = orjson.loads(value)
        except (orjson.JSONDecodeError, TypeError):
            continue
        if not isinstance(doc, dict) or _text(doc.get("type")) != kind:
            continue
        rows = doc.get("r")
        if not rows or not isinstance(rows, list) or set(map(type, rows)) != {list}:
            continue  # Spark's JSON reader too dropped a batch whose rows are not all arrays
        constants = doc.get("c")
        yield _typed(kind, rows, constants if isinstance(constants, dict) else {},
                     (topic and events.topic_owner(topic)) or "")


def _typed(kind: str, rows: list[list[Any]], constants: dict[str, Any], owner: str) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(rows)
    fields = events.FIELDS[kind]
    columns = list(zip_longest(*rows))  # a short row's missing fields are null, then the envelope's constants
    arrays: dict[str, Any] = {}
    for i, (name, typ) in enumerate(fields):
        array = _array(columns[i], typ) if i < len(columns) else None
        constant = _CONVERT[typ](constants[name]) if constants.get(name) is not None else None
        if array is None:
            array = pa.nulls(n, _ARROW[typ]) if constant is None else pa.repeat(pa.scalar(constant, _ARROW[typ]), n)
        elif constant is not None and array.null_count:
            array = pc.fill_null(array, pa.scalar(constant, _ARROW[typ]))
        arrays[name] = array
    if kind == "trace":
        arrays = _with_produced(arrays)
        n = len(arrays["ts"])
    claimed = arrays["app"]
    if owner:  # a per-app topic: every event is its app's; one claiming another app keeps that claim apart
        other = pc.and_kleene(pc.not_equal(claimed, ""), pc.not_equal(claimed, owner))
        arrays[FORGED] = pc.if_else(pc.fill_null(other, False), claimed, pa.scalar(None, pa.string()))
        arrays["app"] = pa.repeat(pa.scalar(owner, pa.string()), n)
    else:
        arrays[FORGED] = pa.nulls(n, pa.string())
    return pa.RecordBatch.from_arrays(list(arrays.values()), schema=_SCHEMAS[kind])


def _with_produced(a: dict[str, Any]) -> dict[str, Any]:
    """Trace rows: the times and id derived from the row as written, then the ``produced`` step each acked /
    failed row with a ``sent_ts`` implies (the same as :func:`ykafka.events.decode`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # an acked row written without its times: sent at its create timestamp, acked latency_ms later
    timeless = pc.fill_null(pc.and_(pc.and_(pc.is_null(a["ts"]), pc.equal(a["kind"], events.TraceKind.ACKED.value)),
                                    pc.is_valid(a["msg_ts"])), False)
    if pc.any(timeless).as_py():
        late = pc.cast(pc.floor(pc.fill_null(a["latency_ms"], 0.0)), pa.int64(), safe=False)  # never a failed batch
        a["sent_ts"] = pc.if_else(timeless, a["msg_ts"], a["sent_ts"])
        a["ts"] = pc.if_else(timeless, pc.add(a["msg_ts"], late), a["ts"])
    # no msg_id: the message is identified by its coordinates (rate-1.0 acks of producers without ids)
    located = pc.and_(pc.is_valid(a["partition"]), pc.is_valid(a["offset"]))
    if a["msg_id"].null_count and pc.any(located).as_py():
        # topic/partition/offset, or partition/offset without a topic; joined from columns without nulls (given
        # columns of nulls only, Arrow's join returns an array of another length)
        at = [pc.fill_null(pc.cast(a[name], pa.string()), "") for name in ("partition", "offset")]
        where = pc.if_else(pc.is_valid(a["topic"]),
                           pc.binary_join_element_wise(pc.fill_null(a["topic"], ""), *at, "/"),
                           pc.binary_join_element_wise(*at, "/"))
        a["msg_id"] = pc.coalesce(a["msg_id"], pc.if_else(located, where, pa.scalar(None, pa.string())))
    sent = pc.is_valid(a["sent_ts"])
    if not pc.any(sent).as_py():
        return a
    acked = {name: pc.filter(column, sent) for name, column in a.items()}
    m = len(acked["ts"])
    produced = {name: column if name in events.PRODUCED_KEEPS else pa.nulls(m, column.type)
                for name, column in acked.items()}
    produced["ts"] = acked["sent_ts"]
    produced["kind"] = pa.repeat(pa.scalar(events.TraceKind.PRODUCED.value, pa.string()), m)
    return {name: pa.concat_arrays([a[name], produced[name]]) for name in a}


def _array(values: tuple[Any, ...], typ: str) -> Any:
    """An Arrow array of type ``typ`` from one field's JSON values: converted by Arrow when they are of the
    field's kind, else value by value (:data:`_CONVERT`, null where one does not convert)."""
    import pyarrow as pa

    target = _ARROW[typ]
    if typ == "string":  # most fields: one pass, and Arrow refuses anything but text (a number, a boolean, a list)
        try:
            return pa.array(values, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return pa.array([None if v is None else _text(v) for v in values], target)
    try:
        found = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        found = None
    if found is not None:
        if found.type == target:
            return found
        if found.type == pa.null():
            return pa.nulls(len(values), target)
        if (found.type == pa.int64() and typ in ("int", "double")) or (found.type == pa.float64() and typ == "double"):
            try:
                return found.cast(target)  # safe: an int out of int32's range is not silently wrapped
            except (pa.ArrowInvalid, OverflowError):
                pass
    convert = _CONVERT[typ]
    return pa.array([None if v is None else convert(v) for v in values], target)


def _text(value: Any) -> str | None:
    """A JSON value as the text Spark's JSON reader gives a string field: numbers' and booleans' JSON text,
    nested values as compact JSON."""
    import orjson

    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return orjson.dumps(value).decode()


def _integral(limit: int, value: Any) -> int | None:
    if isinstance(value, (bool, float)):
        return None  # Spark's try_cast of "true" or "1.5" to an integer is null
    if isinstance(value, str):
        if not _INTEGRAL.fullmatch(value):
            return None
        value = int(value)
    if not isinstance(value, int) or not -limit <= value < limit:
        return None
    return value


def _double(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value) if "_" not in value else None
        except ValueError:
            return None
    return None


def _boolean(value: Any) -> bool | None:
    text = _text(value)
    return None if text is None else text.lower() == "true"


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "bigint": partial(_integral, _LIMITS["bigint"]), "int": partial(_integral, _LIMITS["int"]),
    "double": _double, "string": _text, "boolean": _boolean}


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


def with_time_partitions(table: Any, ts_col: str = "ts", hour: bool = True) -> Any:
    """Add ``date`` (yyyy-MM-dd) and, with ``hour``, ``hour`` (HH) of an epoch-ms column (UTC), the store's
    layout, to an Arrow table (null where the time is null). Done on the collected table with Arrow's vectorised
    casts: Spark's ``date_format`` formats every row through a ``DateTimeFormatter`` and the two columns then
    travel to the driver as strings (issue 39)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stamp = pc.cast(pc.cast(table.column(ts_col), pa.int64()), pa.timestamp("ms"))
    table = table.append_column("date", pc.cast(pc.cast(stamp, pa.date32()), pa.string()))
    return table.append_column("hour", pc.utf8_lpad(pc.cast(pc.hour(stamp), pa.string()), 2, "0")) if hour else table


class _Arrow(dict[str, Any]):
    """Arrow types by Spark type name, resolved when first asked (pyarrow is imported lazily)."""

    def __missing__(self, typ: str) -> Any:
        import pyarrow as pa

        self[typ] = found = {"bigint": pa.int64(), "int": pa.int32(), "double": pa.float64(),
                             "string": pa.string(), "boolean": pa.bool_()}[typ]
        return found


class _Schemas(dict[str, Any]):
    def __missing__(self, kind: str) -> Any:
        import pyarrow as pa

        self[kind] = found = events.arrow_schema(kind).append(pa.field(FORGED, pa.string()))
        return found


_ARROW = _Arrow()
_SCHEMAS = _Schemas()
