"""Dual-DC failover and failback on two real clusters, counting every message.

dc-a is the primary, dc-b the standby, both durable clusters of two brokers. Writes move to dc-b while dc-a
is down, return to dc-a as soon as it answers, and what dc-b took during the outage is copied back to dc-a by the
failback sync job. Counts are strict: lost = 0 and duplicated = 0, per-key order checked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.dr_fixtures import (
    DEFAULT_HEALTH,
    create_topic,
    in_key_order,
    key_overtakes,
    make_engine,
    partition_counts,
    read_all,
    strict_count,
    tally,
    unique,
)
from tests.support import Broker
from tests.test_spill_chaos import KEYS, Stream
from ykafka import headers as H
from ykafka.dr.engine import RouteSpec


def _values(records: list[Any]) -> list[int]:
    return [int(m.value() or b"0") for m in records]


def _wait(predicate: Any, timeout: float, what: str, evidence: Callable[[], Any] | None = None) -> float:
    """Seconds until ``predicate()`` holds; a timeout's error carries ``evidence()`` (the engine's status), so a CI
    rerun's traceback (``--rerun-show-tracebacks``) keeps why."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f"; status: {evidence()}" if evidence is not None else ""))
        time.sleep(0.02)
    return time.monotonic() - start


@dataclass
class Outage:
    """What a break of dc-a under load left: every message sent, both clusters read back, the engine's status."""

    stream: Stream
    broke_at: float
    failover_s: float
    failback_s: float
    sent_at_failback: int
    status: dict[str, Any]
    on_a: list[Any]
    on_b: list[Any]

    @property
    def synced(self) -> list[Any]:
        return [m for m in self.on_a if H.synced_from(m.headers())]

    @property
    def direct(self) -> list[Any]:
        return [m for m in self.on_a if not H.synced_from(m.headers())]

    def counts(self) -> dict[str, int]:
        """Strict: a message acknowledged before the break and read back twice is a duplicate, not a retry."""
        return strict_count(self.stream.sent, _values(self.on_a), {i for i, at in self.stream.acked
                                                                    if at < self.broke_at})


def _break_under_load(dc_brokers: dict[str, Broker], tmp_path: Path, name: str, fail: Callable[[Broker], Any],
                      heal: Callable[[Broker], Any], standby_acks: int = 100,
                      failback_timeout: float = 15.0) -> Outage:
    """Send a keyed stream to dc-a, ``fail`` it once 300 are acknowledged, ``heal`` it once dc-b acknowledged
    ``standby_acks`` (0: at once after the switch, while dc-a's held messages are still being handed to dc-b),
    keep sending 300 after the failback, wait until the sync is done; read both clusters back."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique(name)
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    # the default health settings and spill.after.ms: the tight test ones flap on a loaded machine (a slow probe
    # declares the restarted primary down again and the writes leave it once more)
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "auto"),
                         tmp_path / "dr", **DEFAULT_HEALTH)
    try:
        stream = Stream(engine, topic).start()
        _wait(lambda: len(stream.acked) >= 300, 20, "300 acknowledged by the primary", engine.status)
        fail(a)
        broke_at = time.monotonic()
        failover_s = _wait(lambda: engine.status()["routes"][topic]["active"] == "dc-b", 15, "the switch",
                           engine.status)
        # counted on dc-b's link: dc-a may have acknowledged hundreds more before it stopped answering, and a heal at
        # once after the switch left the standby nothing (on_standby 0 in a CI run)
        _wait(lambda: engine.status()["links"].get("dc-b", {}).get("delivered", 0) >= standby_acks, 15,
              "writes acknowledged by the standby", engine.status)
        heal(a)
        failback_s = _wait(lambda: engine.status()["routes"][topic]["active"] == "dc-a", failback_timeout,
                           "failback", engine.status)
        sent_at_failback = len(stream.sent)
        _wait(lambda: len(stream.sent) >= sent_at_failback + 300, 15, "writes after the failback", engine.status)
        stream.stop()
        assert engine.wait_idle(90), engine.status()
        status = engine.status()
    finally:
        engine.close()
    return Outage(stream, broke_at, failover_s, failback_s, sent_at_failback, status,
                  read_all(a.bootstrap, topic, expect=len(stream.sent)), read_all(b.bootstrap, topic))


def test_primary_killed_under_load_fails_over_and_back(dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    """dc-a (durable) SIGKILLed under load: writes move to dc-b, come back when dc-a restarts on its bucket, and
    the failback sync copies the outage to dc-a. dc-a ends with every message sent: lost = 0, duplicated = 0
    (a message in flight at the kill was stored by dc-a, its acknowledgement lost, and sent again through dc-b:
    a retry, counted apart), and no key overtaken: on dc-b, in what was synced back, or in dc-a's direct writes
    (what dc-a's client held at the switch is re-routed to dc-b before any newer write of its key)."""
    run = _break_under_load(dc_brokers, tmp_path, "failover", Broker.kill, Broker.start)
    counts, outage, status = run.counts(), set(_values(run.on_b)), run.status
    # every assertion carries this line: a CI rerun's traceback keeps it (captured output is not kept)
    said = (f"failover: {counts} failover_s={run.failover_s:.2f} failback_s={run.failback_s:.2f} "
            f"on_standby={len(outage)} synced={len(run.synced)} sync={status['sync']}")
    print(said)
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0, said
    assert not run.stream.errors, (run.stream.errors[:5], said)
    assert len(outage) > 100 and len(run.on_b) == len(outage), said  # the standby took each outage message once
    assert sorted(_values(run.synced)) == sorted(outage), said  # ...and the failback copied every one back
    late = [i for i in run.stream.sent if i >= run.sent_at_failback + 200]  # well after the failback
    direct = set(_values(run.direct))
    astray = [i for i in late if i not in direct or i in outage]
    assert late and not astray, (len(late), astray[:5], said, status)
    # per-key order, strictly: what dc-a's client held at the switch was re-routed to dc-b ahead of every newer
    # write of its key, so no key is overtaken on dc-b, in what was synced back, or in dc-a's direct writes
    assert not key_overtakes(run.on_b), (key_overtakes(run.on_b)[:5], said)
    assert not key_overtakes(run.synced) and in_key_order(run.direct), (key_overtakes(run.synced)[:5],
                                                                         key_overtakes(run.direct)[:5], said)
    assert status["sync"] and status["sync"][-1]["state"] == "done", (said, status)
    assert status["outages"] == [], (said, status)
    assert run.failover_s < 10 and run.failback_s < 10, said


def test_both_clusters_down_at_once_spill_replay_and_sync_once_the_standby_answers(dc_brokers: dict[str, Broker],
                                                                                   tmp_path: Path) -> None:
    """Two faults overlapping (the soak's ``outage-both``): dc-a SIGKILLed under load, writes move to dc-b; then dc-b
    freezes too, so the sends find no cluster and go to the spill; dc-a restarts and answers while dc-b still does
    not, so the writes come back to dc-a (the spill replayed) and the failback's sync of what dc-b took waits until
    dc-b answers, 6 s after dc-a (measured: the sync starts the moment dc-b's probe answers). dc-a ends with every
    message sent: lost 0, nothing unexpected, every record dc-b holds also on dc-a, the sync done."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    moments: dict[str, float] = {}
    admin = AdminClient({"bootstrap.servers": a.bootstrap})

    def serves_metadata() -> bool:
        try:
            admin.list_topics(timeout=1.0)
            return True
        except KafkaException:
            return False

    def thaw_after_the_primary_answers() -> None:
        """dc-b thawed 6 s after dc-a answers again (a restarted Kafka takes 10-20 s to serve metadata), so the
        failback's sync of what dc-b took starts against a silent standby."""
        try:
            _wait(serves_metadata, 60, "dc-a serving metadata again")
            moments["primary_answers"] = time.monotonic()
            time.sleep(6.0)
        finally:
            moments["standby_thawed"] = time.monotonic()
            b.thaw()

    thaw = threading.Thread(target=thaw_after_the_primary_answers, daemon=True)

    def both_down_then_primary_back(primary: Broker) -> None:
        b.freeze()
        time.sleep(2.0)  # neither cluster answers
        primary.start()
        thaw.start()

    try:
        # a restarted Kafka served metadata 19 s after its start at load 5: the failback may wait for that
        run = _break_under_load(dc_brokers, tmp_path, "both-down", Broker.kill, both_down_then_primary_back,
                                failback_timeout=60.0)
    finally:
        if thaw.ident is not None:  # started
            thaw.join(70)
        b.thaw()
    counts, status = run.counts(), run.status
    on_a, on_b = set(_values(run.on_a)), set(_values(run.on_b))
    spilled = sum(link.get("spilled", 0) for link in status["links"].values())
    said = (f"both down: {counts} failover_s={run.failover_s:.2f} failback_s={run.failback_s:.2f} "
            f"on_standby={len(on_b)} synced={len(run.synced)} spilled={spilled} sync={status['sync']} "
            f"links={status['links']} standby_thawed_after_the_primary_answered_s="
            f"{moments.get('standby_thawed', 0) - moments.get('primary_answers', 0):.1f}")
    print(said)
    assert counts["lost"] == 0 and counts["unexpected"] == 0, said
    assert not run.stream.errors, (run.stream.errors[:5], said)
    assert spilled > 0, said  # with neither cluster answering the sends went to the spill (and were replayed)
    assert len(on_b) > 100 and not on_b - on_a, (sorted(on_b - on_a)[:5], said)  # all dc-b took is on dc-a
    assert status["sync"] and status["sync"][-1]["state"] == "done", said
    assert status["outages"] == [], said


def test_manual_switch_moves_writes_and_syncs_back(dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    """route.active=standby while dc-a is healthy: writes move to dc-b (what dc-a's client still holds queued moves
    with them, ahead of them), back to primary: writes return and the sync copies dc-b's share to dc-a."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("manual")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    route = {"spec": RouteSpec("dc-a", "dc-b", "manual")}
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, lambda _t: route["spec"], tmp_path / "dr")
    try:
        stream = Stream(engine, topic)
        stream.send(100)
        route["spec"] = RouteSpec("dc-a", "dc-b", "manual", active="standby")  # route.active=standby
        stream.send(100)
        assert engine.status()["routes"][topic]["active"] == "dc-b"
        engine.flush(10)
        route["spec"] = RouteSpec("dc-a", "dc-b", "manual")  # back: writes return, the sync starts
        stream.send(100)
        assert engine.wait_idle(60), engine.status()
        on_a, on_b = read_all(a.bootstrap, topic), read_all(b.bootstrap, topic)
        status = engine.status()
    finally:
        engine.close()
    counts = tally(stream.sent, _values(on_a))
    print("manual switch:", counts, "on standby:", len(on_b), "sync:", status["sync"])
    assert counts["lost"] == 0 and counts["duplicated"] == 0
    # every write after the switch went to dc-b, once; so did what dc-a's client still held queued at the switch
    # (re-routed ahead of them, so no key is overtaken); the sync copied all of it back
    on_standby = sorted(_values(on_b))
    assert on_standby == sorted(set(on_standby)) and set(range(100, 200)) <= set(on_standby) <= set(range(200))
    assert not key_overtakes(on_b)
    synced = sorted(int(m.value() or b"0") for m in on_a if (m.headers() or []) and
                    H.synced_from(m.headers()) == "dc-b")
    assert synced == on_standby
    by_key: dict[bytes | None, list[int]] = {}
    for m in sorted(on_a, key=lambda m: (m.partition() or 0, m.offset() or 0)):
        if int(m.value() or b"0") >= 100 and not (m.headers() or []):
            continue
        by_key.setdefault(m.key(), []).append(int(m.value() or b"0"))
    assert len(by_key) == KEYS  # synced records keep their key, so their partition
    assert all(v == sorted(v) for v in by_key.values())


def test_primary_frozen_under_load_fails_over_in_key_order(dc_brokers: dict[str, Broker], tmp_path: Path) -> None:
    """dc-a SIGSTOPped under load (a silent partition: connections stay open, requests in flight get no answer):
    writes move to dc-b once the probes declare dc-a down, and what dc-a's client still held (queued and in flight)
    is re-routed to dc-b ahead of any newer write of its key. A request in flight at the purge may still be stored
    by dc-a once it is thawed: that message then has two copies (a retry, counted apart); none is lost."""
    run = _break_under_load(dc_brokers, tmp_path, "failover-freeze", Broker.freeze, Broker.thaw)
    counts = run.counts()
    print(f"failover (freeze): {counts} failover_s={run.failover_s:.2f} failback_s={run.failback_s:.2f} "
          f"on_standby={len(run.on_b)} synced={len(run.synced)} links={run.status['links']}")
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert not run.stream.errors
    assert len(run.on_b) > 100 and sorted(_values(run.synced)) == sorted(_values(run.on_b))
    assert not key_overtakes(run.on_b) and not key_overtakes(run.synced) and in_key_order(run.direct)


def test_primary_thawed_right_after_the_switch_keeps_key_order(dc_brokers: dict[str, Broker],
                                                                tmp_path: Path) -> None:
    """A flap: dc-a frozen under load, thawed as soon as the writes moved, while what its client held is still being
    handed to dc-b. The failback starts in the middle of that hand-over; dc-a's direct writes keep every key's
    order, and everything dc-b took is synced back."""
    run = _break_under_load(dc_brokers, tmp_path, "flap-freeze", Broker.freeze, Broker.thaw, standby_acks=0)
    counts = run.counts()
    bad = key_overtakes(run.direct)
    where = {int(m.value() or b"0"): (m.partition(), m.offset()) for m in run.direct}
    said = (f"flap (freeze): {counts} failover_s={run.failover_s:.2f} failback_s={run.failback_s:.2f} "
            f"on_standby={len(run.on_b)} synced={len(run.synced)} links={run.status['links']} "
            f"overtaken={len(bad)} first={[(k, v, where.get(v), over, where.get(over)) for k, v, over in bad[:8]]} "
            f"sent_at_failback={run.sent_at_failback} on_b_values={sorted(_values(run.on_b))[:3]}..")
    print(said)
    assert counts["lost"] == 0 and counts["unexpected"] == 0, said
    assert sorted(_values(run.synced)) == sorted(_values(run.on_b)), said
    assert not key_overtakes(run.on_b) and not bad, said


def test_a_route_that_moved_reports_its_hand_over_until_the_next_send(dc_brokers: dict[str, Broker],
                                                                      tmp_path: Path) -> None:
    """``handing_over`` (what the asyncio producer asks before sending on its event loop) is true from the
    switch until the next send of the topic handed the old cluster's messages over, and false otherwise. The
    move is committed by the engine's maintenance thread without a send (route, outage with its start offsets);
    ``target()`` only decides."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("handover")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "manual"),
                         tmp_path / "dr")
    try:
        stream = Stream(engine, topic)
        stream.send(50)
        assert not engine.handing_over(topic)
        engine.switch("dc-a", "standby")
        assert engine.target(topic) == "dc-b" and engine.handing_over(topic)
        _wait(lambda: engine.status()["routes"][topic]["active"] == "dc-b" and engine.status()["outages"], 10,
              "the maintenance thread committed the move")
        assert [o["topic"] for o in engine.status()["outages"]] == [topic] and engine.handing_over(topic)
        stream.send(50)
        assert not engine.handing_over(topic)
        engine.switch("dc-a", "primary")
        assert engine.target(topic) == "dc-a" and engine.handing_over(topic)
        stream.send(50)
        assert not engine.handing_over(topic)
        assert engine.wait_idle(60), engine.status()
    finally:
        engine.close()
    on_a = read_all(a.bootstrap, topic, expect=150)
    assert tally(stream.sent, _values(on_a))["lost"] == 0 and not key_overtakes(
        [m for m in on_a if not H.synced_from(m.headers())])


def test_a_failback_cut_short_by_a_new_outage_syncs_everything_after_the_next_one(dc_brokers: dict[str, Broker],
                                                                                  tmp_path: Path) -> None:
    """A primary that flaps during its failback: the running sync is cancelled, and the next one starts only once
    the cancelled one left the sync group (on Tansu a member joining beside it was never assigned: the producer
    failover test saw a sync stuck at 'left None' for a minute). Everything written to the standby in both
    outages reaches the primary."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("flap")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap}, RouteSpec("dc-a", "dc-b", "manual"),
                         tmp_path / "dr")
    try:
        stream = Stream(engine, topic)
        engine.switch("dc-a", "standby")
        stream.send(100)
        engine.switch("dc-a", "primary")  # the first sync starts and joins its group
        deadline = time.monotonic() + 20
        while not any(s["state"] == "running" for s in engine.status()["sync"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        engine.switch("dc-a", "standby")
        stream.send(100)  # the new outage cancels it
        engine.switch("dc-a", "primary")  # at once: the cancelled sync may still be closing
        stream.send(20)
        assert engine.wait_idle(60), engine.status()
        syncs = engine.status()["sync"]
    finally:
        engine.close()
    on_a = read_all(a.bootstrap, topic, expect=220)
    counts = tally(stream.sent, _values(on_a))
    assert counts["lost"] == 0 and counts["unexpected"] == 0, counts
    assert [s["state"] for s in syncs] == ["done"], syncs  # the cancelled one never finished: one sync copied all


def test_engine_clients_keep_key_order_across_retries_on_fresh_partitions(dc_brokers: dict[str, Broker],
                                                                          tmp_path: Path) -> None:
    """Issue 38 (issue 31's rare direct-write inversion at failback): the engine's own clients were plain producers
    with up to 5 requests in flight unless the caller's settings made them idempotent (``make_engine``'s do not), and
    a producer that pipelines requests without idempotence reorders on a retry:
    a batch a just-restarted broker (or a partition whose leader is not ready yet) refuses with a retriable error is
    stored after the next batch of its partition. At failback that was keys 5, 7, 1 with 11685-11699 behind
    11701-11705 on dc-a. The same window opens on every fresh Kafka partition, so this streams keyed records at
    once into newly created topics, through the engine, and checks each key's order strictly. The engine's clients
    are idempotent now where acks allow (tests/test_dr_network.py), one request in flight where they do not."""
    a = dc_brokers["dc-a"]
    topics = [unique("fresh") for _ in range(6)]
    for topic in topics:
        create_topic(a.bootstrap, topic, 6)
    engine = make_engine({"dc-a": a.bootstrap}, RouteSpec("dc-a"), tmp_path / "dr")
    sent = {topic: 0 for topic in topics}
    failures: dict[str, int] = {}

    def report(err: Any, _msg: Any) -> None:  # a message reported failed is a loss: its error is the evidence
        if err is not None:
            failures[err.name()] = failures.get(err.name(), 0) + 1

    try:
        conf = engine._direct_conf("dc-a")  # idempotent (acks=all by default), one request in flight
        assert conf["enable.idempotence"] is True and conf["max.in.flight.requests.per.connection"] == 1
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for topic in topics:
                for _ in range(20):
                    i = sent[topic]
                    engine.produce(topic, str(i).encode(), key=str(i % KEYS).encode(), on_delivery=report)
                    sent[topic] = i + 1
            engine.poll(0)
            time.sleep(0.001)
        assert engine.flush(60) == 0
        # on a loaded machine a fresh partition's first batches may time out (spill.after.ms 2 s here) and go to the
        # spill, in produce order: they count once replayed
        assert engine.wait_idle(60), engine.status()
        engine.poll(0)
        status = engine.status()
    finally:
        engine.close()
    found = {}
    for topic in topics:
        records = read_all(a.bootstrap, topic, expect=sent[topic])
        counts = tally(range(sent[topic]), _values(records))
        assert counts["lost"] == 0 and counts["unexpected"] == 0, \
            f"{counts}\nfailed reports: {failures}\n(read, low, high) per partition: " \
            f"{partition_counts(a.bootstrap, topic, records)}\nengine: {status}\n{a.log_tail()}"
        found[topic] = key_overtakes(records)
    overtaken = {t: v[:3] for t, v in found.items() if v}
    assert not overtaken, (sum(len(v) for v in found.values()), overtaken)


def test_strict_failback_order_holds_new_writes_until_the_sync_is_done(dc_brokers: dict[str, Broker],
                                                                     tmp_path: Path) -> None:
    """``route.failback.order=strict`` (issue 38): at failback the primary takes no new write until the outage's
    records are synced back; the new writes wait in its spill and are replayed after the sync. A consumer of the
    primary then sees every key in produce order, synced records included (with the default, writes-first, they
    land behind newer direct writes). Measured: how long writes were held, how many were spilled, lost 0."""
    a, b = dc_brokers["dc-a"], dc_brokers["dc-b"]
    topic = unique("strict")
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, 3)
    engine = make_engine({"dc-a": a.bootstrap, "dc-b": b.bootstrap},
                         RouteSpec("dc-a", "dc-b", "manual", failback_order="strict"), tmp_path / "dr")
    held_s = 0.0
    try:
        stream = Stream(engine, topic).start()
        _wait(lambda: len(stream.acked) >= 300, 20, "300 acknowledged by the primary", engine.status)
        engine.switch("dc-a", "standby")
        _wait(lambda: engine.status()["links"].get("dc-b", {}).get("delivered", 0) >= 500, 20,
              "writes acknowledged by the standby", engine.status)
        engine.switch("dc-a", "primary")
        _wait(lambda: engine.status()["held"], 10, "new writes held for the sync", engine.status)
        sent_at_failback = len(stream.sent)
        held_s = _wait(lambda: not engine.status()["held"], 60, "the sync's end releases the held writes",
                       engine.status)
        _wait(lambda: len(stream.sent) >= sent_at_failback + 300, 15, "writes after the sync", engine.status)
        stream.stop()
        assert engine.wait_idle(90), engine.status()
        status = engine.status()
    finally:
        engine.close()
    on_a = read_all(a.bootstrap, topic, expect=len(stream.sent))
    on_b = read_all(b.bootstrap, topic)
    counts = tally(stream.sent, _values(on_a))
    spilled = status["links"]["dc-a"]["spilled"]
    synced = [m for m in on_a if H.synced_from(m.headers())]
    said = (f"strict failback: {counts} on_standby={len(on_b)} synced={len(synced)} held_s={held_s:.2f} "
            f"spilled={spilled} sync={status['sync']}")
    print(said)
    assert counts["lost"] == 0 and counts["unexpected"] == 0 and not stream.errors, said
    assert len(on_b) >= 500 and sorted(_values(synced)) == sorted(_values(on_b)), said
    assert spilled > 0, said  # the writes during the sync waited in the spill...
    where = {}
    for m in on_a:  # the first copy of each value: partition, offset, synced or not
        where.setdefault(int(m.value() or b"0"), (m.partition(), m.offset(), bool(H.synced_from(m.headers()))))
    bad = [(k, v, where.get(v), over, where.get(over)) for k, v, over in key_overtakes(on_a)[:6]]
    assert not bad, (bad, said)  # ...so no key is out of order on dc-a
