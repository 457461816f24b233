"""pipeline/decode.py: a batch's rows become typed events the way ykafka.events.decode reads them, attributed to
the app of the topic they came from, and carried packed (an Arrow IPC stream a row) through Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.decode import FORGED, drop_forged, packed, unpack
from ykafka import events


def _raw(values: list[bytes], topics: list[str] | None = None) -> pa.RecordBatch:
    columns = [pa.array(values, pa.binary())]
    if topics is not None:
        columns.insert(0, pa.array(topics, pa.string()))
    return pa.RecordBatch.from_arrays(columns, names=(["topic"] if topics is not None else []) + ["value"])


def _decoded(kind: str, raw: pa.RecordBatch) -> pa.Table:
    """What a handler gets of these Kafka rows: the source's packs of them (``packed``), collected and opened."""
    packs = pa.Table.from_batches(list(packed(kind, [raw])), schema=pa.schema([("events", pa.binary())]))
    return unpack(kind, packs)


def test_decode_derives_the_times_of_rows_written_without_them() -> None:
    """An acked row with a null ts (the fused keyless callback's) is sent at msg_ts and acked latency_ms later, as
    in events.derive_times; a row with its times keeps them. Both imply their produced step."""
    at_send = events.spread((None, "acked", None, "t", None))
    constant = events.spread((None, None, None, None, "dc-t"))
    rows = [(at_send, 1, 7, 1_750_000_000_000, 25.5, constant),
            (1_750_000_001_000, "acked", None, "t", "k", 1, 8, 1_750_000_000_990, 10.25, None, None, None, None,
             "dc-t", 1_750_000_000_990)]
    value = events.encode_rows("trace", rows, {"client_id": "c-9"})
    typed = _decoded("trace", _raw([value]))
    got = sorted(zip(*(typed.column(n).to_pylist() for n in ("msg_id", "kind", "ts", "sent_ts", "client_id")),
                     strict=True))
    assert got == [("t/1/7", "acked", 1_750_000_000_025, 1_750_000_000_000, "c-9"),
                   ("t/1/7", "produced", 1_750_000_000_000, None, "c-9"),
                   ("t/1/8", "acked", 1_750_000_001_000, 1_750_000_000_990, "c-9"),
                   ("t/1/8", "produced", 1_750_000_000_990, None, "c-9")]
    _kind, python = events.decode(value)  # the Python reader agrees
    assert sorted((e["msg_id"], e["kind"], e["ts"]) for e in python) == [g[:3] for g in got]


def test_events_of_an_apps_own_topic_are_its_own_and_a_claim_of_another_app_is_left_out() -> None:
    """Issue 37: on a secured cluster app A writes only ``__ykafka_<kind>.A``. An event there is A's whatever its
    payload says; one claiming app B is forged: decode flags it, drop_forged leaves it out and counts it. On the
    shared topics (the open stack) the payload's app stands: nothing there proves who wrote it."""
    now = 1_750_000_000_000
    honest = events.encode_rows("client", [[now, "c-a", "app-a"], [now, "c-quiet", None]])
    forged = events.encode_rows("client", [[now, "c-forged", "app-b"], [now, "c-forged2", "app-b"]])
    shared = events.encode_rows("client", [[now, "c-open", "app-b"]])
    own = events.app_topic("client", "app-a")
    table = _decoded("client", _raw([honest, forged, shared], [own, own, events.CLIENTS_TOPIC]))
    kept, found = drop_forged(table)
    assert sorted(zip(kept.column("client_id").to_pylist(), kept.column("app").to_pylist(), strict=True)) == [
        ("c-a", "app-a"), ("c-open", "app-b"), ("c-quiet", "app-a")]
    assert found == {("app-a", "app-b"): 2} and FORGED not in kept.column_names
    trace = events.encode_rows("trace", [(now, "consumed", "m-1", "t")], {"client_id": "c-forged", "app": "app-b"})
    kept, found = drop_forged(_decoded("trace", _raw([trace], [events.app_topic("trace", "app-a")])))
    assert kept.num_rows == 0 and found == {("app-a", "app-b"): 1}


def test_values_of_the_wrong_kind_become_null_and_what_is_not_a_batch_is_dropped() -> None:
    """Spark's JSON reader's rules, kept: a value that does not convert to its field's type is null (never a
    failed batch), a number or nested value read into a string field is its JSON text, a batch of another type or
    with a row that is not an array is dropped, and so is a value that is not JSON."""
    now = 1_750_000_000_000
    odd = events.encode_rows("trace", [
        [now, "acked", 42, "t", {"k": [1]}, "3", 1.5, "oops", "2.5", True, 2**40, False, None, "dc"],
        ["17", "consumed", "m", "t", "k", " 4 ", "1e3", now, 7, "g", "1", None, None, "dc"]])
    values = [odd, b"not json", b"[1, 2]", events.encode_rows("metric", [[now, "x"]]),
              b'{"v": 1, "type": "trace", "f": [], "r": [[1], "row"]}']
    typed = _decoded("trace", _raw(values))
    rows = typed.to_pylist()
    assert len(rows) == 2
    first, second = rows
    assert (first["msg_id"], first["key"], first["partition"], first["offset"]) == ("42", '{"k":[1]}', 3, None)
    assert (first["msg_ts"], first["latency_ms"], first["group"], first["attempt"]) == (None, 2.5, "true", None)
    assert first["error"] == "false"
    assert (second["ts"], second["partition"], second["offset"], second["latency_ms"], second["attempt"]) == (
        17, 4, None, 7.0, 1)
    assert typed.schema.field("partition").type == pa.int32() and typed.schema.field("attempt").type == pa.int32()


def test_packed_events_open_to_the_same_table_in_packs_of_the_given_size() -> None:
    now = 1_750_000_000_000
    values = [events.encode_rows("metric", [[now + b * 10 + i, "send.latency_ms", f"c{b}"] for i in range(10)])
              for b in range(7)]
    whole = _decoded("metric", _raw(values))
    packs = list(packed("metric", [_raw(values[:3]), _raw(values[3:])], rows=25))
    assert [p.num_rows for p in packs] == [1, 1, 1]  # 30, 30 and the last 10 events
    opened = unpack("metric", pa.Table.from_batches(packs))
    assert opened.equals(whole) and opened.num_rows == 70
    empty = unpack("metric", pa.Table.from_batches(list(packed("metric", [_raw([b"{}"])])), schema=pa.schema(
        [("events", pa.binary())])))
    assert empty.num_rows == 0 and empty.schema == whole.schema


_OF_TYPE = {"bigint": st.integers(-2**63, 2**63 - 1), "int": st.integers(-2**31, 2**31 - 1),
            "double": st.floats(-1e12, 1e12), "string": st.text(max_size=8)}
_KINDS = st.sampled_from([k.value for k in events.TraceKind])


@st.composite
def _rows(draw: Any) -> list[Any]:
    """A trace row as the SDK writes it: each field null or of its type, cut short anywhere."""
    size = draw(st.integers(0, len(events.TRACE_FIELDS)))
    return [draw(st.none() | (_KINDS if name == "kind" else _OF_TYPE[typ]))
            for name, typ in events.TRACE_FIELDS[:size]]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_rows(), min_size=1, max_size=6),
       constants=st.dictionaries(st.sampled_from(["client_id", "app", "ip", "cluster", "topic"]),
                                 st.text(max_size=5)))
def test_decode_agrees_with_the_python_reader(rows: list[list[Any]], constants: dict[str, str]) -> None:
    """The two readers of the wire format, property-tested: every event ykafka.events.decode reads from a batch
    the SDK could write (the derived produced steps and times included) is a row of the pipeline's typed table,
    and nothing else is."""
    value = events.encode_rows("trace", rows, constants)
    typed = _decoded("trace", _raw([value])).to_pylist()
    _kind, python = events.decode(value)

    def key(event: dict[str, Any]) -> str:
        return repr([event.get(name) for name in events.TRACE_NAMES])

    assert sorted(map(key, typed)) == sorted(map(key, python))


_ANY = st.recursive(st.none() | st.booleans() | st.integers(-2**64, 2**64) | st.floats() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=6)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.lists(_ANY, max_size=20), min_size=1, max_size=4),
       constants=st.dictionaries(st.sampled_from([n for n, _ in events.TRACE_FIELDS]), _ANY, max_size=4))
def test_any_json_in_a_batch_decodes_without_failing(rows: list[list[Any]], constants: dict[str, Any]) -> None:
    """Whatever a writer put in a batch, decoding never fails the micro-batch: each row is one event (two with its
    produced step), typed, with null where a value does not convert."""
    import orjson

    value = orjson.dumps({"v": 1, "type": "trace", "f": list(events.TRACE_NAMES), "r": rows, "c": constants},
                         option=orjson.OPT_PASSTHROUGH_SUBCLASS) if all(
        abs(v) < 2**63 for v in _ints([rows, constants])) else b"{}"
    typed = _decoded("trace", _raw([value]))
    assert typed.num_rows in range(len(rows) if value != b"{}" else 0, 2 * len(rows) + 1)
    assert typed.schema.names == [*events.TRACE_NAMES, FORGED]


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [i for v in value for i in _ints(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    return []
