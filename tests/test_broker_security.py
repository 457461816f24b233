"""Broker-side security, proved against a secured Apache Kafka over the network as an outsider would
(issue 28): the cluster refuses anyone the MetaServer has not granted, each app is confined to its ACL by
the broker itself, and the MetaServer's reconciler keeps the brokers' bindings equal to its table.

One SASL_SSL Kafka (SCRAM-SHA-512, StandardAuthorizer, no ACL = no access) and one MetaServer holding its
super user. The registry names the same broker twice (``dc-a`` and ``dc-b``): each name gets its own
principals, so a grant that reaches only dc-a provably carries nothing that opens dc-b.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from tests import kafka_secured
from tests.console_fixtures import PASSWORD, SCREENSHOTS
from tests.helpers import wait_until
from tests.kafka_secured import consume_raw, grant_of, produce_raw
from tests.ms_fixtures import ADMIN_TOKEN, App, MetaServer, new_app
from ykafka.admin.topics import partition_count

RECONCILE_S = 2.0


kafka = kafka_secured.module_fixture("SASL_SSL")


@pytest.fixture(scope="module")
def server(kafka: kafka_secured.SecuredKafka, ms_factory: Callable[..., MetaServer]) -> MetaServer:
    ms = ms_factory(env=kafka.metaserver_env(), kafka_admin_user=kafka_secured.ADMIN_USER,
                    kafka_system_users=kafka_secured.BROKER_USER,
                    acl_reconcile_interval=RECONCILE_S)
    for name in ("dc-a", "dc-b"):
        ms.admin().set_cluster(name, kafka.bootstrap, dc=name[-1], security=kafka.security())
    return ms


def app_on(server: MetaServer, prefix: str, cluster: str = "dc-a") -> App:
    return new_app(server, acl={"produce": [f"{prefix}.*"], "consume": [f"{prefix}.*"], "group": [f"{prefix}-*"]},
                   default_cluster=cluster)


def test_a_client_with_only_the_address_is_refused(kafka: kafka_secured.SecuredKafka) -> None:
    topic = f"open.{uuid.uuid4().hex[:6]}"
    kafka.create_topics(topic)
    # both refused sends wait out their message timeout: side by side, not one after the other
    with ThreadPoolExecutor(2) as pool:
        plain, guessed = pool.map(lambda conf: produce_raw(conf, topic, timeout=8),
                                  ({"bootstrap.servers": kafka.bootstrap}, kafka.client("someone", "guessed-password")))
    assert len(plain) == 3 and all(err is not None for err in plain)  # no TLS, no SASL: never delivered
    assert len(guessed) == 3 and all(err is not None for err in guessed)
    read, error = consume_raw(kafka.client("someone", "guessed-password"), topic, "g", timeout=8)
    assert read == 0 and error is not None and error.code() in (RawKafkaError._AUTHENTICATION,
                                                                 RawKafkaError.SASL_AUTHENTICATION_FAILED)
    assert consume_raw(kafka.client(), topic, "admin-check", timeout=5)[0] == 0  # nothing got in


def test_an_apps_credentials_open_only_its_own_topics_and_groups(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    a, b = app_on(server, "sa"), app_on(server, "sb")
    kafka.create_topics("sa.orders", "sb.orders", "other.t")
    grant = grant_of(server, a, tmp_path)
    creds = grant.clusters["dc-a"].rdkafka()
    assert creds["sasl.username"] == f"app.{a.app_id}@dc-a.g1" and creds["security.protocol"] == "SASL_SSL"
    assert all(err is None for err in produce_raw(creds, "sa.orders"))  # its own topic works
    assert consume_raw(creds, "sa.orders", "sa-billing") == (3, None)
    errors = produce_raw(creds, "sb.orders")  # B's topic
    assert [e.code() for e in errors] == [RawKafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    errors = produce_raw(creds, "other.t")  # outside A's ACL
    assert [e.code() for e in errors] == [RawKafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    read, error = consume_raw(creds, "sb.orders", "sa-billing")  # reading B's topic
    assert read == 0 and error is not None and error.code() == RawKafkaError.TOPIC_AUTHORIZATION_FAILED
    read, error = consume_raw(creds, "sa.orders", "sb-billing")  # joining B's group
    assert read == 0 and error is not None and error.code() == RawKafkaError.GROUP_AUTHORIZATION_FAILED
    b_creds = grant_of(server, b, tmp_path).clusters["dc-a"].rdkafka()
    assert b_creds["sasl.password"] != creds["sasl.password"]
    assert all(err is None for err in produce_raw(b_creds, "sb.orders"))


def test_a_grant_for_dc_a_only_carries_no_credential_for_dc_b(server: MetaServer, tmp_path: Path) -> None:
    only_a = app_on(server, "oa", "dc-a")
    on_b = app_on(server, "ob", "dc-b")
    grant_a = grant_of(server, only_a, tmp_path)
    assert sorted(grant_a.clusters) == ["dc-a"]
    text = json.dumps(grant_a.raw)
    assert "@dc-b" not in text and text.count('"password"') == 1
    grant_b = grant_of(server, on_b, tmp_path)
    assert sorted(grant_b.clusters) == ["dc-b"]
    assert (grant_b.clusters["dc-b"].sasl or {})["username"] == f"app.{on_b.app_id}@dc-b.g1"
    principals = server.admin().app_kafka(only_a.app_id)["clusters"]
    assert [c["cluster"] for c in principals] == ["dc-a"]


def _acls(kafka: kafka_secured.SecuredKafka, principal: str) -> set[tuple[str, ...]]:
    admin = kafka.admin()
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,  # type: ignore[arg-type]
        AclPermissionType.ANY)).result(15)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name)
            + (("DENY",) if b.permission_type.name == "DENY" else ()) for b in found}


def test_the_reconciler_restores_a_binding_deleted_by_hand_and_audits_it(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path) -> None:
    app = app_on(server, "rc")
    grant_of(server, app, tmp_path)  # its principal and bindings now exist
    principal = f"User:app.{app.app_id}@dc-a.g1"
    want = {("TOPIC", "rc.", "PREFIXED", "WRITE"), ("TOPIC", "rc.", "PREFIXED", "DESCRIBE"),
            ("TOPIC", "rc.", "PREFIXED", "READ"), ("GROUP", "rc-", "PREFIXED", "READ"),  # a group pattern: no topics
            ("TRANSACTIONAL_ID", f"{app.app_id}/", "PREFIXED", "WRITE"),
            ("TRANSACTIONAL_ID", f"{app.app_id}/", "PREFIXED", "DESCRIBE"),
            *(("TOPIC", f"{telemetry}.{app.app_id}", "LITERAL", op)  # its own reports, metrics and traces only
              for telemetry in ("__ykafka_clients", "__ykafka_metrics", "__ykafka_trace")
              for op in ("WRITE", "DESCRIBE")),
            *(("TOPIC", telemetry, "PREFIXED", "READ", "DENY")  # and no telemetry readable (issue 37)
              for telemetry in ("__ykafka_clients", "__ykafka_metrics", "__ykafka_trace"))}
    assert wait_until(lambda: _acls(kafka, principal) == want, 15, message="bindings provisioned")
    # ...and the telemetry topics those bindings name exist: an app may write them, not create them (before, every
    # client report on a secured cluster was refused with "Topic authorization failed")
    telemetry_topics = {f"{t}{suffix}" for t in ("__ykafka_clients", "__ykafka_metrics", "__ykafka_trace")
                        for suffix in ("", f".{app.app_id}")}
    assert telemetry_topics <= set(kafka.admin().list_topics(timeout=15).topics)
    started = time.time()
    write = AclBindingFilter(ResourceType.TOPIC, "rc.", ResourcePatternType.PREFIXED, principal, "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
    everyone = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.ALL,
                          AclPermissionType.ALLOW)
    admin = kafka.admin()
    for future in admin.delete_acls([write]).values():
        assert len(future.result(15)) == 1  # Kafka's own admin API deleted it
    for future in admin.create_acls([everyone]).values():
        future.result(15)  # and someone opened every topic to everyone
    wait_until(lambda: _acls(kafka, principal) == want and not _acls(kafka, "User:*"), RECONCILE_S * 3 + 10,
               message="reconciler repaired the drift")
    took = time.time() - started
    repairs = [row for row in server.admin().audit(action="kafka.reconcile") if row["at"] >= started]
    text = json.dumps(repairs)
    assert f"{principal} WRITE TOPIC:PREFIXED:rc." in text and "User:* ALL TOPIC:LITERAL:*" in text
    assert all(row["operator"] == "reconciler" and row["target"] == "cluster:dc-a" for row in repairs)
    assert took <= RECONCILE_S * 3 + 10
    view = server.admin().app_kafka(app.app_id)["clusters"][0]
    assert view["ok"] is True and view["missing"] == [] and view["extra"] == [] and len(view["desired"]) == 15


def test_console_shows_each_apps_principal_bindings_and_the_clusters_security(
        server: MetaServer, kafka: kafka_secured.SecuredKafka, tmp_path: Path, page: Any) -> None:
    app = app_on(server, "cv")
    grant_of(server, app, tmp_path)
    principal = f"User:app.{app.app_id}@dc-a.g1"
    wait_until(lambda: (view := server.admin().app_kafka(app.app_id)["clusters"]) and view[0]["ok"]
               and not view[0]["missing"] and len(view[0]["in_force"]) == 15, 20, message="reconciled")
    user = f"admin-{uuid.uuid4().hex[:6]}"
    server.admin().create_user(user, PASSWORD, "admin")
    page.goto(server.url + "/console/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(server.url + "/console/")
    page.goto(f"{server.url}/console/apps/{app.app_id}")
    access = page.locator("#broker-access .cluster-access[data-cluster='dc-a']")
    assert access.locator(".principal").all_inner_texts() == [principal]
    assert access.locator("tbody tr").count() == 15 and access.locator("tr.missing, tr.extra").count() == 0
    assert access.locator(".pill.ok").inner_text() == "ok" and access.locator(".reconciled").count() == 1
    assert "WRITE TOPIC:PREFIXED:cv." in access.inner_text()
    assert f"WRITE TOPIC:LITERAL:__ykafka_clients.{app.app_id}" in access.inner_text()  # its own telemetry only
    assert "DENY READ TOPIC:PREFIXED:__ykafka_trace" in access.inner_text()
    assert page.locator("#broker-access .cluster-access[data-cluster='dc-b']").count() == 0  # never reached
    access.screenshot(path=str(SCREENSHOTS / "console-broker-access.png"))
    page.goto(server.url + "/console/clusters")
    security = page.locator("#clusters tr[data-cluster='dc-a'] td.security")
    assert security.inner_text().strip() == "SASL_SSL SCRAM-SHA-512"
    page.screenshot(path=str(SCREENSHOTS / "console-clusters-security.png"), full_page=True)


def test_an_admin_makes_the_topic_an_app_may_not_create(server: MetaServer, kafka: kafka_secured.SecuredKafka,
                                                        tmp_path: Path) -> None:
    """On a secured cluster apps write and read their topics but never create them; ``ykafka admin topics
    create`` makes one with the MetaServer's principal, grants the app and sets the route, in one command."""
    app = new_app(server, acl={"produce": [], "consume": [], "group": ["mk-*"]}, default_cluster="dc-a")
    topic = f"made.{uuid.uuid4().hex[:6]}"
    creds = grant_of(server, app, tmp_path).clusters["dc-a"].rdkafka()
    assert all(err is not None for err in produce_raw(creds, topic, timeout=6))  # it may not create it
    env = {**os.environ, "YKAFKA_METASERVER": server.url, "YKAFKA_ADMIN_TOKEN": ADMIN_TOKEN}
    made = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", "topics", "create", topic, "--app",
                           app.app_id, "--cluster", "dc-a", "--partitions", "2"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert f"topic {topic} on dc-a: created; {app.app_id} may produce and consume it; route set" in made.stdout
    assert partition_count(kafka.client(), topic) == 2
    assert server.admin().get_acl(app.app_id)["produce"] == [topic]
    assert server.admin().get_config(f"topic:{topic}")["released"]["route.cluster"] == "dc-a"
    # the app's bindings for it reach the broker with the reconciler; then its own credentials write and read it
    wait_until(lambda: all(err is None for err in produce_raw(creds, topic, timeout=6)), 30,
               message="the app writes the topic the admin made")
    assert consume_raw(creds, topic, "mk-read")[0] >= 3

    def refused(body: dict[str, Any], token: str = ADMIN_TOKEN) -> tuple[int, str]:
        answer = requests.post(f"{server.url}/v1/admin/topics", json=body, timeout=30,
                               headers={"Authorization": f"Bearer {token}"})
        return answer.status_code, answer.text

    assert refused({"name": topic, "app_id": app.app_id}) == (
        422, '{"detail":"that topic is already requested or approved"}')
    assert refused({"name": "made.other", "app_id": "no-such-app"}) == (422, '{"detail":"no such app"}')
    assert refused({"name": "made.other", "app_id": app.app_id, "cluster": "nowhere"}) == (
        422, '{"detail":"cluster: pick an active registered cluster"}')
    status, text = refused({"name": "made.other", "app_id": app.app_id, "partitions": 0})
    assert status == 422 and "partitions" in text
    assert refused({"name": "made.other", "app_id": app.app_id}, token="guess")[0] == 401
    assert partition_count(kafka.client(), "made.other") is None  # nothing made by a refused call
