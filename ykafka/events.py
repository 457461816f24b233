"""Event schemas shared by the SDK (which writes them) and the pipeline (which reads them).

Three event streams leave every client, each to its own topic: trace events (one message's lifecycle),
metrics events (latency summaries, counts, lag samples) and client events (who runs where, with which
versions). The pipeline adds a fourth: alerts.

Wire format (schema version 1). A Kafka message carries a *batch* of events of one type, as compact JSON::

    {"v": 1, "type": "trace", "f": ["ts", "kind", ...], "r": [[1732262400000, "acked", ...], ...]}

``f`` names the row fields in the order of the schema below; rows are positional arrays, so encoding
a batch is one C-level ``json.dumps`` call (about 1 µs per event) and the pipeline parses it in the JVM
with ``from_json`` (no Python per event). Rows may stop early: the fields they leave out come from the
optional envelope object ``"c"`` (values constant for the batch, such as the emitting client's id, app
and IP, sent once instead of in every row), else they are null.

An ``acked`` trace row may leave ``ts`` null: it was written without a clock read, and its times follow
from ``msg_ts`` (the send) and ``latency_ms`` (see :func:`derive_times`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any


class _Spread(tuple[Any, ...]):
    """Row fields given as one element (see :func:`spread`), expanded before encoding without orjson."""


try:  # orjson encodes a batch ~6x faster than json: less CPU taken from the application by tracing
    import orjson

    def _dumps(doc: Any) -> bytes:
        return orjson.dumps(doc, default=str)

    _FRAGMENT: Any = getattr(orjson, "Fragment", None)
except ImportError:  # pragma: no cover - orjson is optional
    def _dumps(doc: Any) -> bytes:
        return json.dumps(doc, separators=(",", ":"), default=str).encode()

    _FRAGMENT = None

dumps: Callable[[Any], bytes] = _dumps


def spread(values: Sequence[Any]) -> Any:
    """Several consecutive fields of a row as one element of it, e.g. ``("acked", None, topic)`` in a
    hot emitter's rows: orjson writes their JSON text in place (an ``orjson.Fragment``), so the row has
    fewer elements to build, to track for the garbage collector and to encode, and the batch on the
    wire is the same. Without orjson the row is expanded before encoding."""
    if not values:
        raise ValueError("spread() needs at least one field")
    if _FRAGMENT is not None:
        return _FRAGMENT(_dumps(list(values))[1:-1])
    return _Spread(values)


def _expand(row: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for value in row:
        if type(value) is _Spread:
            out.extend(value)
        else:
            out.append(value)
    return out

SCHEMA_VERSION = 1

TRACE_TOPIC = "__ykafka_trace"
METRICS_TOPIC = "__ykafka_metrics"
CLIENTS_TOPIC = "__ykafka_clients"
ALERTS_TOPIC = "__ykafka_alerts"


class TraceKind(StrEnum):
    """The lifecycle steps of one message, in the order they normally happen."""

    PRODUCED = "produced"  # handed to the producer
    ACKED = "acked"  # the broker acknowledged it (partition / offset known)
    FAILED = "failed"  # delivery failed for good (reported to the application)
    SPILLED = "spilled"  # written to the local disk queue because its cluster was unreachable
    REPLAYED = "replayed"  # sent again from the disk queue
    CONSUMED = "consumed"  # fetched by a consumer of a group
    PROCESSED = "processed"  # the handler finished it successfully
    RETRIED = "retried"  # the handler failed; a retry copy was scheduled
    DEAD_LETTERED = "dead-lettered"  # sent to the group's DLQ after the last attempt


#: Order in which a timeline sorts kinds that share a timestamp.
KIND_ORDER: dict[str, int] = {kind.value: i for i, kind in enumerate(TraceKind)}

#: (name, Spark SQL type) of each event type's fields, in wire order.
TRACE_FIELDS: tuple[tuple[str, str], ...] = (
    ("ts", "bigint"),  # when the step happened, epoch ms
    ("kind", "string"),  # a TraceKind value
    ("msg_id", "string"),  # correlation id: ykafka-trace / ykafka-id header; null = "topic/partition/offset"
    ("topic", "string"),  # the business topic (the original topic for retry / DLQ copies)
    ("key", "string"),  # the message key, utf-8 (undecodable bytes replaced)
    ("partition", "int"),
    ("offset", "bigint"),
    ("msg_ts", "bigint"),  # the message's own timestamp, epoch ms: the completeness-audit bucket
    ("latency_ms", "double"),  # acked: produce -> ack; consumed: msg_ts -> fetch; processed: handler time
    ("group", "string"),  # consumer group of consumer-side steps
    ("attempt", "int"),  # handler attempt number (retried / dead-lettered)
    ("error", "string"),
    ("detail", "string"),  # free text, e.g. the retry / DLQ topic
    ("cluster", "string"),
    # acked / failed rows written by the producer's delivery wrapper: when the message was handed to the
    # producer. Readers derive the ``produced`` step from it (one row per message instead of two).
    ("sent_ts", "bigint"),
    # constant per emitting client: usually sent once per batch in the envelope's "c" (see module docstring)
    ("client_id", "string"),
    ("app", "string"),
    ("ip", "string"),
)

METRIC_FIELDS: tuple[tuple[str, str], ...] = (
    ("ts", "bigint"),  # end of the measured interval, epoch ms
    ("name", "string"),  # see MetricName
    ("client_id", "string"),
    ("app", "string"),
    ("ip", "string"),
    ("role", "string"),  # producer / consumer / pipeline
    ("cluster", "string"),
    ("topic", "string"),
    ("group", "string"),
    ("partition", "int"),
    ("broker", "string"),
    ("count", "bigint"),  # samples (latency) or events (counters) in the interval
    ("sum", "double"),
    ("max", "double"),
    ("p50", "double"),
    ("p95", "double"),
    ("p99", "double"),
    ("value", "double"),  # gauges: lag; counters: the delta
    ("committed", "bigint"),  # lag samples: the group's committed offset
    ("end_offset", "bigint"),  # lag samples: the partition's high watermark
    ("source", "string"),  # stats (librdkafka), timer (handler timings), sampler (pipeline's lag sampler)
)

#: libraries whose version a client reports (``versions`` of the report; ``<lib>_version`` fields below)
VERSION_LIBS = ("ykafka", "confluent_kafka", "librdkafka")

CLIENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("ts", "bigint"),
    ("client_id", "string"),
    ("app", "string"),
    ("ip", "string"),
    ("hostname", "string"),
    ("pid", "int"),
    ("language", "string"),
    ("ykafka_version", "string"),
    ("confluent_kafka_version", "string"),
    ("librdkafka_version", "string"),
    ("role", "string"),
    ("topics", "string"),  # comma-separated
    ("group", "string"),
    ("cluster", "string"),
    ("state", "string"),  # starting / running / swapping / closed
    ("ephemeral", "boolean"),  # the group is deleted when its last client closes
)

ALERT_FIELDS: tuple[tuple[str, str], ...] = (
    ("ts", "bigint"),
    ("id", "string"),  # stable per (rule, subject, level): the de-duplication key
    ("rule", "string"),
    ("level", "string"),  # WARN / ERR / STALL / STOP / LOSS / OK
    ("status", "string"),  # firing / resolved
    ("topic", "string"),
    ("group", "string"),
    ("partition", "int"),
    ("client_id", "string"),
    ("reason", "string"),
    ("evidence", "string"),  # JSON
)

FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "trace": TRACE_FIELDS, "metric": METRIC_FIELDS, "client": CLIENT_FIELDS, "alert": ALERT_FIELDS,
}
TOPICS: dict[str, str] = {
    "trace": TRACE_TOPIC, "metric": METRICS_TOPIC, "client": CLIENTS_TOPIC, "alert": ALERTS_TOPIC,
}
NAMES: dict[str, tuple[str, ...]] = {kind: tuple(n for n, _ in fields) for kind, fields in FIELDS.items()}

# --- per-app telemetry topics (issue 37: each app speaks only for itself) ------------------------------------
#: the event types every client writes; on a secured cluster each app writes them to its own topics
TELEMETRY_KINDS = ("trace", "metric", "client")
#: the shared topics they share a name with: ``<shared topic>.<app id>`` is the app's own
TELEMETRY_TOPICS = tuple(TOPICS[kind] for kind in TELEMETRY_KINDS)
#: between the shared topic's name and the app id. Each app's topic is a LITERAL name and the map
#: app id -> topic is one-to-one (a fixed prefix plus the id), so no app's topic is another's, whatever the ids
#: hold; the ACL check refuses any produce / consume pattern but ``*`` reaching into these names
#: (``ykafka.acl.topic_pattern_problem``), so no app's own topic lands there either.
TELEMETRY_SEPARATOR = "."


def app_topic(kind: str, app_id: str) -> str:
    """The topic app ``app_id`` writes its events of ``kind`` to on a secured cluster: ``__ykafka_trace.<app>``."""
    return f"{TOPICS[kind]}{TELEMETRY_SEPARATOR}{app_id}"


def app_topics(app_id: str) -> dict[str, str]:
    """The event-type -> topic map of an app's own telemetry (alerts stay on the shared topic: apps never write
    them)."""
    return {**TOPICS, **{kind: app_topic(kind, app_id) for kind in TELEMETRY_KINDS}}


def topic_owner(topic: str) -> str | None:
    """The app a per-app telemetry topic belongs to (``__ykafka_clients.billing`` -> ``billing``), or None for
    any other topic (the shared ones included). The pipeline attributes every event of such a topic to it."""
    for shared in TELEMETRY_TOPICS:
        head = shared + TELEMETRY_SEPARATOR
        if topic.startswith(head) and len(topic) > len(head):
            return topic[len(head):]
    return None
TRACE_NAMES = NAMES["trace"]
METRIC_NAMES = NAMES["metric"]
CLIENT_NAMES = NAMES["client"]
ALERT_NAMES = NAMES["alert"]


class MetricName(StrEnum):
    SEND_LATENCY = "send.latency_ms"  # librdkafka int_latency + rtt percentiles (upper bound), per broker
    SEND_RTT = "send.rtt_ms"  # librdkafka broker round-trip time
    SEND_MSGS = "send.msgs"  # messages transmitted in the interval, per topic
    SEND_ERRORS = "send.errors"  # transmit errors + request timeouts in the interval
    CONSUME_LATENCY = "consume.latency_ms"  # message timestamp -> handed to the application
    PROCESS_LATENCY = "process.latency_ms"  # handler time
    CONSUME_MSGS = "consume.msgs"
    CONSUME_ERRORS = "consume.errors"  # handler failures + receive errors
    CONSUME_REJOINS = "consume.rejoins"  # consumer clients the watchdog rebuilt (stalled group membership)
    LAG = "lag"  # per partition: end_offset - committed


def spark_ddl(kind: str) -> str:
    """Spark DDL of one event type's row, e.g. ``ts bigint, kind string, ...``."""
    return ", ".join(f"`{name}` {typ}" for name, typ in FIELDS[kind])


_ARROW = {"bigint": "int64", "int": "int32", "double": "float64", "string": "string", "boolean": "bool_"}


def arrow_schema(kind: str) -> Any:
    """The pyarrow schema of one event type (pyarrow is imported only here, for pipeline readers)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, _ARROW[typ])()) for name, typ in FIELDS[kind]])


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_rows(kind: str, rows: Sequence[Sequence[Any]], constants: Mapping[str, Any] | None = None) -> bytes:
    """One Kafka message value holding ``rows`` (positional, in :data:`FIELDS` order, possibly cut short:
    the missing trailing fields come from ``constants``)."""
    if _FRAGMENT is None:
        rows = [_expand(r) for r in rows]
    doc: dict[str, Any] = {"v": SCHEMA_VERSION, "type": kind, "f": NAMES[kind], "r": rows}
    if constants:
        doc["c"] = {k: v for k, v in constants.items() if v is not None}
    return dumps(doc)


def row(kind: str, event: Mapping[str, Any]) -> list[Any]:
    """A positional row from a mapping (missing fields are null)."""
    return [event.get(name) for name in NAMES[kind]]


def encode(kind: str, events: Sequence[Mapping[str, Any]]) -> bytes:
    """One Kafka message value holding ``events`` given as mappings."""
    return encode_rows(kind, [row(kind, e) for e in events])


def decode(value: bytes | str) -> tuple[str, list[dict[str, Any]]]:
    """``(type, events as dicts)`` of one message value; raises ``ValueError`` when it is not a batch."""
    doc = json.loads(value)
    if not isinstance(doc, dict) or "r" not in doc or "f" not in doc:
        raise ValueError("not a ykafka event batch")
    names = doc["f"]
    constants = doc.get("c") or {}
    kind = str(doc.get("type", ""))
    out = []
    for r in doc["r"]:
        event = dict.fromkeys(names)
        event.update(constants)
        event.update((k, v) for k, v in zip(names, r, strict=False) if v is not None or k not in constants)
        if kind == "trace":
            derive_times(event)
            if event.get("msg_id") is None and event.get("partition") is not None and event.get("offset") is not None:
                where = (event.get("topic"), event["partition"], event["offset"])  # no topic: as pipeline/decode.py
                event["msg_id"] = "/".join(str(part) for part in where if part is not None)
            if event.get("sent_ts") is not None:
                out.append(produced_from(event))
        out.append(event)
    return kind, out


def derive_times(event: dict[str, Any]) -> None:
    """Fill the times of an acked row written without them (``ts`` null): the rate-1.0 callback of a send
    without key or timestamp reads no clock, since the message's create timestamp is its send time and the
    acknowledgement came ``latency_ms`` later. pipeline/decode.py does the same in Spark."""
    if event.get("ts") is None and event.get("kind") == TraceKind.ACKED and event.get("msg_ts") is not None:
        event["sent_ts"] = event["msg_ts"]
        event["ts"] = event["msg_ts"] + math.floor(event.get("latency_ms") or 0.0)


#: Fields a derived ``produced`` step keeps from its acked / failed row.
PRODUCED_KEEPS = ("msg_id", "topic", "key", "cluster", "client_id", "app", "ip")


def produced_from(event: Mapping[str, Any]) -> dict[str, Any]:
    """The ``produced`` step implied by an acked / failed row that carries ``sent_ts``."""
    derived: dict[str, Any] = dict.fromkeys(event)
    derived.update({k: event.get(k) for k in PRODUCED_KEEPS})
    derived.update({"ts": event["sent_ts"], "kind": TraceKind.PRODUCED.value})
    return derived


def iter_events(values: Iterator[bytes]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every event of a stream of message values (malformed values are skipped)."""
    for value in values:
        try:
            kind, events = decode(value)
        except (ValueError, TypeError):
            continue
        for event in events:
            yield kind, event
