"""The DR engine's own clients on a lossy network: a real Kafka node behind a real Toxiproxy (tests/toxiproxy.py).

Every connection the engine's client makes to the pool's dc-a goes through the proxy (dc-a advertises the proxy's
port on a listener of its own); the read-back uses dc-a's own port. Toxiproxy's ``limit_data`` toxic closes a
connection after its first byte of answers: the broker has stored the produce request whose answer is cut, and
librdkafka sends it again on a new connection. A plain producer stores it twice; the idempotent one (sequence
numbers per partition) is told by the broker it already has it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import toxiproxy
from tests.dr_fixtures import DEFAULT_HEALTH, create_topic, make_engine, read_all, unique
from tests.helpers import wait_until
from tests.support import Broker
from tests.test_spill_chaos import Stream
from ykafka.dr.engine import RouteSpec

pytestmark = pytest.mark.broker("kafka")


@pytest.fixture
def proxied(one_broker: Broker, tmp_path: Path) -> Iterator[tuple[toxiproxy.Toxiproxy, str]]:
    """A Toxiproxy in front of the pool's dc-a, and the bootstrap address behind it."""
    binary = toxiproxy.binary()
    if binary is None:
        pytest.skip(toxiproxy.HINT)
    assert one_broker.proxied is not None, "the durable pool's dc-a has a proxied listener"
    inner, outer = one_broker.proxied
    net = toxiproxy.Toxiproxy(binary, tmp_path / "toxiproxy.log")
    try:
        net.proxy("dc-a", outer, f"127.0.0.1:{inner}")
        yield net, f"127.0.0.1:{outer}"
    finally:
        net.close()


def _read_back(broker: Broker, topic: str, sent: list[int]) -> tuple[list[Any], Counter[int], list[int]]:
    """dc-a's records of ``topic`` (read through its own port), the copies of each value, the values stored twice."""
    on_a = read_all(broker.bootstrap, topic, expect=len(sent))
    counts = Counter(int(m.value() or b"0") for m in on_a)
    return on_a, counts, sorted(v for v, n in counts.items() if n > 1)


def test_answers_cut_mid_request_store_no_second_copy(one_broker: Broker, proxied: tuple[toxiproxy.Toxiproxy, str],
                                                      tmp_path: Path) -> None:
    """Eight times, every connection to dc-a is closed after the first byte of an answer for 0.4 s, under a keyed
    stream of ~800 records a second. The engine's client is idempotent (acks=all, the default), so dc-a keeps one
    copy of each record; before, a plain client with one request in flight stored the retries of the requests whose
    answers were cut a second time (234 of 4,789 records in a run)."""
    net, bootstrap = proxied
    topic = unique("dr-cut-answers")
    create_topic(one_broker.bootstrap, topic, 3)
    engine = make_engine({"dc-a": bootstrap}, RouteSpec("dc-a"), tmp_path / "dr", **DEFAULT_HEALTH)
    try:
        stream = Stream(engine, topic).start()
        wait_until(lambda: len(stream.acked) >= 300, 20, message="300 acknowledged through the proxy")
        for _ in range(8):
            net.toxic("dc-a", "limit_data", {"bytes": 1}, "downstream")
            time.sleep(0.4)
            net.clear("dc-a")
            time.sleep(0.4)
        stream.stop()
        assert engine.wait_idle(60), engine.status()
        status = engine.status()
    finally:
        engine.close()
    on_a, counts, twice = _read_back(one_broker, topic, stream.sent)
    link = status["links"]["dc-a"]
    said = (f"sent={len(stream.sent)} acked={len(stream.acked)} stored={len(on_a)} twice={len(twice)} "
            f"first={twice[:5]} spilled={link['spilled']} errors={stream.errors[:3]}")
    print(said)
    assert set(counts) == set(stream.sent) and not stream.errors, said  # nothing lost
    assert link["spilled"] == 0, said  # no engine re-send: any second copy would be a client retry
    assert not twice, said


@pytest.mark.parametrize(("conf", "idempotent", "in_flight"), [
    ({}, True, 1),  # acks=all by default: idempotent, one request at a time (docs/reliability.md, 3-node kills)
    ({"acks": "1"}, False, 1),  # librdkafka refuses idempotence without acks=all
    ({"acks": -1}, True, 1),
    ({"max.in.flight.requests.per.connection": 5}, True, 5),  # the application's choice stands
    ({"enable.idempotence": False}, False, 1),  # the application's choice stands
])
def test_engine_clients_are_idempotent_where_acks_allow(tmp_path: Path, conf: dict[str, object], idempotent: bool,
                                                        in_flight: int) -> None:
    """The settings of the engine's own clients, as librdkafka takes them (a client is built from them: a
    combination it refuses, idempotence with acks=1, raises here)."""
    from confluent_kafka import Producer as RawProducer

    engine = make_engine({"dc-a": "127.0.0.1:9"}, RouteSpec("dc-a"), tmp_path / "dr", client_conf=conf)
    try:
        direct = engine._direct_conf("dc-a")
    finally:
        engine.close(1.0)
    assert str(direct.get("enable.idempotence", False)).lower() in (("true",) if idempotent else ("false",))
    assert direct.get("max.in.flight.requests.per.connection") == in_flight
    RawProducer({k: v for k, v in direct.items() if k != "error_cb"}).flush(0)



def test_a_slow_cluster_that_answers_is_not_called_down(one_broker: Broker, proxied: tuple[toxiproxy.Toxiproxy, str],
                                                       tmp_path: Path) -> None:
    """350 ms more each way between a ``ykafka.Producer`` and dc-a (a round trip of ~0.7 s: a congested cross-region
    link, a broker in long GC pauses) for 8 s, under a stream of keyed and unkeyed sends on the Producer's direct
    path, with the default health settings: the cluster answers, slowly, so it stays up and nothing is spilled or
    stored twice. Before, the metadata probe gave up after 0.5 s and the direct path's acknowledgements do not
    reach the health check, so three probes in a row failed and the cluster was called down while it was
    acknowledging writes: its in-flight messages were purged and sent again (the soak of 2026-12-01, seed 101:
    677 records stored twice at a 268 ms latency fault)."""
    from tests.test_dr_direct import Stream as DirectStream
    from ykafka import Producer

    net, bootstrap = proxied
    topic = unique("dr-slow-link")
    create_topic(one_broker.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "cache"),
                         "ykafka.report.enabled": False, "log_level": 0})
    try:
        stream = DirectStream(producer, topic).start()
        engine = producer.disaster_recovery
        assert engine is not None
        # a long-running producer: its health probe has answered before the link slows down (the first probe, 5 s
        # in, opens the probe's connection; a cold one needs more round trips than this test is about)
        wait_until(lambda: len(stream.acked) >= 300 and engine.status()["clusters"]["default"]["last_probe_ms"],
                   20, message="300 acknowledged through the proxy and a health probe answered")
        acked_before = len(stream.acked)
        for direction in ("downstream", "upstream"):
            net.toxic("dc-a", "latency", {"latency": 350, "jitter": 0}, direction)
        time.sleep(8.0)
        acked_slow = len(stream.acked) - acked_before
        net.clear("dc-a")
        stream.stop()
        assert producer.flush(60) == 0
        assert engine.wait_idle(60), engine.status()
        status = engine.status()
    finally:
        producer.close()
    on_a, counts, twice = _read_back(one_broker, topic, stream.sent)
    link = status["links"]["default"]
    health = status["clusters"]["default"]
    said = (f"sent={len(stream.sent)} acked={len(stream.acked)} acked_while_slow={acked_slow} stored={len(on_a)} "
            f"twice={len(twice)} spilled={link['spilled']} health={health} errors={stream.errors[:3]}")
    assert acked_slow > 0, said  # the link was slow, not cut
    assert set(counts) == set(stream.sent) and not stream.errors, said  # nothing lost
    assert health["transitions"] == 0, said
    assert link["spilled"] == 0 and not twice, said
