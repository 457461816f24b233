"""Store, lookup, aggregate reader and alert de-duplication, on real files and a real HTTP webhook (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.aggregates import error_rates, partials, read_aggregates
from pipeline.alerts import Alert, AlertConfig, AlertManager
from pipeline.decode import with_time_partitions
from pipeline.store import Store
from pipeline.trace_store import lookup
from ykafka import events

NOW = dt.datetime(2026, 5, 4, 10, 30, tzinfo=dt.UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def trace_table(rows: list[dict[str, Any]]) -> pa.Table:
    full = []
    for row in rows:
        stamp = dt.datetime.fromtimestamp(row["ts"] / 1000, dt.UTC)
        full.append({**{n: None for n in events.TRACE_NAMES}, **row, "date": stamp.strftime("%Y-%m-%d"),
                     "hour": stamp.strftime("%H")})
    schema = events.arrow_schema("trace").append(pa.field("date", pa.string())).append(pa.field("hour", pa.string()))
    return pa.Table.from_pylist(full, schema=schema)


def test_batch_writes_are_idempotent_and_lookup_reads_only_its_partitions(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    lifecycle = [
        {"ts": NOW_MS - 5000, "kind": "produced", "msg_id": "m1", "topic": "orders", "key": "k1"},
        {"ts": NOW_MS - 4990, "kind": "acked", "msg_id": "m1", "topic": "orders", "key": "k1", "partition": 2,
         "offset": 41},
        {"ts": NOW_MS - 4000, "kind": "consumed", "msg_id": "m1", "topic": "orders", "key": "k1", "group": "g1"},
        {"ts": NOW_MS - 4000, "kind": "processed", "msg_id": "m1", "topic": "orders", "key": "k1", "group": "g1"},
        {"ts": NOW_MS - 3000, "kind": "acked", "msg_id": "m2", "topic": "payments", "key": "k1"},
    ]
    assert store.write(trace_table(lifecycle[::-1]), "trace", ["date", "hour", "topic"], 7, "trace") == 5
    store.write(trace_table(lifecycle[::-1]), "trace", ["date", "hour", "topic"], 7, "trace")  # replayed batch
    assert len(store.files("trace")) == 2  # one file per topic directory, not four
    # a broken file three hours earlier: a lookup of the last hour must not even open it
    old = Path(store.path("trace", "date=2026-05-04", "hour=07", "topic=orders"))
    old.mkdir(parents=True)
    (old / "b000000000001-trace-0.parquet").write_bytes(b"not parquet")

    rows = lookup(store, "k1", topic="orders", since=dt.timedelta(hours=1), until=NOW)
    assert [(r["kind"], r["msg_id"]) for r in rows] == [("produced", "m1"), ("acked", "m1"), ("consumed", "m1"),
                                                        ("processed", "m1")]
    assert rows[1]["partition"] == 2 and rows[1]["offset"] == 41
    both = lookup(store, "k1", since=dt.timedelta(hours=1), until=NOW)
    assert sorted({r["topic"] for r in both}) == ["orders", "payments"]
    assert [r["kind"] for r in lookup(store, msg_id="m2", until=NOW)] == ["acked"]
    assert lookup(store, "absent", until=NOW) == []


def agg_table(rows: list[dict[str, Any]]) -> pa.Table:
    cols = ["window_start", "name", "topic", "group", "client_id", "cluster", "count", "sum", "max", "p50w", "p95w",
            "p99w", "pcount", "p99_max", "value", "events"]
    types = {"window_start": pa.int64(), "count": pa.int64(), "pcount": pa.int64(), "events": pa.int64(),
             "name": pa.string(), "topic": pa.string(), "group": pa.string(), "client_id": pa.string(),
             "cluster": pa.string(), "date": pa.string()}
    schema = pa.schema([(c, types.get(c, pa.float64())) for c in [*cols, "date"]])
    full = [{**dict.fromkeys(cols), **r, "date": "2026-05-04"} for r in rows]
    return pa.Table.from_pylist(full, schema=schema)


def test_aggregate_partials_merge_across_batches(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    window = NOW_MS // 60_000 * 60_000 - 60_000
    one = {"window_start": window, "name": "consume.latency_ms", "topic": "orders", "group": "g1",
           "client_id": "c1", "cluster": "dc-a"}
    store.write(agg_table([{**one, "count": 100, "sum": 1000.0, "max": 40.0, "p50w": 100 * 8.0, "p95w": 100 * 20.0,
                            "p99w": 100 * 30.0, "pcount": 100, "p99_max": 30.0, "events": 1}]),
                "aggregates", ["date"], 1, "agg")
    store.write(agg_table([{**one, "client_id": "c2", "count": 300, "sum": 6000.0, "max": 90.0, "p50w": 300 * 16.0,
                            "p95w": 300 * 40.0, "p99w": 300 * 80.0, "pcount": 300, "p99_max": 80.0, "events": 1},
                           {**one, "name": "send.msgs", "group": None, "count": 980, "value": 980.0, "events": 1},
                           {**one, "name": "send.errors", "group": None, "count": 20, "value": 20.0, "events": 1}]),
                "aggregates", ["date"], 2, "agg")
    rows = read_aggregates(store, dt.timedelta(minutes=5), NOW, names=["consume.latency_ms"])
    assert len(rows) == 1
    row = rows[0]
    assert (row["window_start"], row["count"], row["mean"], row["max"], row["p50"], row["p95"], row["p99"],
            row["p99_max"]) == (window, 400, 17.5, 90.0, 14.0, 35.0, 67.5, 80.0)
    per_client = read_aggregates(store, dt.timedelta(minutes=5), NOW, names=["consume.latency_ms"],
                                 by=("name", "client_id"))
    assert [(r["client_id"], r["count"]) for r in per_client] == [("c1", 100), ("c2", 300)]
    rates = error_rates(store, dt.timedelta(minutes=5), NOW, whole_range=True)
    assert [(r["topic"], r["errors"], r["msgs"], r["rate"]) for r in rates] == [("orders", 20.0, 980.0, 0.02)]


def test_partials_and_time_partitions_of_a_metrics_batch(tmp_path: Path) -> None:
    """The metrics micro-batch's partials, grouped with pyarrow from its collected table (issue 39: was a second
    Spark job), keep Spark's rules: a lag row counts 0 messages and gives its value as the window's max, a null
    count is 0, a null percentile adds nothing to ``pcount``, null keys and a null time are groups of their own."""
    window = NOW_MS // 60_000 * 60_000
    base = {n: None for n in events.METRIC_NAMES}
    one = {"topic": "orders", "client_id": "c1", "cluster": "dc-a"}
    rows = [
        {**base, **one, "ts": window + 1_000, "name": "send.latency_ms", "count": 10, "sum": 50.0, "max": 9.0,
         "p50": 4.0, "p95": 8.0, "p99": 9.0},
        {**base, **one, "ts": window + 2_000, "name": "send.latency_ms", "max": 3.0},
        {**base, **one, "ts": window + 3_000, "name": str(events.MetricName.LAG), "group": "g1", "count": 1,
         "value": 42.0},
        {**base, **one, "ts": window + 4_000, "name": str(events.MetricName.LAG), "group": "g1", "count": 1,
         "value": 17.0},
        {**base, **one, "ts": None, "name": "send.msgs", "count": 5, "value": 5.0},
    ]
    table = with_time_partitions(pa.Table.from_pylist(rows, schema=events.arrow_schema("metric")))
    assert table.column("date").to_pylist() == ["2026-05-04"] * 4 + [None]
    assert table.column("hour").to_pylist() == ["10"] * 4 + [None]
    out = partials(table, 60)
    assert out.column_names == ["window_start", "name", "topic", "group", "client_id", "cluster", "count", "sum",
                                "max", "p50w", "p95w", "p99w", "pcount", "p99_max", "value", "events", "date"]
    assert not out.schema.field("events").nullable and out.schema.field("count").type == pa.int64()
    got = {r["name"]: {k: v for k, v in r.items() if k not in ("name", "topic", "client_id", "cluster")}
           for r in out.to_pylist()}
    assert got == {
        "send.latency_ms": {"window_start": window, "group": None, "count": 10, "sum": 50.0, "max": 9.0,
                            "p50w": 40.0, "p95w": 80.0, "p99w": 90.0, "pcount": 10, "p99_max": 9.0, "value": None,
                            "events": 2, "date": "2026-05-04"},
        str(events.MetricName.LAG): {"window_start": window, "group": "g1", "count": 0, "sum": 0.0, "max": 42.0,
                                     "p50w": None, "p95w": None, "p99w": None, "pcount": 0, "p99_max": None,
                                     "value": None, "events": 2, "date": "2026-05-04"},
        "send.msgs": {"window_start": None, "group": None, "count": 5, "sum": 0.0, "max": None, "p50w": None,
                      "p95w": None, "p99w": None, "pcount": 0, "p99_max": None, "value": 5.0, "events": 1,
                      "date": None},
    }


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_alerts_are_raised_once_per_level_and_resolved_once(tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received.clear()
    try:
        store = Store(str(tmp_path / "store"))
        cfg = AlertConfig(sinks={"kafka": False, "webhook": f"http://127.0.0.1:{server.server_port}/hook"})

        def lag(level: str) -> Alert:
            return Alert("consumer-lag", level, f"{level} reason", {"window": [[1, 5, 10, 5, True]]}, topic="t",
                         group="g", partition=0)

        manager = AlertManager(store, cfg)
        assert [a["level"] for a in manager.process([lag("STALL")], ["consumer-lag"], NOW)] == ["STALL"]
        assert manager.process([lag("STALL")], ["consumer-lag"], NOW) == []  # still stalled: no repeat
        # a restarted pipeline remembers what it raised
        manager = AlertManager(store, cfg)
        assert manager.process([lag("STALL")], ["consumer-lag"], NOW) == []
        escalated = manager.process([lag("ERR")], ["consumer-lag"], NOW)
        assert [(a["level"], a["status"]) for a in escalated] == [("ERR", "firing")]
        resolved = manager.process([], ["consumer-lag"], NOW)
        assert [(a["level"], a["status"], a["group"], a["partition"]) for a in resolved] == [
            ("OK", "resolved", "g", 0)]
        assert manager.process([], ["consumer-lag"], NOW) == []
        assert [(h["level"], h["status"]) for h in _Hook.received] == [("STALL", "firing"), ("ERR", "firing"),
                                                                       ("OK", "resolved")]
        assert _Hook.received[0]["evidence"] == {"window": [[1, 5, 10, 5, True]]}
        assert _Hook.received[0]["id"] != _Hook.received[1]["id"]
    finally:
        server.shutdown()
