"""Completeness audit in the manner of Uber's Chaperone: did every acknowledged message reach every group?

Per topic and bucket of the messages' own timestamps (10 minutes by default), count the distinct
messages acknowledged to producers and, per consumer group that reads the topic, the distinct messages
that group received (consumed, processed, retried or dead-lettered all count: the message arrived). A
group short of the acknowledged count once the bucket has ended and the grace period passed raises a
``LOSS`` alert naming the bucket, with the missing count and example message ids and keys.

Counting runs on the trace store, i.e. on sampled messages. Sampling is a deterministic function of the
message id, so producers and consumers sample the same messages: on that subset the audit is exact, and
a message sampled at the producer but never seen by a group is a real gap, not a sampling artefact.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .alerts import Alert, AlertConfig
from .store import Store, hour_prefixes

RECEIVED = ("consumed", "processed", "retried", "dead-lettered")


def buckets(store: Store, since: dt.timedelta, now: dt.datetime, bucket_s: int = 600) -> list[dict[str, Any]]:
    """Acknowledged vs received counts per (topic, bucket, group)."""
    import pyarrow.compute as pc

    start = now - since
    table = store.read("trace", hour_prefixes(start, now),
                       filter=pc.field("kind").isin(["acked", *RECEIVED]),
                       columns=["msg_id", "kind", "topic", "group", "msg_ts", "ts", "key"])
    bucket_ms = bucket_s * 1000
    acked: dict[tuple[str, int], dict[str, str | None]] = {}
    received: dict[tuple[str, int, str], set[str]] = {}
    groups: dict[str, set[str]] = {}
    for row in table.to_pylist():
        if not row["msg_id"] or not row["topic"]:
            continue
        stamp = row["msg_ts"] or row["ts"]
        bucket = int(stamp) // bucket_ms * bucket_ms
        if row["kind"] == "acked":
            acked.setdefault((row["topic"], bucket), {})[row["msg_id"]] = row["key"]
        elif row["group"]:
            received.setdefault((row["topic"], bucket, row["group"]), set()).add(row["msg_id"])
            groups.setdefault(row["topic"], set()).add(row["group"])
    out = []
    for (topic, bucket), ids in sorted(acked.items()):
        for group in sorted(groups.get(topic, ())):
            got = received.get((topic, bucket, group), set())
            missing = sorted(set(ids) - got)
            out.append({"topic": topic, "bucket_start": bucket, "bucket_end": bucket + bucket_ms, "group": group,
                        "acked": len(ids), "received": len(got & set(ids)), "missing": len(missing),
                        "missing_ids": [(m, ids[m]) for m in missing]})
    return out


def loss_alerts(store: Store, cfg: AlertConfig, now: dt.datetime) -> list[Alert]:
    rule = cfg.audit
    if not rule:
        return []
    bucket_s = int(rule.get("bucket_s", 600))
    grace_ms = int(rule.get("grace_s", 300)) * 1000
    examples = int(rule.get("missing_examples", 10))
    now_ms = int(now.timestamp() * 1000)
    out = []
    for cell in buckets(store, dt.timedelta(seconds=int(rule.get("lookback_s", 10800))), now, bucket_s):
        if not cell["missing"] or cell["bucket_end"] + grace_ms > now_ms:
            continue
        start = dt.datetime.fromtimestamp(cell["bucket_start"] / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
        end = dt.datetime.fromtimestamp(cell["bucket_end"] / 1000, dt.UTC).strftime("%H:%MZ")
        evidence = {k: v for k, v in cell.items() if k != "missing_ids"}
        evidence["missing_examples"] = [{"msg_id": m, "key": k} for m, k in cell["missing_ids"][:examples]]
        out.append(Alert(rule.get("name", "completeness"), "LOSS",
                         f"group {cell['group']} received {cell['received']} of {cell['acked']} messages "
                         f"acknowledged on {cell['topic']} in bucket {start}-{end} ({cell['missing']} missing "
                         f"after the {grace_ms // 1000}s grace period)", evidence,
                         topic=cell["topic"], group=cell["group"], extra_subject=str(cell["bucket_start"])))
    return out
