"""Header names ykafka reads and writes on messages: the one place they are defined (a wire contract).

One style, ``ykafka-<name>``. ``ykafka.synced.from``, the failback sync's header before that rule, is still
read (:func:`synced_from`) for messages already written with it.
"""

from __future__ import annotations

from typing import Any

#: Unique message id stamped by the ykafka Producer; the dedupe helper keys on it.
MESSAGE_ID = "ykafka-id"
#: Message id the ykafka Producer stamps on traced (sampled) messages (see ykafka.tracing).
TRACE_ID = "ykafka-trace"
#: How many times the handler has failed on this message (1 on the first retry copy).
ATTEMPT = "ykafka-attempt"
#: Epoch milliseconds before which a retry copy must not reach the handler.
NOT_BEFORE = "ykafka-not-before"
#: ``ExceptionType: text`` of the last handler failure.
ERROR = "ykafka-error"
#: Epoch milliseconds of the last handler failure.
FAILED_AT = "ykafka-failed-at"
#: Consumer group whose handler failed.
GROUP = "ykafka-group"
#: Coordinates of the message as first consumed.
ORIGINAL_TOPIC = "ykafka-original-topic"
ORIGINAL_PARTITION = "ykafka-original-partition"
ORIGINAL_OFFSET = "ykafka-original-offset"
ORIGINAL_TIMESTAMP = "ykafka-original-timestamp"
#: Set by ``ykafka admin dlq replay`` on re-published messages: ``<dlq topic>:<partition>:<offset>``.
REPLAYED_FROM = "ykafka-replayed-from"
#: Set by the failback sync on a record copied from the standby back to the primary: the standby's name.
SYNCED_FROM = "ykafka-synced-from"
#: Set by the DR engine on a record it writes to a standby during an outage: the writing engine's id (persisted in its
#: spill directory). Each producer process syncs back exactly the records carrying its own id (``ykafka.dr.sync``).
DR_WRITER = "ykafka-dr-writer"
#: The failback sync's header name before ``SYNCED_FROM`` (read, never written).
LEGACY_SYNCED_FROM = "ykafka.synced.from"

#: Headers describing a failure; stripped when a message is re-published from the DLQ.
FAILURE_HEADERS = frozenset({ATTEMPT, NOT_BEFORE, ERROR, FAILED_AT, GROUP, ORIGINAL_TOPIC, ORIGINAL_PARTITION,
                             ORIGINAL_OFFSET, ORIGINAL_TIMESTAMP})

Headers = list[tuple[str, bytes | None]]


def as_list(headers: Any) -> Headers:
    """Normalise confluent-kafka headers (None, list of pairs or dict) to a list of pairs."""
    if not headers:
        return []
    if isinstance(headers, dict):
        return [(str(k), _as_bytes(v)) for k, v in headers.items()]
    return [(str(k), _as_bytes(v)) for k, v in headers]


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def get(headers: Any, name: str) -> bytes | None:
    """Last value of header ``name`` (None when absent)."""
    found: bytes | None = None
    for key, value in as_list(headers):
        if key == name:
            found = value
    return found


def get_str(headers: Any, name: str) -> str | None:
    value = get(headers, name)
    return None if value is None else value.decode("utf-8", "replace")


def get_int(headers: Any, name: str) -> int | None:
    text = get_str(headers, name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def without(headers: Any, names: frozenset[str]) -> Headers:
    return [(k, v) for k, v in as_list(headers) if k not in names]


def synced_from(headers: Any) -> str | None:
    """The standby a failback sync copied this record from (either spelling), None for an original write."""
    return get_str(headers, SYNCED_FROM) or get_str(headers, LEGACY_SYNCED_FROM)
