"""Reading a topic's messages for people (the console's topic page and ``ykafka admin messages``): up to N
messages of a partition from an offset or a time, or the messages of a key within a time window; with their
headers; values shown as text, JSON or hex, with the topic's masking rules applied before anything leaves.

Every read is bounded in messages, bytes and time, so a page never hangs on a large topic.
"""

from __future__ import annotations

import atexit
import base64
import fnmatch
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

#: bounds of one read: messages returned, messages scanned (a key search), bytes of values, seconds
MAX_MESSAGES = 500
MAX_SCANNED = 200_000
MAX_BYTES = 4 * 1024 * 1024
MAX_SECONDS = 5.0
MASK = "***"
FORMATS = ("text", "json", "hex")


class BrowseRefused(ValueError):
    """The read cannot be done as asked (the reason for the user, never the raw input)."""


@dataclass(frozen=True)
class Query:
    partition: int | None = None  # None: every partition (a key search)
    offset: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    key: str | None = None
    limit: int = 50

    def check(self) -> None:
        if not 1 <= self.limit <= MAX_MESSAGES:
            raise BrowseRefused(f"the limit is 1 to {MAX_MESSAGES} messages")
        if self.key is None and self.partition is None:
            raise BrowseRefused("name a partition (or a key to search every partition)")
        if self.key is None and self.offset is None and self.since_ms is None:
            raise BrowseRefused("name an offset or a time to read from")
        if self.key is not None and self.since_ms is None:
            raise BrowseRefused("a key search needs the start of its time window")


def load_masks(path: str | None) -> dict[str, list[str]]:
    """``topic or prefix* -> [JSON paths]`` from the masking-rules file (none when not configured)."""
    if not path or not Path(path).is_file():
        return {}
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError("the masking rules file maps topics to lists of JSON paths")
    out: dict[str, list[str]] = {}
    for topic, paths in raw.items():
        if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("$") for p in paths):
            raise ValueError(f"masking rules of {topic}: a list of JSON paths like $.card.number")
        out[str(topic)] = list(paths)
    return out


def masks_for(rules: Mapping[str, list[str]], topic: str) -> list[str]:
    return [p for pattern, paths in rules.items() if fnmatch.fnmatchcase(topic, pattern) for p in paths]


def _parts(path: str) -> list[str]:
    """``$.a.b[*].c`` -> ``["a", "b", "*", "c"]``."""
    return [p for p in path[1:].replace("[*]", ".*").replace("[", ".").replace("]", "").split(".") if p]


def _mask(node: Any, parts: list[str]) -> None:
    if not parts:
        return
    head, rest = parts[0], parts[1:]
    children: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        children = [(k, node[k]) for k in (node if head == "*" else [head]) if k in node]
    elif isinstance(node, list):
        if head == "*":
            children = list(enumerate(node))
        elif head.isdigit() and int(head) < len(node):
            children = [(int(head), node[int(head)])]
    for key, child in children:
        if rest:
            _mask(child, rest)
        else:
            node[key] = MASK


def render(value: bytes | None, fmt: str, masks: list[str]) -> tuple[str | None, bool]:
    """(the value as ``fmt`` with ``masks`` applied, masked?). A value the rules cannot be applied to (not a
    JSON object) is withheld whole when the topic has rules."""
    if value is None:
        return None, False
    if masks:
        try:
            doc = json.loads(value)
        except ValueError:
            return f"{MASK} (not JSON: withheld under the topic's masking rules)", True
        for path in masks:
            _mask(doc, _parts(path))
        value = json.dumps(doc, ensure_ascii=False).encode()
    if fmt == "hex":
        return value.hex(" "), bool(masks)
    if fmt == "json":
        try:
            return json.dumps(json.loads(value), indent=2, ensure_ascii=False), bool(masks)
        except ValueError:
            return "(not JSON) " + value.decode("utf-8", "replace"), bool(masks)
    try:
        return value.decode("utf-8"), bool(masks)
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode(), bool(masks)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def read(props: Mapping[str, Any], topic: str, q: Query, *, values: bool, fmt: str, masks: list[str]
         ) -> dict[str, Any]:
    """Messages as dicts (partition, offset, timestamp, key, headers, size; ``value`` when ``values``) and why the
    read stopped (``stopped``: limit, end, bytes, time, scanned)."""
    q.check()
    if fmt not in FORMATS:
        raise BrowseRefused(f"show values as one of {', '.join(FORMATS)}")
    key = json.dumps(dict(props), sort_keys=True, default=str)
    with _lock:
        pooled = _readers.pop(key, None)  # an idle reader of this cluster (its connections are up), or a new one
    reader = pooled or Consumer({**props, "group.id": "ykafka-metaserver-browse", "enable.auto.commit": False,
                                 "enable.partition.eof": True, "log_level": 3, "fetch.max.bytes": MAX_BYTES,
                                 # a broker answers one request of a connection at a time: the next read's
                                 # metadata request waited behind a long-polling fetch (500 ms by default)
                                 "fetch.wait.max.ms": 20})
    healthy = False
    try:
        meta = reader.list_topics(topic, timeout=5).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise BrowseRefused("no such topic on this cluster")
        parts = sorted(meta.partitions) if q.partition is None else [q.partition]
        if q.partition is not None and q.partition not in meta.partitions:
            raise BrowseRefused(f"the topic has no partition {q.partition} (it has {len(meta.partitions)})")
        # where to start; where a partition ends is its end-of-partition event (Tansu answers a partition's end
        # offset as its last batch's base offset + 1, so the watermark is not trusted as the end)
        if q.offset is not None:
            lows = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[0] for p in parts}
            starts = {p: max(q.offset, lows[p]) for p in parts}
        else:
            found = reader.offsets_for_times([TopicPartition(topic, p, int(q.since_ms or 0)) for p in parts],
                                             timeout=5)
            starts = {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}
        live = {p for p in parts if starts[p] != OFFSET_END}
        out: list[dict[str, Any]] = []
        stopped, size, scanned = "end", 0, 0
        if live:
            reader.assign([TopicPartition(topic, p, starts[p] if p in live else OFFSET_END) for p in parts])
        deadline = time.monotonic() + MAX_SECONDS
        while live:
            if time.monotonic() > deadline:
                stopped = "time"
                break
            # as many as the read still needs (consume waits for its count or its timeout: asking 500 for a
            # 50-message page held every page 0.2 s); a key search scans in batches
            wanted = 500 if q.key is not None else max(1, min(500, q.limit - len(out) + len(live)))
            for msg in reader.consume(wanted, 0.2):
                if msg.error() is not None:
                    live.discard(msg.partition())  # end of partition (or an error: that partition stops)
                    continue
                scanned += 1
                ts = msg.timestamp()[1]
                if q.until_ms is not None and ts > q.until_ms:
                    live.discard(msg.partition())
                    continue
                if q.key is not None and _text(msg.key()) != q.key:
                    continue
                value = msg.value()
                size += len(value or b"")
                item: dict[str, Any] = {
                    "partition": msg.partition(), "offset": msg.offset(), "timestamp": ts, "key": _text(msg.key()),
                    "headers": [[str(h[0]), _text(h[1] if isinstance(h[1], bytes) or h[1] is None else
                                                   str(h[1]).encode())] for h in (msg.headers() or [])],
                    "size": len(value or b"")}
                if values:
                    item["value"], item["masked"] = render(value, fmt, masks)
                out.append(item)
                if len(out) >= q.limit:
                    stopped, live = "limit", set()
                    break
                if size >= MAX_BYTES:
                    stopped, live = "bytes", set()
                    break
            if scanned >= MAX_SCANNED:
                stopped = "scanned"
                break
        out.sort(key=lambda m: (m["timestamp"], m["partition"], m["offset"]) if q.key is not None else
                 (m["partition"], m["offset"]))
        healthy = True
        return {"topic": topic, "messages": out, "stopped": stopped, "scanned": scanned, "values": values,
                "masks": masks, "format": fmt}
    except KafkaException as exc:
        raise BrowseRefused(f"the broker refused: {exc.args[0].str() if exc.args else exc}") from None
    finally:
        _release(key, reader, healthy)


#: one idle reader per cluster, reused by the next read (a new consumer's start-up was most of a read's time);
#: a read takes it out, so two reads at once never share one
_readers: dict[str, Consumer] = {}
_lock = threading.Lock()


def _release(key: str, reader: Consumer, healthy: bool) -> None:
    if healthy:
        try:
            reader.unassign()
        except KafkaException:
            healthy = False
    with _lock:
        if healthy and key not in _readers:
            _readers[key] = reader
            return
    reader.close()


@atexit.register
def _close_all() -> None:
    with _lock:
        idle = list(_readers.values())
        _readers.clear()
    for reader in idle:
        reader.close()
