"""An outside attacker against a secured Apache Kafka and its MetaServer (issue 37), one test per hole.

The attacker knows the broker's address (every port its process listens on, read from ``/proc`` as ``ss``
would) and, at most, one app's granted credentials. The requests go out on a raw socket
(``ykafka.devstack.wire``): no client library retries or hides what a listener answered. Before issue 37 the
KRaft controller listener was PLAINTEXT with ``User:ANONYMOUS`` a super user, and an anonymous raw client there
created a SCRAM user and an ACL of its own; the reconciler then kept that user forever.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from metaserver.configcenter import signature as cc_signature
from metaserver.domain import sealing
from metaserver.domain.tokens import TOKEN_KEY_NAME, TokenCodec
from tests import kafka_secured
from tests.helpers import wait_until
from tests.kafka_secured import consume_raw, grant_of, produce_raw
from tests.ms_fixtures import OPENAPI_TOKEN, App, MetaServer, new_app
from tests.support import ConfigService
from ykafka import Producer, signing
from ykafka.devstack import wire

RECONCILE_S = 2.0
#: the config service's one shared access-key secret: before issue 37 every grant carried it to every app
SHARED_CC_SECRET = "0123456789abcdef0123456789abcdef"
ADMIN_REQUESTS = ("describe_acls", "create_acls", "alter_scram", "delete_topics")
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def listening_ports(pid: int) -> set[int]:
    """Every TCP port process ``pid`` listens on: the LISTEN sockets of ``/proc/<pid>/net/tcp{,6}`` whose inode
    is one of the process's open file descriptors (the namespace's table lists other processes' too)."""
    return {port for _, port in listening_sockets(pid)}


def _address(hex_ip: str) -> str:
    """``/proc/net/tcp``'s little-endian hex address as text (an IPv4-mapped IPv6 address as its IPv4 part)."""
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    flat = b"".join(words)
    if flat[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in flat[12:])
    return ":".join(flat[i:i + 2].hex() for i in range(0, 16, 2))


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every LISTEN socket of process ``pid``: what an outsider could reach from where."""
    inodes: set[str] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found: set[tuple[str, int]] = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == LISTEN and cols[9] in inodes:
                hex_ip, hex_port = cols[1].rsplit(":", 1)
                found.add((_address(hex_ip), int(hex_port, 16)))
    return found


# SASL_PLAINTEXT: with no TLS in the way, the raw socket shows that authentication alone keeps the door
kafka = kafka_secured.module_fixture("SASL_PLAINTEXT")


@pytest.fixture(scope="module")
def admin_passwords(kafka: kafka_secured.SecuredKafka, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MetaServer's --kafka-admin-password-dir: each registry name its own super-user password file (issue 37;
    here every name is the one test broker, so the files hold the same password)."""
    folder = tmp_path_factory.mktemp("kafka-admin")
    (folder / "dc-a.password").write_text(kafka.admin_password)
    return folder


@pytest.fixture(scope="module")
def ms_cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfigService]:
    """The config service as the secured stack runs it (``ykafka dev up`` with security on): every read signed
    (YKAFKA_CC_REQUIRE_ACCESS_KEY, an env var so the same fixture starts on code that lacks it)."""
    proc = ConfigService(tmp_path_factory.mktemp("ms-cc") / "cc.db", 2, OPENAPI_TOKEN)
    proc.env = {"YKAFKA_CC_REQUIRE_ACCESS_KEY": "1"}
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def server(kafka: kafka_secured.SecuredKafka, ms_factory: Callable[..., MetaServer],
           tmp_path_factory: pytest.TempPathFactory, admin_passwords: Path) -> MetaServer:
    key = sealing.new_key_file(tmp_path_factory.mktemp("sealing") / "secrets" / "sealing.key")  # 0600, outside the DB
    ms = ms_factory(env={"YKAFKA_MS_KAFKA_ADMIN_PASSWORD_DIR": str(admin_passwords),
                         "YKAFKA_MS_SEALING_KEY_FILE": str(key),
                         "YKAFKA_MS_CONFIGCENTER_APP_KEYS": "1",
                         "YKAFKA_MS_CONFIGCENTER_ACCESS_KEY_SECRET": SHARED_CC_SECRET},
                    kafka_admin_user=kafka_secured.ADMIN_USER, kafka_system_users=kafka_secured.BROKER_USER,
                    acl_reconcile_interval=RECONCILE_S)
    ms.admin().set_cluster("dc-a", kafka.bootstrap, dc="a", security=kafka.security())
    return ms


@pytest.fixture(scope="module")
def ports(kafka: kafka_secured.SecuredKafka) -> list[int]:
    found = listening_ports(kafka.proc.pid)
    client = int(kafka.bootstrap.rsplit(":", 1)[1])
    assert client in found and len(found) == 2, found  # the client listener and the KRaft controller listener
    return sorted(found)


def _intruders(kafka: kafka_secured.SecuredKafka) -> tuple[set[str], list[Any]]:
    """(SCRAM users, ACL bindings) of the attacker's making that exist on the cluster now."""
    admin = kafka.admin()
    users = set(admin.describe_user_scram_credentials().result(15))
    from confluent_kafka.admin import AclBindingFilter

    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                             AclOperation.ANY, AclPermissionType.ANY)
    bindings = [b for b in admin.describe_acls(every).result(15) if "intruder" in b.principal]
    return {u for u in users if "intruder" in u}, bindings


def _anonymous_data(port: int, topic: str) -> tuple[list[Any], tuple[int, Any]]:
    plain = {"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}
    return produce_raw(plain, topic, count=2, timeout=6), consume_raw(plain, topic, "anon", timeout=6)


def test_no_port_of_the_broker_process_serves_an_anonymous_client(
        kafka: kafka_secured.SecuredKafka, ports: list[int]) -> None:
    topic = f"victim.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    assert all(err is None for err in produce_raw(kafka.client(), topic, 3))
    answers = {}
    for port in ports:
        for name in ADMIN_REQUESTS:
            with wire.Probe("127.0.0.1", port) as probe:
                args = {"topic": topic} if name == "delete_topics" else {}
                answers[(port, name)] = probe.request(name, **args)
    # a SASL listener drops a connection whose first request is not the SASL handshake: nothing answered
    assert answers == {key: wire.CLOSED for key in answers}, answers
    with ThreadPoolExecutor(len(ports)) as pool:
        data = list(pool.map(lambda port: _anonymous_data(port, topic), ports))
    for port, (sent, (read, error)) in zip(ports, data, strict=True):
        assert len(sent) == 2 and all(err is not None for err in sent), (port, sent)
        assert read == 0, (port, read, error)  # a dropped connection is all it ever gets
    users, bindings = _intruders(kafka)
    assert users == set() and bindings == []
    assert topic in kafka.admin().list_topics(timeout=10).topics  # not deleted
    assert consume_raw(kafka.client(), topic, f"check-{uuid.uuid4().hex[:4]}", timeout=10)[0] == 3  # only ours


def test_an_apps_credentials_open_no_admin_request_and_no_other_topic_on_any_port(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, ports: list[int], tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": ["at.*"], "consume": ["at.*"], "group": ["at-*"]}, default_cluster="dc-a")
    other = f"victim.{uuid.uuid4().hex[:6]}"
    kafka.create_topics("at.own", other)
    creds = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()
    user, password = creds["sasl.username"], creds["sasl.password"]
    client_port = int(kafka.bootstrap.rsplit(":", 1)[1])
    seen: dict[tuple[int, str], int] = {}
    for port in ports:
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):
            for name in ADMIN_REQUESTS:
                with wire.Probe("127.0.0.1", port) as probe:
                    code = probe.login(mechanism, user, password)
                    seen[(port, f"{mechanism} login")] = code
                    if code == wire.NONE:
                        args = {"topic": other} if name == "delete_topics" else {}
                        seen[(port, f"{mechanism} {name}")] = probe.request(name, **args)
    controller = next(p for p in ports if p != client_port)
    assert seen[(client_port, "SCRAM-SHA-512 login")] == wire.NONE  # the app's own door: open, and only that
    assert {k[1]: v for k, v in seen.items() if k[0] == client_port and k[1].startswith("SCRAM-SHA-512 ")} == {
        "SCRAM-SHA-512 login": wire.NONE,
        "SCRAM-SHA-512 describe_acls": wire.CLUSTER_AUTHORIZATION_FAILED,
        "SCRAM-SHA-512 create_acls": wire.CLUSTER_AUTHORIZATION_FAILED,
        "SCRAM-SHA-512 alter_scram": wire.CLUSTER_AUTHORIZATION_FAILED,
        "SCRAM-SHA-512 delete_topics": wire.TOPIC_AUTHORIZATION_FAILED}
    assert seen[(client_port, "PLAIN login")] == wire.UNSUPPORTED_SASL_MECHANISM
    # the controller listener takes PLAIN for its one node principal only: an app's SCRAM secret opens nothing
    assert seen[(controller, "SCRAM-SHA-512 login")] == wire.UNSUPPORTED_SASL_MECHANISM
    assert seen[(controller, "PLAIN login")] == wire.SASL_AUTHENTICATION_FAILED
    assert not any(k[0] == controller and not k[1].endswith("login") for k in seen)
    sent = produce_raw(creds, other, count=2)
    assert [e.code() for e in sent] == [RawKafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    read, error = consume_raw(creds, other, "at-g")
    assert read == 0 and error is not None and error.code() == RawKafkaError.TOPIC_AUTHORIZATION_FAILED
    at_controller = {**creds, "bootstrap.servers": f"127.0.0.1:{controller}", "log_level": 0}
    assert all(err is not None for err in produce_raw(at_controller, other, count=1, timeout=6))
    assert all(err is None for err in produce_raw(creds, "at.own", count=1))  # and its own topic still works
    assert _intruders(kafka) == (set(), [])
    assert other in kafka.admin().list_topics(timeout=10).topics


def test_the_reconciler_deletes_users_and_bindings_it_did_not_issue_alerts_and_audits(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = new_app(server, acl={"produce": ["rk.*"], "consume": [], "group": []}, default_cluster="dc-a")
    own = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()["sasl.username"]
    started = time.time()
    admin = kafka.admin()  # someone holding the super user (or, before issue 37, anyone on the controller port)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("intruder", info, b"let-me-in")]).values():
        future.result(15)
    planted = [AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, principal, "*", AclOperation.READ,
                          AclPermissionType.ALLOW) for principal in ("User:intruder", "User:ANONYMOUS")]
    for future in admin.create_acls(planted).values():
        future.result(15)
    assert _intruders(kafka)[0] == {"intruder"}
    wait_until(lambda: _intruders(kafka) == (set(), []), RECONCILE_S * 3 + 10, message="foreign user deleted")
    users = set(admin.describe_user_scram_credentials().result(15))
    assert {own, kafka_secured.ADMIN_USER, kafka_secured.BROKER_USER} <= users  # ours and the system's stay
    repairs = [row for row in server.admin().audit(action="kafka.reconcile") if row["at"] >= started]
    foreign = {item for row in repairs for item in (row["before"] or {}).get("foreign", [])}
    assert {"intruder", "User:intruder READ TOPIC:LITERAL:*", "User:ANONYMOUS READ TOPIC:LITERAL:*"} <= foreign
    alert = next(a for a in server.admin().alerts(rule="kafka.foreign_access") if a["last_seen"] >= started)
    assert alert["level"] == "ERR" and alert["status"] == "firing" and "intruder" in alert["evidence"]["deleted"]
    assert alert["evidence"]["cluster"] == "dc-a"


def test_a_group_pattern_opens_no_other_apps_topic_and_no_app_fences_anothers_transactions(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """README's own ACL example (a group pattern) read and wrote another app's ``billing-invoices`` at the
    broker before issue 37; app ``shop`` could take over ``shop-billing``'s transactional ids."""
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as RawProducer

    tag = uuid.uuid4().hex[:4]
    shop = f"shop{tag}"
    created = server.admin().create_app(shop, acl={"produce": [f"orders{tag}"], "consume": [f"orders{tag}"],
                                                   "group": [f"billing{tag}-*"]}, default_cluster="dc-a")
    mine = App(shop, created["secret"])
    invoices = f"billing{tag}-invoices"  # another app's topic
    kafka.create_topics(invoices, f"orders{tag}")
    creds = grant_of(server, mine, tmp_path).clusters["dc-a"].rdkafka()
    sent = produce_raw(creds, invoices, count=2)
    assert [e.code() for e in sent] == [RawKafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    read, error = consume_raw(creds, invoices, f"billing{tag}-eu")  # a group its pattern grants
    assert read == 0 and error is not None and error.code() == RawKafkaError.TOPIC_AUTHORIZATION_FAILED

    def init(transactional_id: str) -> str:
        producer = RawProducer({**creds, "transactional.id": transactional_id, "log_level": 0})
        try:
            producer.init_transactions(20)
            return "ok"
        except KafkaException as exc:
            return exc.args[0].name()

    assert init(f"{shop}-billing/tx-1") == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"  # app shop-billing's
    assert init(f"{shop}-billing-tx-1") == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert init(f"{shop}/tx-1") == "ok"  # its own, under '<app id>/'


def test_a_copy_of_the_database_alone_yields_no_password_no_signing_key_and_no_token(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """Before issue 37 the sealing key was derived from a table of the same database (13 of 13 passwords
    opened) and the stored signing keys signed a grant that returned the app's broker password."""
    app = new_app(server, acl={"produce": ["db.*"], "consume": [], "group": []}, default_cluster="dc-a")
    password = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()["sasl.password"]
    stolen = tmp_path / "stolen.db"
    source = sqlite3.connect(server.db_url.removeprefix("sqlite:///"))
    with sqlite3.connect(stolen) as copy:
        source.backup(copy)  # a consistent copy of the whole database, -wal included
    source.close()
    assert password.encode() not in stolen.read_bytes()
    with sqlite3.connect(stolen) as conn:
        token_key = bytes(conn.execute("SELECT value FROM ms_server_keys WHERE name = ?",
                                       (TOKEN_KEY_NAME,)).fetchone()[0])
        sealed = [row[0] for row in conn.execute("SELECT password FROM ms_kafka_principals")]
        stored_key = bytes(conn.execute("SELECT signing_key FROM ms_apps WHERE app_id = ?",
                                        (app.app_id,)).fetchone()[0])
    assert len(sealed) >= 1
    opened = 0
    for box in (sealing.legacy_box(token_key),):  # everything the database itself holds
        for token in sealed:
            try:
                box.decrypt(token.encode())
                opened += 1
            except Exception:  # noqa: BLE001 - InvalidToken: sealed under the key outside the database
                pass
    assert opened == 0
    body = json.dumps({"app_id": app.app_id, "client_id": "thief", "ip": "10.0.0.9"}).encode()
    signed = requests.post(server.url + "/v1/auth/grant", data=body, timeout=10, headers={
        **signing.signed_headers(app.app_id, stored_key, "POST", "/v1/auth/grant", body),
        "Content-Type": "application/json"})
    assert signed.status_code == 401 and password not in signed.text
    token, _ = TokenCodec(token_key).issue(app.app_id, "thief", 1, 600)
    renewed = requests.post(server.url + "/v1/auth/renew", data=b"{}", timeout=10, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    assert renewed.status_code == 401 and password not in renewed.text
    assert grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()["sasl.password"] == password  # the app: fine


def _refused(creds: dict[str, Any], topic: str) -> bool:
    sent = produce_raw({**creds, "log_level": 0}, topic, count=1, timeout=6)
    return all(e is not None and e.code() in (RawKafkaError._AUTHENTICATION, RawKafkaError.SASL_AUTHENTICATION_FAILED,
                                              RawKafkaError.TOPIC_AUTHORIZATION_FAILED, RawKafkaError._MSG_TIMED_OUT)
               for e in sent)


def test_disabling_an_app_retires_its_password_and_enabling_it_issues_a_new_one(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """Before issue 37 an app enabled again got its old password back: whoever had kept it was back in."""
    app = new_app(server, acl={"produce": ["rv2.*"], "consume": [], "group": []}, default_cluster="dc-a")
    topic = f"rv2.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    old = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()
    assert all(e is None for e in produce_raw(old, topic, count=1))
    disabled_at = time.monotonic()
    server.admin().update_app(app.app_id, enabled=False)
    wait_until(lambda: old["sasl.username"] not in _scram_users(kafka),
               RECONCILE_S * 3 + 10, message="the disabled app's SCRAM user deleted")
    gone_s = time.monotonic() - disabled_at
    server.admin().update_app(app.app_id, enabled=True)
    new = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()
    assert new["sasl.password"] != old["sasl.password"]
    assert all(e is None for e in produce_raw(new, topic, count=1))
    assert _refused(old, topic)  # the kept old password opens nothing
    print(f"REVOKE-DISABLE user_gone_s={gone_s:.2f}")
    assert gone_s <= RECONCILE_S * 3 + 10


def test_deleting_a_cluster_from_the_registry_revokes_its_principals_on_the_brokers(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path, admin_passwords: Path) -> None:
    """Before issue 37 a deleted cluster's principals kept producing: nothing ever removed them."""
    name = f"dc-z{uuid.uuid4().hex[:4]}"
    (admin_passwords / f"{name}.password").write_text(kafka.admin_password)
    server.admin().set_cluster(name, kafka.bootstrap, dc="z", security=kafka.security())
    app = new_app(server, acl={"produce": ["cz.*"], "consume": [], "group": []}, default_cluster=name)
    topic = f"cz.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    creds = grant_of(server, app, tmp_path).clusters[name].rdkafka()
    assert all(e is None for e in produce_raw(creds, topic, count=1))
    started, deleted_at = time.time(), time.monotonic()
    server.admin().delete_cluster(name)
    wait_until(lambda: creds["sasl.username"] not in _scram_users(kafka)
               and not _acls_of(kafka, f"User:{creds['sasl.username']}"), RECONCILE_S * 3 + 10,
               message="the deleted cluster's principal and bindings gone")
    gone_s = time.monotonic() - deleted_at
    assert _refused(creds, topic)
    retired = [row for row in server.admin().audit(action="kafka.retire") if row["at"] >= started]
    assert [row["target"] for row in retired] == [f"cluster:{name}"]
    print(f"REVOKE-CLUSTER-DELETE gone_s={gone_s:.2f}")
    assert gone_s <= RECONCILE_S * 3 + 10


def _acls_of(kafka: kafka_secured.SecuredKafka, principal: str) -> list[Any]:
    from confluent_kafka.admin import AclBindingFilter

    admin = kafka.admin()  # held until the future resolves: a collected client destroys its handle
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,  # type: ignore[arg-type]
        AclPermissionType.ANY)).result(15)
    return list(found)


def test_a_local_caller_cannot_pick_the_source_its_failures_are_charged_to(
        ms_factory: Callable[..., MetaServer]) -> None:
    """Before issue 37 the MetaServer believed X-Forwarded-For from 127.0.0.1: a local caller spread its failed
    authentications over invented addresses and was never limited. Now no proxy is trusted unless configured."""
    bare = ms_factory(forwarded_allow_ips="", auth_fail_limit=5)
    codes = []
    for i in range(8):
        answer = requests.post(bare.url + "/v1/auth/renew", data=b"{}", timeout=10, headers={
            "Authorization": "Bearer v1.forged.token", "Content-Type": "application/json",
            "X-Forwarded-For": f"198.51.100.{i + 1}"})
        codes.append(answer.status_code)
    assert codes[:5] == [401] * 5 and 429 in codes[5:], codes  # every failure charged to the caller itself


def _scram_users(kafka: kafka_secured.SecuredKafka) -> set[str]:
    admin = kafka.admin()  # held until the future resolves
    return set(admin.describe_user_scram_credentials().result(15))


def _telemetry_of(kafka: kafka_secured.SecuredKafka, topic: str, match: Callable[[dict[str, Any]], bool],
                  timeout: float = 20.0) -> list[dict[str, Any]]:
    """The events on ``topic`` that ``match``, read as the super user (the pipeline's and MetaServer's view)."""
    from confluent_kafka import Consumer as RawConsumer
    from confluent_kafka import TopicPartition

    from ykafka import events

    consumer = RawConsumer(kafka.client(**{"group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                                           "enable.partition.eof": False}))
    found: list[dict[str, Any]] = []
    try:
        meta = wait_until(lambda: consumer.list_topics(topic, timeout=5).topics.get(topic), timeout)
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        deadline = time.monotonic() + timeout
        while not found and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    found.extend(e for _kind, e in events.iter_events(iter([msg.value()])) if match(e))
    finally:
        consumer.close()
    return found


def test_an_app_writes_only_its_own_telemetry_topics_and_reads_none(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """Before issue 37 every app could write the shared ``__ykafka_clients`` / ``_metrics`` / ``_trace``, so app A
    could put a client report, metric or trace there claiming to be app B, and the console showed it as B's.
    Now each app's SDK writes to its own topics (``__ykafka_clients.<app>``), the only ones the broker lets it
    write, and no app reads any telemetry topic, not even with consume ``*``."""
    from confluent_kafka import Producer as RawProducer

    from ykafka import Producer, events

    a = new_app(server, acl={"produce": ["ta.*"], "consume": ["*"], "group": ["ta-g"]}, default_cluster="dc-a")
    b = new_app(server, acl={"produce": ["tb.*"], "consume": [], "group": []}, default_cluster="dc-a")
    creds = grant_of(server, a, tmp_path).clusters["dc-a"].rdkafka()
    grant_of(server, b, tmp_path)  # B's principal, bindings and telemetry topics exist
    topics = set(kafka.admin().list_topics(timeout=10).topics)
    for kind in events.TELEMETRY_KINDS:  # the reconciler made each app's own with its bindings
        assert {events.app_topic(kind, a.app_id), events.app_topic(kind, b.app_id), events.TOPICS[kind]} <= topics
    forged = events.encode_rows("client", [[int(time.time() * 1000), "forged", b.app_id]])
    for kind in events.TELEMETRY_KINDS:
        for target in (events.app_topic(kind, b.app_id), events.TOPICS[kind]):  # B's own, and the shared one
            producer = RawProducer({**creds, "message.timeout.ms": 8000, "log_level": 0})
            errors: list[Any] = []
            producer.produce(target, forged, on_delivery=lambda err, _msg, out=errors: out.append(err))
            producer.flush(12)
            assert [e.code() if e else None for e in errors] == [RawKafkaError.TOPIC_AUTHORIZATION_FAILED], target
    read, error = consume_raw(creds, events.app_topic("client", a.app_id), "ta-g", timeout=8)
    assert read == 0 and error is not None and error.code() == RawKafkaError.TOPIC_AUTHORIZATION_FAILED
    topic = f"ta.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    with Producer({"ykafka.app.id": a.app_id, "ykafka.app.secret": a.secret, "ykafka.metaserver": server.url,
                   "ykafka.cache.dir": str(tmp_path / "sdk")}) as producer:
        client_id = producer.runtime.client_id
        producer.produce(topic, b"hello")
        assert producer.flush(15) == 0
    reports = _telemetry_of(kafka, events.app_topic("client", a.app_id), lambda e: e["client_id"] == client_id)
    assert reports and {e["app"] for e in reports} == {a.app_id}  # the SDK's own report: on A's own topic


# --- the config center: each app reads only its own namespaces ---------------------------------------------------

def _cc_get(server: MetaServer, path_q: str, key: str | None) -> requests.Response:
    """A config-service read as an Apollo client sends it, signed with ``key`` (unsigned: None)."""
    assert server.configcenter_url is not None
    headers = cc_signature.build_headers(server.apollo_app_id, path_q, key) if key else {}
    return requests.get(server.configcenter_url + path_q, headers=headers, timeout=10)


def _configs(server: MetaServer, namespace: str) -> str:
    return f"/configs/{server.apollo_app_id}/default/{namespace}"


def _poll(server: MetaServer, namespaces: list[str]) -> str:
    notifications = json.dumps([{"namespaceName": ns, "notificationId": -1} for ns in namespaces])
    return "/notifications/v2?" + urlencode({"appId": server.apollo_app_id, "cluster": "default",
                                             "notifications": notifications})


def _two_apps_with_config(server: MetaServer) -> tuple[App, App, str, str]:
    tag = uuid.uuid4().hex[:6]
    own, other = f"cka{tag}.orders", f"ckb{tag}.payroll"
    a = new_app(server, acl={"produce": [f"cka{tag}.*"], "consume": [], "group": []}, default_cluster="dc-a")
    b = new_app(server, acl={"produce": [f"ckb{tag}.*"], "consume": [], "group": []}, default_cluster="dc-a")
    admin = server.admin()
    admin.push_config(f"topic:{own}", {"producer.linger.ms": "17"})
    admin.push_config(f"topic:{other}", {"producer.linger.ms": "23"})
    return a, b, own, other


def test_a_grant_carries_its_apps_own_config_key_which_opens_no_other_apps_namespace(
        server: MetaServer, tmp_path: Path) -> None:
    """Before issue 37 every grant carried the config service's one shared secret: any app read every app's,
    cluster's, group's and topic's namespace with it."""
    a, b, own, other = _two_apps_with_config(server)
    key_a = grant_of(server, a, tmp_path).configcenter.access_key_secret
    key_b = grant_of(server, b, tmp_path).configcenter.access_key_secret
    assert key_a and key_b and len({key_a, key_b, SHARED_CC_SECRET}) == 3  # each its own, never the shared one
    mine = _cc_get(server, _configs(server, f"ykafka.topic.{own}"), key_a)
    assert mine.status_code == 200 and mine.json()["configurations"] == {"producer.linger.ms": "17"}
    server.admin().push_config("global", {"producer.linger.ms": "5"})
    every = _cc_get(server, _configs(server, "ykafka.global"), key_a)  # everyone's namespace
    assert every.status_code == 200 and every.json()["configurations"] == {"producer.linger.ms": "5"}
    for path in (_configs(server, f"ykafka.topic.{other}"), _configs(server, f"ykafka.topic.{other}.properties"),
                 _configs(server, f"ykafka.topic.{other.upper()}"),  # Apollo's names compare case-blind
                 f"/configfiles/json/{server.apollo_app_id}/default/ykafka.topic.{other}",
                 f"/configfiles/{server.apollo_app_id}/default/ykafka.topic.{other}",
                 _configs(server, "application"), _poll(server, [f"ykafka.topic.{other}"])):
        refused = _cc_get(server, path, key_a)
        assert refused.status_code == 401, (path, refused.status_code)
        assert other not in refused.text and '"23"' not in refused.text  # quoted: a timestamp holds 23 too
    # a long poll keeps only what the key opens: b's namespace is never answered, not even with its id
    polled = _cc_get(server, _poll(server, [f"ykafka.topic.{own}", f"ykafka.topic.{other}"]), key_a)
    assert polled.status_code == 200
    assert [n["namespaceName"] for n in polled.json()] == [f"ykafka.topic.{own}"]
    theirs = _cc_get(server, _configs(server, f"ykafka.topic.{other}"), key_b)  # b itself: fine
    assert theirs.status_code == 200 and theirs.json()["configurations"] == {"producer.linger.ms": "23"}
    assert _cc_get(server, _configs(server, f"ykafka.topic.{own}"), SHARED_CC_SECRET).status_code == 401


def test_an_unsigned_read_on_the_secured_stack_is_refused_without_echo(server: MetaServer, tmp_path: Path) -> None:
    """Before issue 37 the secured stack's config service answered unsigned reads of every namespace."""
    _, _, own, _ = _two_apps_with_config(server)
    app = server.apollo_app_id
    for path in (_configs(server, f"ykafka.topic.{own}"), _configs(server, "ykafka.global"),
                 f"/configfiles/json/{app}/default/ykafka.topic.{own}", f"/configfiles/{app}/default/ykafka.global",
                 _poll(server, [f"ykafka.topic.{own}"])):
        refused = _cc_get(server, path, None)
        assert refused.status_code == 401, (path, refused.status_code)
        # the namespace's name and its key: a value as short as "17" turned up in the answer's timestamp (".217")
        assert own not in refused.text and "producer.linger.ms" not in refused.text


def test_disabling_or_rotating_an_app_retires_its_config_key_at_once(server: MetaServer, tmp_path: Path) -> None:
    """The key follows the app: disabled, it opens nothing; enabled again or rotated, the app gets a new one
    and the kept old one opens nothing."""
    a, _, own, _ = _two_apps_with_config(server)
    path = _configs(server, f"ykafka.topic.{own}")
    old = grant_of(server, a, tmp_path).configcenter.access_key_secret
    assert _cc_get(server, path, old).status_code == 200
    started = time.monotonic()
    server.admin().update_app(a.app_id, enabled=False)
    wait_until(lambda: _cc_get(server, path, old).status_code == 401, 5, message="the disabled app's key refused")
    disable_s = time.monotonic() - started
    server.admin().update_app(a.app_id, enabled=True)
    revived = grant_of(server, a, tmp_path).configcenter.access_key_secret
    assert revived and revived != old and _cc_get(server, path, revived).status_code == 200
    assert _cc_get(server, path, old).status_code == 401
    started = time.monotonic()
    rotated = server.admin().rotate_secret(a.app_id)
    wait_until(lambda: _cc_get(server, path, revived).status_code == 401, 5, message="the rotated app's key refused")
    rotate_s = time.monotonic() - started
    fresh = grant_of(server, App(a.app_id, rotated["secret"]), tmp_path).configcenter.access_key_secret
    assert fresh and fresh not in (old, revived) and _cc_get(server, path, fresh).status_code == 200
    print(f"CC-KEY-REVOKE disable_s={disable_s:.2f} rotate_s={rotate_s:.2f}")
    assert disable_s <= 1.5 and rotate_s <= 1.5


def test_the_sdk_reads_its_hot_config_with_its_own_key_on_the_secured_stack(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    """End to end: the SDK signs every config-service read with the key from its grant, and applies its
    topic's value; before issue 37 it signed with the shared secret (or not at all)."""
    a, _, own, _ = _two_apps_with_config(server)
    kafka.create_topics(own)
    conf = {"ykafka.app.id": a.app_id, "ykafka.app.secret": a.secret, "ykafka.metaserver": server.url,
            "ykafka.cache.dir": str(tmp_path / "c"), "ykafka.dr.enabled": False}
    with Producer(conf) as producer:
        producer.produce(own, b"m0")
        assert producer.flush(15) == 0
        runtime = producer.runtime
        assert runtime.apollo is not None and runtime.apollo.secret not in (None, SHARED_CC_SECRET)
        wait_until(lambda: runtime.hot.resolve(topic=own).get("producer.linger.ms") == 17, 15,
                   message="the topic's hot value applied")
        assert runtime.hot.sources(topic=own, names=["producer.linger.ms"]) == {
            "producer.linger.ms": f"ykafka.topic.{own}"}
