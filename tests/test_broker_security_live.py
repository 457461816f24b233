"""Revocation, rotation and a stopped MetaServer while a ykafka Producer sends to a secured Kafka, every
message counted (issue 28). Timing-sensitive: in SERIAL_MODULES.

Revoking an app deletes its ACL bindings and SCRAM user at the reconciler's next pass (kicked by the
change); the broker's authorizer refuses the next request at once, and a connection that authenticated
before is re-authenticated within ``connections.max.reauth.ms``. The figures are in docs/metaserver.md.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from confluent_kafka import KafkaError as RawKafkaError

from tests import kafka_secured
from tests.helpers import wait_until
from tests.kafka_secured import consume_raw, produce_raw
from tests.ms_fixtures import App, MetaServer, new_app
from ykafka import BrokerAuthError, Consumer, MetaServerUnavailable, Producer
from ykafka.aio import AIOProducer
from ykafka.transport import is_auth_error

log = structlog.get_logger(__name__)

GRACE_S = 6.0
REAUTH_MS = 5000


kafka = kafka_secured.module_fixture("SASL_PLAINTEXT", reauth_ms=REAUTH_MS)


def _metaserver(ms_factory: Callable[..., MetaServer], kafka: kafka_secured.SecuredKafka, cluster: str,
                db_url: str | None = None, apollo_app_id: str | None = None, **flags: Any) -> MetaServer:
    # revoked clients keep renewing from this host: their refusals must not rate-limit the admin calls after
    ms = ms_factory(db_url, apollo_app_id, env=kafka.metaserver_env(), kafka_admin_user=kafka_secured.ADMIN_USER,
                    kafka_system_users=kafka_secured.BROKER_USER,
                    acl_reconcile_interval=2, credential_grace=GRACE_S, auth_fail_limit=100_000, **flags)
    ms.admin().set_cluster(cluster, kafka.bootstrap, dc="a", security=kafka.security())
    return ms


@pytest.fixture(scope="module")
def server(kafka: kafka_secured.SecuredKafka, ms_factory: Callable[..., MetaServer]) -> MetaServer:
    return _metaserver(ms_factory, kafka, "dc-a")


def client_conf(server: MetaServer, app: App, cache: Path, **extra: Any) -> dict[str, Any]:
    return {"ykafka.app.id": app.app_id, "ykafka.app.secret": app.secret, "ykafka.metaserver": server.url,
            "ykafka.cache.dir": str(cache), **extra}


@dataclass
class Ledger:
    """Every message sent: when, and how it ended (None: acknowledged; else the delivery error)."""

    sent: dict[int, float] = field(default_factory=dict)
    outcome: dict[int, Any] = field(default_factory=dict)
    acked_at: dict[int, float] = field(default_factory=dict)
    refused_at_send: list[str] = field(default_factory=list)
    failed_at: dict[int, float] = field(default_factory=dict)
    unsent: set[int] = field(default_factory=set)  # failed to the callback without reaching librdkafka (no message)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callback(self, i: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            with self.lock:
                self.outcome[i] = err
                if err is None:
                    self.acked_at[i] = time.time()
                else:
                    self.failed_at[i] = time.time()
                    if msg is None:
                        self.unsent.add(i)
        return done

    @property
    def acked(self) -> set[int]:
        return {i for i, err in self.outcome.items() if err is None}


def produce_at(producer: Producer, topic: str, ledger: Ledger, rate: int, until: Callable[[], bool],
               limit_s: float) -> None:
    """Send ``rate`` messages a second (payload = the message's number) until ``until()`` or ``limit_s``."""
    started = time.monotonic()
    count = 0
    while not until() and time.monotonic() - started < limit_s:
        for _ in range(10):
            i = len(ledger.sent)
            ledger.sent[i] = time.time()
            count += 1
            try:
                producer.produce(topic, str(i).encode(), on_delivery=ledger.callback(i))
            except BrokerAuthError as exc:  # refused at once (librdkafka knows the topic is denied): not sent
                ledger.outcome[i] = exc
                ledger.refused_at_send.append(str(exc))
        producer.poll(0)
        pause = started + count / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def read_ids(kafka: kafka_secured.SecuredKafka, topic: str, expect: int, timeout: float = 60) -> list[int]:
    from confluent_kafka import Consumer as RawConsumer

    consumer = RawConsumer({**kafka.client(), "group.id": f"check-{uuid.uuid4().hex[:6]}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    ids: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(ids) < expect and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    ids.append(int(msg.value() or b"-1"))
        quiet = time.monotonic() + 2  # anything beyond what is expected (a duplicate) shows up too
        while time.monotonic() < quiet:
            ids.extend(int(m.value() or b"-1") for m in consumer.consume(1000, 0.3) if m.error() is None)
    finally:
        consumer.close()
    return ids


def test_revoked_while_producing_1000_per_second_sends_stop_within_the_bound(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": ["rv.*"], "consume": [], "group": []}, default_cluster="dc-a")
    topic = f"rv.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    ledger = Ledger()
    revoked_at: list[float] = []
    # disaster recovery off: the plain path (with it on: the next test)
    conf = client_conf(server, app, tmp_path / "c", **{"message.timeout.ms": 10000, "ykafka.dr.enabled": False})
    with Producer(conf) as producer:
        produce_at(producer, topic, ledger, 1000, lambda: False, 2.0)  # accepted before
        assert producer.flush(15) == 0 and len(ledger.acked) == len(ledger.sent)
        revoked_at.append(time.time())
        server.admin().update_app(app.app_id, enabled=False)
        produce_at(producer, topic, ledger, 1000,
                   lambda: any(err is not None for err in ledger.outcome.values())
                   and time.time() - max(ledger.acked_at.values()) > 3, 30.0)
        producer.flush(30)
    assert len(ledger.outcome) == len(ledger.sent)  # every message: acknowledged or failed with a callback
    failed = [err for err in ledger.outcome.values() if err is not None]
    codes = {e.code if isinstance(e, BrokerAuthError) else e.code() for e in failed}
    assert failed and codes <= {RawKafkaError.TOPIC_AUTHORIZATION_FAILED, RawKafkaError._AUTHENTICATION,
                                RawKafkaError._MSG_TIMED_OUT, RawKafkaError.SASL_AUTHENTICATION_FAILED}, codes
    for text in ledger.refused_at_send[:1]:  # the typed error names the app, the cluster and the topic
        assert f"app {app.app_id!r}" in text and "cluster 'dc-a'" in text and f"topic/group {topic!r}" in text
    last_accepted = max(ledger.sent[i] for i in ledger.acked)
    bound = last_accepted - revoked_at[0]
    first_refused = min(ledger.sent[i] for i, err in ledger.outcome.items() if err is not None) - revoked_at[0]
    log.info("revocation measured", bound_s=round(bound, 3), first_refused_s=round(first_refused, 3),
             sent=len(ledger.sent), acked=len(ledger.acked), failed=len(failed))
    repaired = [row["at"] - revoked_at[0] for row in server.admin().audit(action="kafka.reconcile", limit=50)
                if row["at"] >= revoked_at[0] and f"app.{app.app_id}@" in json.dumps(row["before"])]
    print(f"REVOCATION bound_s={bound:.3f} first_refused_s={first_refused:.3f} sent={len(ledger.sent)} "
          f"acked={len(ledger.acked)} failed={len(failed)} reconciled_after_s={min(repaired or [-1]):.3f}")
    assert bound <= REAUTH_MS / 1000 + 2 + 5  # the stated bound (docs/metaserver.md) with a loaded machine's slack
    ids = read_ids(kafka, topic, len(ledger.acked))
    assert set(ids) >= ledger.acked  # nothing acknowledged is lost
    assert set(ids) <= set(ledger.sent)


def _refused_report(err: Any) -> bool:
    """A refused message's outcome: BrokerAuthError raised by produce(), or to the delivery callback
    librdkafka's own error type (drop-in: ``err.code()``) with an authentication or authorization code and the
    typed error's text (app, cluster, topic)."""
    if isinstance(err, BrokerAuthError):
        return True
    return isinstance(err, RawKafkaError) and is_auth_error(err) and "broker refused app " in err.str()


def _callbacks_are_drop_in(ledger: Ledger) -> bool:
    """Every error a delivery callback got is librdkafka's type, as under confluent-kafka (never an exception)."""
    return all(type(ledger.outcome[i]) is RawKafkaError for i in ledger.failed_at)


def test_revoked_with_disaster_recovery_on_fails_every_refused_message_and_spills_none(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """A broker's refusal is not an outage: nothing is spilled or kept for later, every message refused after
    the revoke fails to its callback with BrokerAuthError, and new sends fail at once while refused."""
    app = new_app(server, acl={"produce": ["rd.*"], "consume": [], "group": []}, default_cluster="dc-a")
    topic = f"rd.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    ledger = Ledger()
    with Producer(client_conf(server, app, tmp_path / "c")) as producer:  # ykafka.dr.enabled: the default
        dr = producer.disaster_recovery
        assert dr is not None
        produce_at(producer, topic, ledger, 1000, lambda: False, 1.0)
        assert producer.flush(15) == 0 and len(ledger.acked) == len(ledger.sent)
        revoked_at = time.time()
        server.admin().update_app(app.app_id, enabled=False)
        # past the re-authentication too: the SCRAM user is gone, the connection itself is refused
        produce_at(producer, topic, ledger, 1000,
                   lambda: any(err is not None for err in ledger.outcome.values())
                   and time.time() - revoked_at > REAUTH_MS / 1000 + 3, 30.0)
        assert producer.flush(30) == 0
        status = dr.status()
    failed = [err for err in ledger.outcome.values() if err is not None]
    log.info("revocation with DR measured", sent=len(ledger.sent), acked=len(ledger.acked), failed=len(failed),
             refused_at_send=len(ledger.refused_at_send), link=status["links"].get("dc-a"),
             spill=status["spill"].get("dc-a"), clusters=status["clusters"])
    assert len(ledger.outcome) == len(ledger.sent)  # every message: acknowledged or failed with a callback
    assert failed and all(_refused_report(err) for err in failed) and _callbacks_are_drop_in(ledger), \
        {repr(e)[:200] for e in failed}
    assert len(ledger.acked) + len(failed) == len(ledger.sent)
    assert f"broker refused app {app.app_id!r}, cluster 'dc-a', topic/group {topic!r}" in str(failed[-1])
    link, spill, health = status["links"]["dc-a"], status["spill"]["dc-a"], status["clusters"]["dc-a"]
    assert link["spilled"] == link["rerouted"] == 0 and spill["depth"] == 0, (link, spill)  # nothing kept for later
    # the SCRAM user's deletion was seen as a refusal, not an outage: the messages after it failed to their callbacks
    assert health["refused"] and "_AUTHENTICATION" in health["refused"] and health["state"] == "up", health
    # while refused, new sends failed at once (not handed to librdkafka to time out, not spilled)
    assert link["refused"] > 0 and ledger.unsent
    last_accepted = max(ledger.sent[i] for i in ledger.acked)
    waits = sorted(ledger.failed_at[i] - ledger.sent[i] for i in ledger.failed_at)
    unsent_waits = sorted(ledger.failed_at[i] - ledger.sent[i] for i in ledger.unsent)
    print(f"REVOCATION-DR bound_s={last_accepted - revoked_at:.3f} sent={len(ledger.sent)} "
          f"acked={len(ledger.acked)} failed={len(failed)} refused_at_send={len(ledger.refused_at_send)} "
          f"failed_by_callback={len(ledger.failed_at)} of_them_unsent={len(ledger.unsent)} "
          f"callback_wait_p50_s={waits[len(waits) // 2]:.3f} max_s={waits[-1]:.3f} "
          f"unsent_wait_max_s={unsent_waits[-1]:.3f} link={link}")
    assert last_accepted - revoked_at <= REAUTH_MS / 1000 + 2 + 5
    ids = read_ids(kafka, topic, len(ledger.acked))
    assert set(ids) >= ledger.acked and set(ids) <= set(ledger.sent)  # nothing acknowledged is lost


def test_a_revoked_app_enabled_again_sends_again_without_a_restart_with_disaster_recovery_on(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """The refusal is lifted by the new credentials the grant renewal brings: sends are accepted again."""
    app = new_app(server, acl={"produce": ["re.*"], "consume": [], "group": []}, default_cluster="dc-a")
    topic = f"re.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    ledger = Ledger()
    with Producer(client_conf(server, app, tmp_path / "c")) as producer:
        dr = producer.disaster_recovery
        assert dr is not None
        produce_at(producer, topic, ledger, 200, lambda: False, 0.5)
        assert producer.flush(15) == 0
        server.admin().update_app(app.app_id, enabled=False)

        def refused() -> bool:
            return dr.status()["clusters"]["dc-a"]["refused"] is not None

        produce_at(producer, topic, ledger, 200, refused, REAUTH_MS / 1000 + 15)
        assert refused(), "the SCRAM user's deletion was never seen"
        enabled_from = len(ledger.sent)
        server.admin().update_app(app.app_id, enabled=True)
        produce_at(producer, topic, ledger, 200, lambda: any(i >= enabled_from for i in ledger.acked), 30)
        # enabling issues new credentials (issue 37: the old ones stay retired) and the Producer swaps onto them.
        # From the first send accepted again, every send is accepted: the retired handle of the old credentials
        # keeps failing to re-authenticate until it is closed (~3 s after the swap: drained, then a 1 s grace),
        # and those refusals are not the credentials in force, so they no longer re-mark the cluster refused (they
        # did, failing ~30 sends at once each time: seen in CI as sends 1280-1309 unacknowledged)
        steady_from = len(ledger.sent)
        produce_at(producer, topic, ledger, 200, lambda: False, 3.5)
        assert producer.flush(30) == 0
        status = dr.status()
    failed = [err for err in ledger.outcome.values() if err is not None]
    assert len(ledger.outcome) == len(ledger.sent) == len(ledger.acked) + len(failed)
    assert failed and all(_refused_report(err) for err in failed) and _callbacks_are_drop_in(ledger), \
        {repr(e)[:200] for e in failed}
    steady_failed = sorted(i for i in range(steady_from, len(ledger.sent)) if ledger.outcome.get(i) is not None)
    assert not steady_failed, f"{len(steady_failed)} refused after the first accepted again: {steady_failed[:40]}"
    assert set(range(steady_from, len(ledger.sent))) <= ledger.acked  # accepted again, all of them
    assert status["clusters"]["dc-a"]["refused"] is None and status["spill"]["dc-a"]["depth"] == 0
    assert status["links"]["dc-a"]["spilled"] == 0
    again = min(ledger.acked_at[i] for i in ledger.acked if i >= enabled_from) - ledger.sent[enabled_from]
    print(f"RE-ENABLED sent={len(ledger.sent)} acked={len(ledger.acked)} failed={len(failed)} "
          f"first_acked_again_s={again:.3f} steady={len(ledger.sent) - steady_from} steady_failed={len(steady_failed)}")
    ids = read_ids(kafka, topic, len(ledger.acked))
    assert set(ids) >= ledger.acked and set(ids) <= set(ledger.sent)


def test_messages_queued_when_the_credentials_are_refused_each_fail_once_with_disaster_recovery_on(
        kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """The refusal comes while messages wait in librdkafka (a connection refused from its first attempt): they
    time out after spill.after.ms and fail to their callbacks, as the sends after the refusal do at once."""
    topic = f"rq.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    ledger = Ledger()
    conf = {**kafka.client("nobody", "wrong"), "ykafka.cache.dir": str(tmp_path / "c"), "log_level": 0,
            "ykafka.report.enabled": False, "spill.after.ms": 2000}  # local mode; ykafka.dr.enabled: the default
    with Producer(conf) as producer:
        dr = producer.disaster_recovery
        assert dr is not None
        produce_at(producer, topic, ledger, 200, lambda: False, 1.5)
        producer.flush(15)
        status = dr.status()
    failed = [err for err in ledger.outcome.values() if err is not None]
    assert len(ledger.outcome) == len(ledger.sent) == len(failed)  # each message: exactly one callback, failed
    assert all(_refused_report(err) for err in failed) and _callbacks_are_drop_in(ledger), \
        {repr(e)[:200] for e in failed}
    assert "cluster 'default'" in str(failed[0]) and f"topic/group {topic!r}" in str(failed[0])
    queued = set(ledger.failed_at) - ledger.unsent  # handed to librdkafka before the refusal was known
    assert queued and ledger.unsent, (len(queued), len(ledger.unsent))
    link, spill = status["links"]["default"], status["spill"]["default"]
    assert link["spilled"] == link["rerouted"] == 0 and spill["depth"] == 0, (link, spill)
    assert status["clusters"]["default"]["state"] == "up"
    print(f"REFUSED-QUEUED sent={len(ledger.sent)} queued_then_failed={len(queued)} failed_at_once={len(ledger.unsent)}"
          f" link={link}")


def test_rotated_while_producing_loses_and_duplicates_nothing_and_the_old_secret_is_refused(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": ["rt.*"], "consume": ["rt.*"], "group": ["rt-*"]}, default_cluster="dc-a")
    topic = f"rt.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    ledger = Ledger()
    with Producer(client_conf(server, app, tmp_path / "c")) as producer:
        produce_at(producer, topic, ledger, 500, lambda: False, 1.5)
        grant = producer.runtime.grant
        assert grant is not None
        old = grant.clusters["dc-a"].rdkafka()
        server.admin().rotate_credentials(app.app_id)
        switched = lambda: (producer.runtime.grant is not None  # noqa: E731
                            and producer.runtime.grant.clusters["dc-a"].rdkafka()["sasl.username"]
                            != old["sasl.username"])
        produce_at(producer, topic, ledger, 500, switched, 15.0)
        assert switched(), "the producer never renewed onto the new credentials"
        produce_at(producer, topic, ledger, 500, lambda: False, 2.0)  # on the new client
        assert producer.flush(30) == 0
        assert producer.swaps >= 1
        new = producer.runtime.grant.clusters["dc-a"].rdkafka()  # type: ignore[union-attr]
    assert len(ledger.acked) == len(ledger.sent)
    ids = read_ids(kafka, topic, len(ledger.sent))
    assert len(ids) == len(set(ids)) == len(ledger.sent), "lost or duplicated"
    assert new["sasl.username"].endswith(".g2") and new["sasl.password"] != old["sasl.password"]
    # after the grace period the reconciler deletes the old principal: its secret is refused
    wait_until(lambda: all(e is not None and e.code() in (RawKafkaError._AUTHENTICATION,
                                                          RawKafkaError.SASL_AUTHENTICATION_FAILED,
                                                          RawKafkaError._MSG_TIMED_OUT)
                           for e in produce_raw(old, topic, 1, timeout=6)), GRACE_S + 20, interval=1,
               message="old credential refused")
    assert all(e is None for e in produce_raw(new, topic, 1))
    read, error = consume_raw(old, topic, "rt-check", timeout=6)
    assert read == 0 and error is not None


def test_with_the_metaserver_stopped_clients_run_from_cached_credentials_until_they_expire(
        server: MetaServer, ms_factory: Callable[..., MetaServer], kafka: kafka_secured.SecuredKafka,
        tmp_path: Path) -> None:
    ttl = 15
    # a peer of the module's MetaServer (one database): a second MetaServer with tables of its own would delete
    # the first one's principals from the brokers they share as foreign (docs/metaserver.md, threat model)
    ms = _metaserver(ms_factory, kafka, "dc-m", token_ttl=ttl, db_url=server.db_url,
                     apollo_app_id=server.apollo_app_id)
    app = new_app(ms, acl={"produce": ["ms.*"], "consume": [], "group": []}, default_cluster="dc-m")
    topic = f"ms.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    cache = tmp_path / "cache"
    ledger = Ledger()
    with Producer(client_conf(ms, app, cache)) as running:
        produce_at(running, topic, ledger, 200, lambda: False, 1.0)
        assert running.flush(15) == 0
        ms.proc.stop()
        stopped_at = time.time()
        expires_at = running.runtime.grant.expires_at  # type: ignore[union-attr]  # the last renewal's (cached)
        produce_at(running, topic, ledger, 200, lambda: False, 1.0)  # a running client continues
        assert running.flush(15) == 0
        with Producer(client_conf(ms, app, cache)) as fresh:  # a new client starts from the cache
            for i in range(len(ledger.sent), len(ledger.sent) + 50):
                ledger.sent[i] = time.time()
                fresh.produce(topic, str(i).encode(), on_delivery=ledger.callback(i))
            assert fresh.flush(15) == 0
        assert len(ledger.acked) == len(ledger.sent)
        time.sleep(max(0.0, expires_at - time.time()) + 1)
        assert time.time() - stopped_at < ttl + 5
        with pytest.raises(MetaServerUnavailable) as expired:
            Producer(client_conf(ms, app, cache))
    assert "MetaServer" in str(expired.value)
    ids = read_ids(kafka, topic, len(ledger.sent))
    assert sorted(set(ids)) == sorted(ledger.sent)


def test_a_consumer_follows_rotated_credentials_without_leaving_its_group(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": [], "consume": ["rc.*"], "group": ["rc-*"]}, default_cluster="dc-a")
    topic = f"rc.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    assert all(err is None for err in produce_raw(kafka.client(), topic, 50))
    consumer = Consumer(client_conf(server, app, tmp_path / "c", **{
        "group.id": f"rc-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    seen: list[bytes] = []

    def read(until: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < until and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value() or b"")

    try:
        consumer.subscribe([topic])
        read(50, 30)
        assert len(seen) == 50
        old_props = consumer.runtime.cluster("dc-a").rdkafka()
        old = old_props["sasl.username"]
        handles = consumer.generation
        server.admin().rotate_credentials(app.app_id)
        wait_until(lambda: consumer.runtime.cluster("dc-a").rdkafka()["sasl.username"] != old, 15,
                   message="renewed onto the new principal")
        # the old principal is deleted after the grace; the connections re-authenticate within REAUTH_MS
        wait_until(lambda: consume_raw(old_props, topic, f"rc-old-{uuid.uuid4().hex[:4]}", timeout=4)[1] is not None,
                   GRACE_S + 20, interval=1, message="old principal deleted")
        time.sleep(REAUTH_MS / 1000 + 1)  # every connection of the consumer re-authenticated since
        assert all(err is None for err in produce_raw(kafka.client(), topic, 50))
        read(100, 30)
        assert len(seen) == 100 and len(set(seen)) == 50  # m0..m49 twice: every message of both batches
        assert consumer.generation == handles  # no rebuild: the same handle, the same group member
    finally:
        consumer.close()


def test_a_running_consumer_refused_by_the_broker_reports_the_typed_error(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    # a literal group: only a literal group grant carries its retry topics' rights (a pattern grants groups only)
    group = f"rf-{uuid.uuid4().hex[:6]}"
    app = new_app(server, acl={"produce": [], "consume": ["rf.*"], "group": [group]}, default_cluster="dc-a")
    topic = f"rf.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    assert all(err is None for err in produce_raw(kafka.client(), topic, 10))
    consumer = Consumer(client_conf(server, app, tmp_path / "c", **{
        "group.id": group, "auto.offset.reset": "earliest"}))
    handled: list[bytes] = []
    worker = threading.Thread(target=consumer.run, args=(lambda msg: handled.append(msg.value()), [topic]),
                              daemon=True)
    worker.start()
    try:
        wait_until(lambda: len(handled) == 10, 30, message="first batch handled")
        server.admin().set_acl(app.app_id, consume=["other.*"], group=[group])  # the broker's binding goes

        def refused() -> list[str]:
            return [str(e) for e in consumer.runtime.report_body().get("errors") or [] if "broker refused" in str(e)]

        reasons = wait_until(refused, 30, message="the consumer reported the broker's refusal")
    finally:
        consumer.stop()
        worker.join(20)
        consumer.close()
    assert f"broker refused app {app.app_id!r}, cluster 'dc-a', topic/group {topic!r}" in reasons[0]
    assert "Topic authorization failed" in reasons[0] or "TOPIC_AUTHORIZATION_FAILED" in reasons[0]


def test_an_asyncio_producer_of_a_revoked_app_gets_the_typed_error(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": ["aw.*"], "consume": [], "group": []}, default_cluster="dc-a")
    topic = f"aw.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)

    async def scenario() -> tuple[int, BaseException]:
        conf = client_conf(server, app, tmp_path / "c", **{"message.timeout.ms": 8000, "ykafka.dr.enabled": False})
        async with AIOProducer(conf) as producer:
            accepted = 0
            for i in range(20):
                await (await producer.produce(topic, f"m{i}".encode()))
                accepted += 1
            server.admin().update_app(app.app_id, enabled=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    await (await producer.produce(topic, b"after"))
                    accepted += 1
                except BrokerAuthError as exc:  # from the delivery, or at once when librdkafka knows the topic
                    return accepted, exc
                await asyncio.sleep(0.05)
        raise AssertionError("the revoked app was never refused")

    accepted, refused = asyncio.run(scenario())
    assert accepted >= 20
    assert f"broker refused app {app.app_id!r}, cluster 'dc-a', topic/group {topic!r}" in str(refused), refused
