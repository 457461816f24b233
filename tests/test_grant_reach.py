"""A grant carries only the clusters the app can reach, and credentials only for those (issue 14).

Over HTTP against a real MetaServer and config service: an app allowed only ``orders.*`` is never sent the
SASL password of a cluster only ``payments.*`` is routed to; a route released later (or a gray release
the main copy does not show) reaches the client through a confirmed *want*; a want for a cluster no
namespace of the app names is refused. Then the SDK end to end: a running Producer follows a route to a
cluster its first grant did not carry, with every message counted.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from metaserver.domain.apollo import ApolloOpenApi
from tests.helpers import wait_until
from tests.ms_fixtures import OPENAPI_TOKEN, MetaServer, new_app
from tests.sdk_fixtures import read_topic
from tests.support import LocalStack
from ykafka import Producer
from ykafka.auth import GrantClient

SASL = {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def server(ms_factory: object) -> MetaServer:
    ms: MetaServer = ms_factory()  # type: ignore[operator]
    admin = ms.admin()
    admin.set_cluster("home", "127.0.0.1:19101", dc="a")
    admin.set_cluster("pay", "127.0.0.1:19102", dc="a", standby="pay-dr", security=SASL)
    admin.set_cluster("pay-dr", "127.0.0.1:19103", dc="b")
    admin.set_cluster("vault", "127.0.0.1:19104", dc="b", security=SASL)
    push(ms, "topic:payments.eu", {"route.cluster": "pay"})
    return ms


def push(ms: MetaServer, scope: str, values: dict[str, str], ips: list[str] | None = None) -> None:
    ms.admin().push_config(scope, values, ips=ips)


def grant_client(ms: MetaServer, app_id: str, secret: str, tmp_path: Path) -> GrantClient:
    return GrantClient(ms.url, app_id, secret, f"c-{uuid.uuid4().hex[:6]}", "10.9.8.7", tmp_path / "cache")


@pytest.fixture()
def clients(tmp_path: Path) -> Iterator[list[GrantClient]]:
    made: list[GrantClient] = []
    yield made
    for client in made:
        client.close()


def test_a_grant_names_only_reachable_clusters_and_no_other_password(
        server: MetaServer, tmp_path: Path, clients: list[GrantClient]) -> None:
    orders = new_app(server, acl={"produce": ["orders.*"], "consume": [], "group": []}, default_cluster="home")
    payments = new_app(server, acl={"produce": ["payments.*"], "consume": [], "group": []}, default_cluster="home")
    clients += [grant_client(server, orders.app_id, orders.secret, tmp_path / "o"),
                grant_client(server, payments.app_id, payments.secret, tmp_path / "p")]
    granted_orders = clients[0].authenticate()
    assert sorted(granted_orders.clusters) == ["home"]
    text = json.dumps(granted_orders.raw)
    assert "password" not in text and "19102" not in text
    granted_pay = clients[1].authenticate()
    assert sorted(granted_pay.clusters) == ["home", "pay", "pay-dr"]  # the route and its standby
    sasl = granted_pay.clusters["pay"].sasl or {}
    assert sasl["username"] == f"app.{payments.app_id}@pay.g1" and len(sasl["password"]) >= 32
    assert sasl["mechanism"] == "SCRAM-SHA-512" and sasl["security_protocol"] == "SASL_PLAINTEXT"
    assert granted_pay.clusters["home"].sasl is None  # an open cluster needs none
    assert "vault" not in json.dumps(granted_pay.raw)
    renewed = clients[1].renew(granted_pay)  # renewal narrows the same way, with the same principal
    assert sorted(renewed.clusters) == ["home", "pay", "pay-dr"] and renewed.clusters["pay"].sasl == sasl


def test_a_want_is_granted_only_when_the_config_center_confirms_it(
        server: MetaServer, tmp_path: Path, clients: list[GrantClient]) -> None:
    app = new_app(server, acl={"produce": ["orders.*"], "consume": [], "group": []}, default_cluster="home")
    client = grant_client(server, app.app_id, app.secret, tmp_path)
    clients.append(client)
    grant = client.authenticate()
    # asking for a cluster nothing routes the app to: refused (not listed), whatever the namespace claimed
    assert sorted(client.renew(grant, [("ykafka.topic.orders.eu", "vault")]).clusters) == ["home"]
    assert sorted(client.renew(grant, [("ykafka.topic.payments.eu", "pay")]).clusters) == ["home"]  # not its topic
    # a route written straight into the config center (a hand edit in Apollo): confirmed on demand
    api = ApolloOpenApi(server.configcenter_url or "", OPENAPI_TOKEN, app_id=server.apollo_app_id)
    api.ensure_app()
    api.ensure_namespace("ykafka.topic.orders.eu")
    api.set_item("ykafka.topic.orders.eu", "route.cluster", "vault")
    api.release("ykafka.topic.orders.eu", "hand-edit", "test")
    wanted = wait_until(lambda: (g := client.renew(grant, [("ykafka.topic.orders.eu", "vault")])).clusters.get(
        "vault") and g, timeout=5, interval=0.3, message="the hand-edited route confirmed")  # refusals last 1 s
    assert sorted(wanted.clusters) == ["home", "vault"] and wanted.clusters["vault"].sasl is not None
    # a gray release to one IP: only the main copy is cached, the gray value is read when wanted
    push(server, "topic:orders.us", {"producer.linger.ms": "5"})
    push(server, "topic:orders.us", {"route.cluster": "pay"}, ips=["10.9.8.7"])
    assert "pay" not in client.renew(grant).clusters  # the main copy does not route orders.us to pay
    gray = client.renew(grant, [("ykafka.topic.orders.us", "pay")])
    assert sorted(gray.clusters) == ["home", "pay", "pay-dr", "vault"]  # vault: orders.eu's route, now cached


def test_a_running_producer_follows_a_route_to_a_cluster_its_grant_lacked(sdk_stack: LocalStack) -> None:
    alias = f"reach-{uuid.uuid4().hex[:6]}"  # another registry name for dc-b's broker, standby of nothing
    resp = sdk_stack.admin("PUT", f"/v1/admin/clusters/{alias}",
                           {"bootstrap_servers": sdk_stack.clusters["dc-b"], "dc": "b", "status": "active"})
    assert resp.status_code == 200, resp.text
    app = sdk_stack.new_app([f"{alias}.*"])
    topic = f"{alias}.t"
    try:
        with Producer(sdk_stack.client_config(app, **{"ykafka.local.default.cluster": "dc-a"})) as producer:
            assert alias not in producer.runtime.clusters()
            sent = 0
            for _ in range(20):
                producer.produce(topic, f"k:{sent}".encode(), b"k")
                sent += 1
            assert producer.flush(15) == 0
            sdk_stack.publish_raw(f"ykafka.topic.{topic}", {"route.cluster": alias})  # straight into Apollo
            deadline = time.monotonic() + 20
            while producer.runtime.route(topic) != alias and time.monotonic() < deadline:
                producer.produce(topic, f"k:{sent}".encode(), b"k")
                sent += 1
                producer.poll(0.05)
            assert producer.runtime.route(topic) == alias, "route to the wanted cluster never applied"
            assert producer.flush(15) == 0
            after = sent
            for _ in range(20):
                producer.produce(topic, f"k:{sent}".encode(), b"k")
                sent += 1
            assert producer.flush(15) == 0
        on_a = read_topic(sdk_stack.clusters["dc-a"], topic, 1, timeout=5)
        on_b = read_topic(sdk_stack.clusters["dc-b"], topic, sent - after)
        values = sorted(int(r.value.split(":")[1]) for r in [*on_a, *on_b])
        assert values == list(range(sent)), "every message exactly once across the two clusters"
        assert on_b and min(int(r.value.split(":")[1]) for r in on_b) <= after
    finally:
        sdk_stack.admin("DELETE", f"/v1/admin/clusters/{alias}")


# --- topic placements: users name topics, the platform picks the cluster ---------------------------


def test_placements_are_validated_paged_and_audited(sdk_stack: LocalStack) -> None:
    prefix = f"pl-{uuid.uuid4().hex[:6]}"
    wanted_bad = {f"{prefix}.a": "dc-a", f"{prefix}.b": "nowhere", "..": "dc-a"}
    bad = sdk_stack.admin("PUT", "/v1/admin/placements", {"placements": wanted_bad})
    assert bad.status_code == 422, bad.text
    body = bad.json()
    assert body["detail"] == "2 placement(s) rejected; nothing written"
    assert body["errors"][f"{prefix}.b"].startswith("unknown cluster 'nowhere'; registered: ")
    assert body["errors"][".."].startswith("topic name: ")
    assert sdk_stack.admin("GET", f"/v1/admin/placements?prefix={prefix}").json()["placements"] == []
    wanted = {f"{prefix}.{i:03d}": ("dc-a" if i % 3 else "dc-b") for i in range(25)}
    assert sdk_stack.admin("PUT", "/v1/admin/placements", {"placements": wanted}).json() == {"written": 25}
    seen: dict[str, str] = {}
    after = ""
    while True:  # keyset pages of 10
        page = sdk_stack.admin("GET", f"/v1/admin/placements?prefix={prefix}&limit=10&after={after}").json()
        seen.update({row["topic"]: row["cluster"] for row in page["placements"]})
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seen == wanted
    assert sdk_stack.admin("DELETE", f"/v1/admin/placements/{prefix}.000").status_code == 204
    assert sdk_stack.admin("DELETE", f"/v1/admin/placements/{prefix}.000").status_code == 404
    audit = sdk_stack.admin("GET", "/v1/admin/audit?limit=20").json()
    assert {"placement.put", "placement.delete"} <= {entry["action"] for entry in audit}
    for topic in wanted:
        sdk_stack.admin("DELETE", f"/v1/admin/placements/{topic}")


def test_a_producer_sends_an_unseen_topic_to_its_placement_and_a_topic_route_wins(sdk_stack: LocalStack) -> None:
    alias = f"place-{uuid.uuid4().hex[:6]}"  # dc-b's broker under another name, reachable by nothing else
    resp = sdk_stack.admin("PUT", f"/v1/admin/clusters/{alias}",
                           {"bootstrap_servers": sdk_stack.clusters["dc-b"], "dc": "b", "status": "active"})
    assert resp.status_code == 200, resp.text
    placed, routed, plain = f"{alias}.placed", f"{alias}.routed", f"{alias}.plain"
    app = sdk_stack.new_app([f"{alias}.*"])
    try:
        assert sdk_stack.admin("PUT", "/v1/admin/placements",
                               {"placements": {placed: alias, routed: alias}}).status_code == 200
        sdk_stack.push(f"topic:{routed}", {"route.cluster": "dc-a"})  # a topic-scope route beats the placement
        with Producer(sdk_stack.client_config(app, **{"ykafka.local.default.cluster": "dc-a"})) as producer:
            grant = producer.runtime.grant
            assert grant is not None and grant.placements and alias not in grant.clusters
            for topic in (placed, routed, plain):
                for i in range(10):
                    producer.produce(topic, f"{topic}:{i}".encode(), b"k")
            assert producer.flush(15) == 0
            assert producer.runtime.route(placed) == alias and alias in producer.runtime.clusters()
            assert producer.runtime.route(routed) == "dc-a" and producer.runtime.route(plain) == "dc-a"
            token = producer.runtime.grant.token if producer.runtime.grant else ""
        assert len(read_topic(sdk_stack.clusters["dc-b"], placed, 10)) == 10
        assert read_topic(sdk_stack.clusters["dc-a"], placed, 1, timeout=3) == []
        assert len(read_topic(sdk_stack.clusters["dc-a"], routed, 10)) == 10
        assert len(read_topic(sdk_stack.clusters["dc-a"], plain, 10)) == 10
        # the lookup itself: only for topics the app's ACL covers
        import requests

        def lookup(topic: str) -> requests.Response:
            return requests.get(f"{sdk_stack.metaserver}/v1/placements/{topic}", timeout=10,
                                headers={"Authorization": f"Bearer {token}"})

        assert lookup(placed).json() == {"topic": placed, "cluster": alias}
        assert lookup(plain).status_code == 404
        assert lookup("someone-elses.topic").status_code == 403
    finally:
        for topic in (placed, routed):
            sdk_stack.admin("DELETE", f"/v1/admin/placements/{topic}")
        sdk_stack.admin("DELETE", f"/v1/admin/clusters/{alias}")


def test_a_config_center_that_hangs_does_not_hold_every_grant(
        ms_factory: Callable[..., MetaServer], tmp_path: Path) -> None:
    """Routes unknown: the grant lists every cluster (as before narrowing), and only one grant in five
    seconds waits (at most 3 s) to read them; the others go on without."""
    with socket.socket() as hole:  # accepts connections (the backlog) and never answers
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        url = f"http://127.0.0.1:{hole.getsockname()[1]}"
        ms = ms_factory(configcenter=False, configcenter_url=url, configcenter_openapi_token="t",
                        auth_switch_ttl=3600)
        ms.admin().set_cluster("one", "127.0.0.1:19201")
        ms.admin().set_cluster("two", "127.0.0.1:19202", security=SASL)
        app = new_app(ms, acl={"produce": ["orders.*"], "consume": [], "group": []}, default_cluster="one")
        client = grant_client(ms, app.app_id, app.secret, tmp_path)
        try:
            started = time.monotonic()
            grants = [client.authenticate() for _ in range(5)]
            took = time.monotonic() - started
        finally:
            client.close()
    assert all(sorted(g.clusters) == ["one", "two"] for g in grants)  # fail-open: every cluster, as before
    assert took < 9, f"five grants took {took:.1f} s: each waited for the config center"
