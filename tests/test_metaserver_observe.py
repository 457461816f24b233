"""MetaServer observability API over real HTTP: alerts (SQLite and PostgreSQL) and the pipeline's aggregates.

Alerts are posted the way ``pipeline.alerts.AlertManager`` posts them (and by the manager itself); the
aggregates store is written by the pipeline's own Spark writer (``pipeline.aggregates.write_batch``) from
known metric events, so every number the endpoint and the CLI answer is checked against hand-computed values.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

import requests  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, fake_ip  # noqa: E402
from tests.support import Proc  # noqa: E402
from ykafka import events  # noqa: E402
from ykafka.admin.cli import admin  # noqa: E402
from ykafka.admin.client import AdminClient, AdminError  # noqa: E402

SINCE_FORMAT = ("since: use a positive duration of at most 366d, a number with s, m, h, d or w, "
                "e.g. 90s, 15m, 1h, 2d")


DENIED = {"detail": "authentication failed"}
MIN = 60_000


def alert_body(rule: str, **fields: Any) -> dict[str, Any]:
    """An alert exactly as the pipeline's AlertManager posts it (its event, evidence decoded)."""
    body: dict[str, Any] = {"ts": int(time.time() * 1000), "id": uuid.uuid4().hex[:16], "rule": rule, "level": "WARN",
                            "status": "firing", "topic": "orders", "group": "billing", "partition": 0,
                            "client_id": None, "reason": "lag grew in every interval",
                            "evidence": {"window": [1, 2, 3]}}
    body.update(fields)
    return body


def post(server: MetaServer, body: Any, token: str | None = ADMIN_TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if token != ADMIN_TOKEN:  # bad tokens count against their source: one of its own, not the whole suite's
        headers["X-Forwarded-For"] = fake_ip()
    return requests.post(server.url + "/v1/admin/alerts", json=body, headers=headers, timeout=10)


# --- alerts (both backends) ------------------------------------------------------------------------


def test_repost_of_same_id_updates_the_one_row(ms: MetaServer) -> None:
    admin_ = ms.admin(operator="pipeline-a")
    rule = f"lag-{uuid.uuid4().hex[:6]}"
    first = alert_body(rule, ts=1_000_000, evidence={"lag": [5, 9]})
    created = post(ms, first)
    assert created.status_code == 201, created.text
    row = created.json()
    assert {k: row[k] for k in ("id", "rule", "level", "status", "topic", "group", "partition", "client_id",
                                "reason", "evidence", "ts", "posts")} == {
        "id": first["id"], "rule": rule, "level": "WARN", "status": "firing", "topic": "orders", "group": "billing",
        "partition": 0, "client_id": None, "reason": "lag grew in every interval", "evidence": {"lag": [5, 9]},
        "ts": 1_000_000, "posts": 1}
    assert row["reported_by"] == "ops" and row["first_seen"] == row["last_seen"]
    time.sleep(0.05)
    # same id again, judged later: level, status, reason and evidence follow, the row stays one
    again = admin_.post_alert({**first, "ts": 1_060_000, "level": "err", "status": "resolved", "reason": "worse",
                               "evidence": json.dumps({"lag": [5, 9, 14]})})  # the Kafka event's string form
    assert (again["posts"], again["level"], again["status"], again["reason"], again["evidence"], again["ts"]) == (
        2, "ERR", "resolved", "worse", {"lag": [5, 9, 14]}, 1_060_000)
    assert again["first_seen"] == row["first_seen"] and again["last_seen"] > row["last_seen"]
    assert again["reported_by"] == "pipeline-a"
    # a late duplicate of the older judgement only counts as seen; it never rolls the state back
    late = post(ms, first)
    assert late.status_code == 200
    assert (late.json()["posts"], late.json()["level"], late.json()["evidence"]) == (3, "ERR", {"lag": [5, 9, 14]})
    stored = admin_.alerts(rule=rule)
    assert len(stored) == 1
    assert (stored[0]["id"], stored[0]["posts"], stored[0]["level"]) == (first["id"], 3, "ERR")


def test_list_filters_newest_first(ms: MetaServer) -> None:
    admin_ = ms.admin()
    tag = uuid.uuid4().hex[:6]
    bodies = [alert_body(f"r1-{tag}", level="WARN", topic=f"t1-{tag}", group=f"g1-{tag}"),
              alert_body(f"r1-{tag}", level="STALL", topic=f"t2-{tag}", group=f"g1-{tag}", client_id="c-7"),
              alert_body(f"r2-{tag}", level="LOSS", topic=f"t1-{tag}", group=f"g2-{tag}", partition=None),
              alert_body(f"r2-{tag}", level="OK", status="resolved", topic=f"t1-{tag}", group=f"g2-{tag}")]
    for body in bodies:
        admin_.post_alert(body)
        time.sleep(0.02)
    time.sleep(1.3)
    latest = admin_.post_alert(alert_body(f"r3-{tag}", level="ERR", topic=f"t3-{tag}", group=None))

    def ids(**filters: Any) -> list[str]:
        return [a["id"] for a in admin_.alerts(**filters)]

    b = [x["id"] for x in bodies]
    assert ids(rule=f"r1-{tag}") == [b[1], b[0]]  # newest first
    assert ids(rule=f"r2-{tag}", level="loss") == [b[2]]
    assert ids(topic=f"t1-{tag}") == [b[3], b[2], b[0]]
    assert ids(topic=f"t1-{tag}", level=["WARN", "OK"]) == [b[3], b[0]]
    assert ids(group=f"g1-{tag}", level="STALL") == [b[1]]
    assert ids(group=f"g2-{tag}", status="resolved") == [b[3]]
    assert ids(group=f"g2-{tag}", status="firing") == [b[2]]
    assert ids(client="c-7") == [b[1]]
    assert ids(topic=f"t1-{tag}", limit=2) == [b[3], b[2]]
    recent = ids(since="1s")
    assert latest["id"] in recent and not set(b) & set(recent)
    assert set(b) <= set(ids(since="1h", limit=10000))
    # as a query string, level also takes a comma list
    got = requests.get(ms.url + "/v1/admin/alerts", params={"level": "warn,stall", "rule": f"r1-{tag}"},
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10).json()
    assert [a["id"] for a in got] == [b[1], b[0]]
    with pytest.raises(AdminError) as bad:
        admin_.alerts(since="yesterday")
    assert bad.value.status == 422 and bad.value.message == SINCE_FORMAT
    with pytest.raises(AdminError) as negative:
        admin_.alerts(since="-5m")
    assert negative.value.status == 422 and "positive duration" in negative.value.message


def test_malformed_alert_is_422_and_stores_nothing(ms: MetaServer) -> None:
    rule = f"bad-{uuid.uuid4().hex[:6]}"
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({k: v for k, v in alert_body(rule).items() if k != "reason"}, "reason", "Field required"),
        (alert_body(rule, level="W4RN!"), "level", "1-16 letters"),
        (alert_body(rule, id="has spaces"), "id", "1-64 characters"),
        (alert_body(rule, status="open"), "status", "'firing' or 'resolved'"),
        (alert_body(rule, evidence="{not json"), "evidence", "not valid JSON"),
        (alert_body(rule, evidence=[1, 2]), "evidence", "must be a JSON object"),
        (alert_body(rule, ts="yesterday"), "ts", "valid integer"),
        (alert_body(rule, partition=-1), "partition", "greater than or equal to 0"),
        ({**alert_body(rule), "severity": "high"}, "severity", "Extra inputs are not permitted"),
    ]
    for body, field, message in cases:
        response = post(ms, body)
        assert response.status_code == 422, (field, response.text)
        errors = {".".join(str(p) for p in e["loc"][1:]): e["msg"] for e in response.json()["detail"]}
        assert field in errors and message in errors[field], (field, errors)
    not_json = requests.post(ms.url + "/v1/admin/alerts", data=b"{oops", timeout=10,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
    assert not_json.status_code == 422 and "JSON decode error" in not_json.text
    with pytest.raises(AdminError) as err:  # the client names the field and the reason
        ms.admin().post_alert(alert_body(rule, level=""))
    assert err.value.status == 422 and "level" in err.value.errors
    assert ms.admin().alerts(rule=rule) == []


def test_alerts_and_aggregates_need_the_admin_token(ms: MetaServer) -> None:
    rule = f"auth-{uuid.uuid4().hex[:6]}"
    for token in (None, "not-the-token"):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers["X-Forwarded-For"] = fake_ip()  # failures count per source: keep them off the suite's address
        refused = [post(ms, alert_body(rule), token=token),
                   requests.get(ms.url + "/v1/admin/alerts", headers=headers, timeout=10),
                   requests.get(ms.url + "/v1/admin/aggregates", headers=headers, timeout=10),
                   requests.get(ms.url + "/v1/admin/aggregates/errors", headers=headers, timeout=10)]
        assert [(r.status_code, r.json()) for r in refused] == [(401, DENIED)] * 4
    assert ms.admin().alerts(rule=rule) == []


def test_pipeline_alert_manager_posts_raise_and_resolve(ms: MetaServer, tmp_path: Path) -> None:
    from pipeline import burrow
    from pipeline.alerts import Alert, AlertConfig, AlertManager
    from pipeline.store import Store

    rule = f"consumer-lag-{uuid.uuid4().hex[:6]}"
    cfg = AlertConfig(sinks={"kafka": False, "metaserver": ms.url + "/", "metaserver_token": ADMIN_TOKEN})
    window = [burrow.Sample(1_000 * i, 2, 2 + 3 * i, 3 * i, True) for i in range(1, 6)]  # commits frozen, lag grows
    verdict = burrow.evaluate(window, 5, 3)
    assert verdict.status == "ERR"
    alert = Alert(rule, verdict.status, verdict.reason, verdict.evidence, topic="orders", group="billing", partition=0)
    store = Store(str(tmp_path / "store"))
    t0 = dt.datetime.now(dt.UTC)
    manager = AlertManager(store, cfg)
    raised = manager.process([alert], [rule], t0)
    assert [a["status"] for a in raised] == ["firing"]
    # a pipeline restart that delivers the same alert again (crash before its state was saved)
    AlertManager(store, cfg).deliver(raised)
    resolved = manager.process([], [rule], t0 + dt.timedelta(minutes=1))
    assert [(a["status"], a["level"]) for a in resolved] == [("resolved", "OK")]
    stored = {a["id"]: a for a in ms.admin().alerts(rule=rule)}
    assert set(stored) == {raised[0]["id"], resolved[0]["id"]}
    firing = stored[raised[0]["id"]]
    assert (firing["level"], firing["status"], firing["posts"], firing["reported_by"]) == (
        "ERR", "firing", 2, "ykafka-pipeline")
    assert (firing["topic"], firing["group"], firing["partition"], firing["reason"]) == (
        "orders", "billing", 0, verdict.reason)
    assert firing["evidence"] == json.loads(json.dumps(verdict.evidence, default=str))
    assert firing["ts"] == int(t0.timestamp() * 1000)
    cleared = stored[resolved[0]["id"]]
    assert (cleared["level"], cleared["status"], cleared["posts"]) == ("OK", "resolved", 1)
    assert cleared["evidence"] == {"was": "ERR", "since": int(t0.timestamp() * 1000)}
    assert [a["id"] for a in ms.admin().alerts(rule=rule)] == [resolved[0]["id"], raised[0]["id"]]


# --- aggregates: a store written by the pipeline's own Spark writer -----------------------------------


@dataclass
class AggStore:
    root: Path
    topic: str
    group: str
    w0: int  # window of the send metrics (two minutes ago)
    w1: int  # window of the consume metrics and the lag samples (one minute ago)
    old: int  # a window three hours ago


def metric(**fields: Any) -> tuple[Any, ...]:
    return tuple(fields.get(name) for name, _ in events.METRIC_FIELDS)


@pytest.fixture(scope="module")
def agg_store(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> AggStore:
    from pipeline.aggregates import write_batch
    from pipeline.store import Store

    root = tmp_path_factory.mktemp("pipeline-store")
    store = Store(str(root))
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    now = int(time.time() * 1000)
    w0 = now // MIN * MIN - 2 * MIN
    w1 = w0 + MIN
    old = (now - 3 * 3600_000) // MIN * MIN
    send = str(events.MetricName.SEND_LATENCY)
    ddl = events.spark_ddl("metric")
    batch0 = [
        metric(ts=w0 + 1_000, name=send, topic=topic, client_id="c1", count=10, sum=100.0, max=30.0, p50=8.0,
               p95=20.0, p99=25.0, source="stats"),
        metric(ts=w0 + 5_000, name=send, topic=topic, client_id="c2", count=30, sum=600.0, max=50.0, p50=16.0,
               p95=40.0, p99=45.0, source="stats"),
        metric(ts=old + 1_000, name=send, topic=topic, client_id="c9", count=100, sum=100.0, max=2.0, p50=1.0,
               p95=1.5, p99=2.0, source="stats"),
    ]
    batch1 = [  # same window as batch 0's first rows: partials of two micro-batches merge at read time
        metric(ts=w0 + 30_000, name=send, topic=topic, client_id="c1", count=20, sum=300.0, max=40.0, p50=12.0,
               p95=30.0, p99=35.0, source="stats"),
        metric(ts=w0 + 30_000, name=str(events.MetricName.SEND_MSGS), topic=topic, client_id="c1", count=5,
               value=500.0, source="stats"),
        metric(ts=w0 + 30_000, name=str(events.MetricName.SEND_ERRORS), topic=topic, client_id="c1", count=5,
               value=5.0, source="stats"),
        metric(ts=w1 + 1_000, name=str(events.MetricName.CONSUME_LATENCY), topic=topic, group=group,
               client_id="c3", count=4, sum=40.0, max=12.0, p50=9.0, p95=11.0, p99=12.0, source="stats"),
        metric(ts=w1 + 1_000, name=str(events.MetricName.LAG), topic=topic, group=group, partition=0, value=42.0,
               committed=8, end_offset=50, count=1, source="sampler"),
        metric(ts=w1 + 2_000, name=str(events.MetricName.LAG), topic=topic, group=group, partition=0, value=17.0,
               committed=33, end_offset=50, count=1, source="sampler"),
    ]
    assert write_batch(store, spark.createDataFrame(batch0, ddl), 0) == 3
    assert write_batch(store, spark.createDataFrame(batch1, ddl), 1) == 5
    return AggStore(root, topic, group, w0, w1, old)


@pytest.fixture(scope="module")
def agg_ms(ms_factory: Callable[..., MetaServer], agg_store: AggStore) -> MetaServer:
    return ms_factory(pipeline_store=str(agg_store.root))


SEND_W0 = {"count": 60, "mean": 16.667, "max": 50.0, "p50": 13.333, "p95": 33.333, "p99": 38.333, "p99_max": 45.0,
           "value": None, "events": 3}


def test_aggregates_exact_values(agg_ms: MetaServer, agg_store: AggStore) -> None:
    s = agg_store
    rows = agg_ms.admin().aggregates(since="15m", topic=s.topic)
    by_key = {(r["window_start"], r["name"], r["group"]): r for r in rows}
    assert set(by_key) == {(s.w0, "send.latency_ms", None), (s.w0, "send.msgs", None), (s.w0, "send.errors", None),
                           (s.w1, "consume.latency_ms", s.group), (s.w1, "lag", s.group)}
    assert by_key[(s.w0, "send.latency_ms", None)] == {"window_start": s.w0, "name": "send.latency_ms",
                                                       "topic": s.topic, "group": None, **SEND_W0}
    msgs = by_key[(s.w0, "send.msgs", None)]
    assert (msgs["count"], msgs["value"], msgs["mean"], msgs["p99"], msgs["events"]) == (5, 500.0, None, None, 1)
    assert by_key[(s.w0, "send.errors", None)]["value"] == 5.0
    consume = by_key[(s.w1, "consume.latency_ms", s.group)]
    assert {k: consume[k] for k in ("count", "mean", "max", "p50", "p95", "p99", "p99_max")} == {
        "count": 4, "mean": 10.0, "max": 12.0, "p50": 9.0, "p95": 11.0, "p99": 12.0, "p99_max": 12.0}
    lag = by_key[(s.w1, "lag", s.group)]
    assert (lag["value"], lag["max"], lag["count"], lag["mean"], lag["events"]) == (42.0, 42.0, 0, None, 2)


def test_aggregates_filters_and_ranges(agg_ms: MetaServer, agg_store: AggStore) -> None:
    s = agg_store
    admin_ = agg_ms.admin()
    assert {r["name"] for r in admin_.aggregates(topic=s.topic, group=s.group)} == {"consume.latency_ms", "lag"}
    c2 = admin_.aggregates(topic=s.topic, client="c2")
    assert [(r["name"], r["count"], r["mean"], r["p50"], r["p99"]) for r in c2] == [
        ("send.latency_ms", 30, 20.0, 16.0, 45.0)]
    by_client = admin_.aggregates(topic=s.topic, names=["send.latency_ms"], by=["name", "client_id"])
    assert {(r["client_id"], r["count"], r["p50"]) for r in by_client} == {("c1", 30, 10.667), ("c2", 30, 16.0)}
    whole = admin_.aggregates(since="15m", topic=s.topic, names=["send.latency_ms", "lag"], whole_range=True)
    assert [{k: v for k, v in r.items() if k not in ("topic",)} for r in whole] == [
        {"name": "lag", "group": s.group, "count": 0, "mean": None, "max": 42.0, "p50": None, "p95": None,
         "p99": None, "p99_max": None, "value": 42.0, "events": 2},
        {"name": "send.latency_ms", "group": None, **SEND_W0}]
    # the three-hour-old window (possibly yesterday's date partition) only within a long enough look-back
    assert s.old not in {r["window_start"] for r in admin_.aggregates(since="2h", topic=s.topic)}
    old = [r for r in admin_.aggregates(since="4h", topic=s.topic) if r["window_start"] == s.old]
    assert [(r["name"], r["count"], r["p50"], r["p99_max"]) for r in old] == [("send.latency_ms", 100, 1.0, 2.0)]
    assert admin_.aggregates(topic="no-such-topic") == []


def test_error_rates(agg_ms: MetaServer, agg_store: AggStore) -> None:
    s = agg_store
    rates = agg_ms.admin().error_rates(since="15m", side="send", topic=s.topic)
    assert rates == [{"window_start": s.w0, "topic": s.topic, "side": "send", "errors": 5.0, "msgs": 500.0,
                      "rate": 0.009901}]
    assert agg_ms.admin().error_rates(since="15m", side="consume", topic=s.topic) == []


def test_aggregates_bad_input_is_422(agg_ms: MetaServer) -> None:
    admin_ = agg_ms.admin()
    for kwargs, message in (({"since": "soon"}, SINCE_FORMAT),
                            ({"since": "0s"}, SINCE_FORMAT),
                            ({"since": "400d"}, "at most 366d"),
                            ({"by": ["name", "colour"]}, "by: 'name,colour' must name distinct dimensions")):
        with pytest.raises(AdminError) as err:
            admin_.aggregates(**kwargs)
        assert err.value.status == 422 and message in err.value.message, err.value
    with pytest.raises(AdminError) as side:
        admin_.error_rates(side="sideways")
    assert side.value.status == 422
    assert side.value.errors == {"query.side": "Input should be 'send' or 'consume'"}


def test_aggregates_503_without_a_store(ms_factory: Callable[..., MetaServer], tmp_path: Path) -> None:
    bare = ms_factory(configcenter=False)
    for call in (lambda: bare.admin().aggregates(), lambda: bare.admin().error_rates()):
        with pytest.raises(AdminError) as err:
            call()
        assert err.value.status == 503
        assert "--pipeline-store" in err.value.message and "YKAFKA_MS_PIPELINE_STORE" in err.value.message
    assert bare.admin().alerts(limit=1) == []  # alerts need no store
    missing = ms_factory(configcenter=False, pipeline_store=str(tmp_path / "never-written"))
    with pytest.raises(AdminError) as err:
        missing.admin().aggregates()
    assert err.value.status == 503 and "never-written" in err.value.message and "does not exist" in err.value.message


@pytest.fixture()
def no_pyarrow_ms(tmp_path: Path, agg_store: AggStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proc]:
    """A MetaServer process in which pyarrow cannot be imported (as without the pipeline extra);
    its store comes from the environment variable, not the flag."""
    monkeypatch.setenv("YKAFKA_MS_PIPELINE_STORE", str(agg_store.root))
    boot = "import sys; sys.modules['pyarrow'] = None; from metaserver.__main__ import main; main()"
    proc = Proc("metaserver-no-pyarrow", [sys.executable, "-c", boot, "serve", "--host", "127.0.0.1", "--port",
                                          "{port}", "--db-url", f"sqlite:///{tmp_path / 'ms.db'}",
                                          "--admin-token", f"ops:{ADMIN_TOKEN}"], tmp_path / "ms.log").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_aggregates_503_without_pyarrow(no_pyarrow_ms: Proc) -> None:
    client = AdminClient(no_pyarrow_ms.url, ADMIN_TOKEN)
    with pytest.raises(AdminError) as err:
        client.aggregates()
    assert err.value.status == 503 and "pip install 'ykafka-server[pipeline]'" in err.value.message
    assert client.post_alert(alert_body("still-works"))["posts"] == 1  # the rest of the MetaServer runs


def test_pipeline_latency_rule_over_the_store_alerts_the_metaserver(agg_ms: MetaServer, agg_store: AggStore,
                                                                     tmp_path: Path) -> None:
    from pipeline.alerts import AlertConfig, AlertManager, latency_alerts
    from pipeline.store import Store

    s = agg_store
    rule = f"send-latency-p99-{uuid.uuid4().hex[:6]}"
    cfg = AlertConfig(window_s=900, latency=[{"name": rule, "metric": "send.latency_ms", "stat": "p99",
                                              "threshold_ms": 30, "level": "WARN", "topics": [s.topic]}],
                      sinks={"kafka": False, "metaserver": agg_ms.url, "metaserver_token": ADMIN_TOKEN})
    store = Store(str(s.root))
    now = dt.datetime.now(dt.UTC)
    found = latency_alerts(store, cfg, now)
    state = Store(str(tmp_path / "state"))  # keep the de-duplication state out of the shared store
    delivered = AlertManager(state, cfg).process(found, [rule], now)
    assert len(delivered) == 1
    [stored] = agg_ms.admin().alerts(rule=rule, level="WARN", topic=s.topic)
    assert stored["id"] == delivered[0]["id"] and stored["status"] == "firing"
    assert stored["reason"] == "send.latency_ms p99 38.333 ms > 30 ms over the last 900s"
    assert stored["evidence"]["value"] == 38.333
    [served] = agg_ms.admin().aggregates(since="15m", topic=s.topic, names=["send.latency_ms"], whole_range=True)
    assert served["p99"] == stored["evidence"]["value"] and stored["evidence"]["window"]["count"] == served["count"]


def test_cli_alerts_and_aggregates(agg_ms: MetaServer, agg_store: AggStore) -> None:
    s = agg_store
    rule = f"cli-{uuid.uuid4().hex[:6]}"
    agg_ms.admin().post_alert(alert_body(rule, level="STALL", topic=s.topic, group=s.group,
                                         reason="commits frozen at 33"))
    agg_ms.admin().post_alert(alert_body(rule, level="WARN", topic=s.topic, group="other"))
    runner = CliRunner()
    env = {"YKAFKA_METASERVER": agg_ms.url, "YKAFKA_ADMIN_TOKEN": ADMIN_TOKEN, "COLUMNS": "250"}

    def run(*args: str, ok: bool = True) -> str:
        result = runner.invoke(admin, list(args), env=env, terminal_width=250)
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    table = run("alerts", "--level", "stall", "--since", "1h")
    assert "STALL" in table and rule in table and "commits frozen at 33" in table and s.group in table
    assert "WARN" not in table
    listed = json.loads(run("alerts", "--level", "STALL", "--level", "WARN", "--json"))
    mine = [a for a in listed if a["rule"] == rule]
    assert sorted(a["level"] for a in mine) == ["STALL", "WARN"]
    assert json.loads(run("--json", "alerts", "--level", "STALL")) == agg_ms.admin().alerts(level="STALL")

    shown = run("aggregates", "--since", "15m", "--topic", s.topic)
    for value in ("send.latency_ms", "consume.latency_ms", "lag", "16.667", "13.333", "33.333", "38.333", "45.0",
                  "500.0", "42.0", s.group):
        assert value in shown, value
    assert json.loads(run("aggregates", "--since", "15m", "--topic", s.topic, "--group", s.group, "--json")) == \
        agg_ms.admin().aggregates(since="15m", topic=s.topic, group=s.group)
    rates = run("aggregates", "--errors", "send", "--topic", s.topic)
    assert "0.009901" in rates and "500.0" in rates
    bad = run("aggregates", "--since", "soon", ok=False)
    assert "HTTP 422" in bad and "e.g. 90s, 15m, 1h, 2d" in bad
