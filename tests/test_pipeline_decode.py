"""pipeline/decode.py in Spark: a trace batch's rows become typed events the way ykafka.events.decode reads them."""

from __future__ import annotations

from typing import Any

from pipeline.decode import decode
from ykafka import events


def test_spark_decode_derives_the_times_of_rows_written_without_them(spark: Any) -> None:
    """An acked row with a null ts (the fused keyless callback's) is sent at msg_ts and acked latency_ms later,
    in Spark as in events.derive_times; a row with its times keeps them. Both imply their produced step."""
    at_send = events.spread((None, "acked", None, "t", None))
    constant = events.spread((None, None, None, None, "dc-t"))
    rows = [(at_send, 1, 7, 1_750_000_000_000, 25.5, constant),
            (1_750_000_001_000, "acked", None, "t", "k", 1, 8, 1_750_000_000_990, 10.25, None, None, None, None,
             "dc-t", 1_750_000_000_990)]
    value = events.encode_rows("trace", rows, {"client_id": "c-9"})
    raw = spark.createDataFrame([(bytearray(value),)], "value binary")
    typed = decode(raw, "trace").select("msg_id", "kind", "ts", "sent_ts", "client_id")
    got = sorted(tuple(r) for r in typed.collect())
    assert got == [("t/1/7", "acked", 1_750_000_000_025, 1_750_000_000_000, "c-9"),
                   ("t/1/7", "produced", 1_750_000_000_000, None, "c-9"),
                   ("t/1/8", "acked", 1_750_000_001_000, 1_750_000_000_990, "c-9"),
                   ("t/1/8", "produced", 1_750_000_000_990, None, "c-9")]
    _kind, python = events.decode(value)  # the Python reader agrees
    assert sorted((e["msg_id"], e["kind"], e["ts"]) for e in python) == [g[:3] for g in got]


def test_events_of_an_apps_own_topic_are_its_own_and_a_claim_of_another_app_is_left_out(spark: Any) -> None:
    """Issue 37: on a secured cluster app A writes only ``__ykafka_<kind>.A``. An event there is A's whatever its
    payload says; one claiming app B is forged: decode flags it, drop_forged leaves it out and counts it. On the
    shared topics (the open stack) the payload's app stands: nothing there proves who wrote it."""
    from pipeline.decode import FORGED, drop_forged

    now = 1_750_000_000_000
    honest = events.encode_rows("client", [[now, "c-a", "app-a"], [now, "c-quiet", None]])
    forged = events.encode_rows("client", [[now, "c-forged", "app-b"], [now, "c-forged2", "app-b"]])
    shared = events.encode_rows("client", [[now, "c-open", "app-b"]])
    raw = spark.createDataFrame([
        (events.app_topic("client", "app-a"), bytearray(honest)),
        (events.app_topic("client", "app-a"), bytearray(forged)),
        (events.CLIENTS_TOPIC, bytearray(shared))], "topic string, value binary")
    table = decode(raw, "client").select("client_id", "app", FORGED).toArrow()
    kept, found = drop_forged(table)
    assert sorted(zip(kept.column("client_id").to_pylist(), kept.column("app").to_pylist(), strict=True)) == [
        ("c-a", "app-a"), ("c-open", "app-b"), ("c-quiet", "app-a")]
    assert found == {("app-a", "app-b"): 2} and FORGED not in kept.column_names
    trace = events.encode_rows("trace", [(now, "consumed", "m-1", "t")], {"client_id": "c-forged", "app": "app-b"})
    raw = spark.createDataFrame([(events.app_topic("trace", "app-a"), bytearray(trace))], "topic string, value binary")
    kept, found = drop_forged(decode(raw, "trace").toArrow())
    assert kept.num_rows == 0 and found == {("app-a", "app-b"): 1}
    # decode's expressions are built once and every later batch reuses them (issue 39): another frame of the same
    # shape gets its own rows, attributed by its own topics
    again = spark.createDataFrame([
        (events.app_topic("client", "app-c"), bytearray(events.encode_rows("client", [[now, "c-c", None]]))),
        (events.CLIENTS_TOPIC, bytearray(events.encode_rows("client", [[now, "c-open2", "app-d"]])))],
        "topic string, value binary")
    from pipeline.decode import _plan

    assert _plan("client", False, True) is _plan("client", False, True)
    assert sorted(tuple(r) for r in decode(again, "client").select("client_id", "app", FORGED).collect()) == [
        ("c-c", "app-c", None), ("c-open2", "app-d", None)]
