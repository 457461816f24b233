"""Message trace of the disk spill: a traced message that waits on disk shows ``spilled`` and ``replayed``
steps besides ``produced`` / ``acked`` (real broker, frozen with SIGSTOP while the messages are sent: they
time out of librdkafka into the spill; the trace events wait in the sink until the broker is back)."""

from __future__ import annotations

from pathlib import Path

from tests.pipeline_fixtures import read_events, unique, wait_until
from tests.support import Broker
from ykafka import Producer, events


def _spill_then_replay(broker: Broker, tmp_path: Path, topic: str, ids: bool = False, unkeyed: int = 0,
                       **conf: object) -> list[bytes]:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "ykafka.cache.dir": str(tmp_path),
                         "ykafka.report.enabled": False, "spill.after.ms": 1500, "health.probe.interval.ms": 200,
                         "log_level": 0, **conf})
    engine = producer.disaster_recovery
    assert engine is not None
    acked: list[bytes] = []
    try:
        producer.produce(topic, b"warm-up", key=b"warm")  # resolves the topic, opens the link
        assert producer.flush(10) == 0
        broker.freeze()
        for i in range(20):
            producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(),
                             headers=[("ykafka-id", f"id-{i}".encode())] if ids else None,
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
            producer.poll(0)
        for i in range(unkeyed):  # no key: the direct path's shared callback (the trace's fused twin at 100 %)
            producer.produce(topic, f"u{i}".encode(),
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        try:
            wait_until(lambda: producer.poll(0.05) >= 0
                       and engine.status()["spill"]["default"]["depth"] == 20 + unkeyed,
                     timeout=20)  # all timed out of librdkafka into the spill
        finally:
            broker.thaw()
        assert engine.wait_idle(30), engine.status()
        wait_until(lambda: producer.poll(0.1) >= 0 and len(acked) == 20 + unkeyed, timeout=20)
    finally:
        producer.close()
    return acked


def test_spilled_and_replayed_steps_at_full_rate(obs_broker, tmp_path: Path) -> None:
    topic = unique("trace-spill")
    acked = _spill_then_replay(obs_broker, tmp_path, topic, unkeyed=5, **{"trace.enabled": True,
                                                                          "trace.sample.rate": 1.0})
    assert sorted(acked) == sorted([f"v{i}".encode() for i in range(20)] + [f"u{i}".encode() for i in range(5)])
    steps = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 25 * 4 + 2,
                        lambda e: e["topic"] == topic)
    by_key: dict[str, list[str]] = {}
    for e in sorted(steps, key=lambda e: (e["ts"], events.KIND_ORDER.get(e["kind"], 0))):
        by_key.setdefault(e["key"], []).append(e["kind"])
    for i in range(20):
        kinds = by_key[f"k{i}"]
        assert sorted(kinds) == ["acked", "produced", "replayed", "spilled"], (i, kinds)
    replayed = [e for e in steps if e["kind"] == "replayed"]
    assert all(e["partition"] is not None and e["offset"] is not None for e in replayed)
    assert all(e["detail"] == "replayed from the disk spill" and e["cluster"] == "default" for e in replayed)
    assert sorted(by_key["warm"]) == ["acked", "produced"]  # never spilled: no spill steps
    # the unkeyed ones failed on the fused callback, were spilled by the engine and traced once each
    assert sorted(by_key[None]) == ["acked"] * 5 + ["produced"] * 5 + ["replayed"] * 5 + ["spilled"] * 5


def test_spill_steps_follow_the_sampling_decision(obs_broker, tmp_path: Path) -> None:
    """At 30 % with ykafka.message.id a message is traced when a hash of its id says so: exactly those
    messages get spill steps, under their id."""
    topic = unique("trace-spill-sampled")
    _spill_then_replay(obs_broker, tmp_path, topic, ids=True,
                       **{"trace.enabled": True, "trace.sample.rate": 0.3, "ykafka.message.id": True})
    from ykafka.tracing import Tracer

    steps = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 1, lambda e: e["topic"] == topic, timeout=8)
    spilled = {e["msg_id"] for e in steps if e["kind"] == "spilled"}
    acked_ids = {e["msg_id"] for e in steps if e["kind"] == "acked" and e["key"] != "warm"}
    assert spilled == acked_ids  # the same messages, under the same ids
    expected = {f"id-{i}" for i in range(20) if Tracer.sampled(f"id-{i}", 0.3)}
    assert spilled == expected and 0 < len(expected) < 20
