"""MetaServer over real HTTP, on SQLite and on PostgreSQL: grants, renewals, reports, admin API, audit."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

import requests  # noqa: E402

from tests.ms_fixtures import ADMIN_TOKEN, App, MetaServer, inside_one_fail_window, new_app, wait_until  # noqa: E402
from ykafka import acl as acl_patterns  # noqa: E402
from ykafka import signing  # noqa: E402
from ykafka.admin.client import AdminError  # noqa: E402

GRANT_KEYS = {"app_id", "token", "expires_at", "renew_interval_s", "acl", "clusters", "default_cluster",
              "configcenter", "issuer", "placements"}
DENIED = {"detail": "authentication failed"}


@pytest.fixture(scope="module")
def registry(ms: MetaServer) -> MetaServer:
    admin = ms.admin()
    admin.set_cluster("dc-a", "127.0.0.1:19001", dc="a", standby="dc-b")
    admin.set_cluster("dc-b", "127.0.0.1:19002", dc="b", standby="dc-a", status="draining",
                      security={"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-256"})
    return ms


@pytest.fixture()
def app(registry: MetaServer) -> App:
    return new_app(registry)


def test_health_and_openapi(ms: MetaServer) -> None:
    assert requests.get(ms.url + "/health", timeout=5).json() == {"status": "ok"}
    schema = requests.get(ms.url + "/openapi.json", timeout=5).json()
    for path in ("/v1/auth/grant", "/v1/auth/renew", "/v1/clients/report", "/v1/admin/apps", "/v1/admin/config",
                 "/v1/admin/config/rollback", "/v1/admin/audit"):
        assert path in schema["paths"], path
    assert "GrantRequest" in schema["components"]["schemas"]


def test_grant_has_exact_shape(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    before = time.time()
    response = sdk.grant("client-1")
    assert response.status_code == 200, response.text
    grant = response.json()
    assert set(grant) == GRANT_KEYS
    assert grant["app_id"] == app.app_id
    assert grant["renew_interval_s"] == 1
    assert before + 590 <= grant["expires_at"] <= time.time() + 601
    assert grant["acl"] == {"produce": ["orders.*"], "consume": ["orders.*"], "group": ["billing-*"]}
    assert grant["clusters"]["dc-a"] == {"name": "dc-a", "bootstrap_servers": "127.0.0.1:19001", "dc": "a",
                                         "standby": "dc-b", "status": "active", "security": None}
    assert grant["clusters"]["dc-b"]["status"] == "draining"
    sasl = grant["clusters"]["dc-b"]["sasl"]  # the app's own principal, issued at its first grant
    assert {k: v for k, v in sasl.items() if k != "password"} == {
        "mechanism": "SCRAM-SHA-256", "username": f"app.{app.app_id}@dc-b.g1", "security_protocol": "SASL_PLAINTEXT",
        "ca_pem": None}
    again = sdk.grant("client-2").json()["clusters"]["dc-b"]["sasl"]
    assert again == sasl  # the same principal for every client of the app
    other = new_app(registry)
    theirs = registry.sdk(other.app_id, other.secret).grant("c").json()["clusters"]["dc-b"]["sasl"]
    assert theirs["username"] != sasl["username"] and theirs["password"] != sasl["password"]
    assert grant["default_cluster"] == "dc-a"  # first active by name (dc-b is draining)
    assert grant["configcenter"] == {"url": registry.configcenter_url, "app_id": registry.apollo_app_id,
                                     "cluster": "default", "namespace_prefix": "ykafka", "access_key_secret": None}
    assert grant["token"].startswith("v1.")


def test_app_default_cluster_wins(registry: MetaServer) -> None:
    app = new_app(registry, default_cluster="dc-b")
    assert registry.sdk(app.app_id, app.secret).grant().json()["default_cluster"] == "dc-b"
    with pytest.raises(AdminError) as err:
        new_app(registry, default_cluster="nowhere")
    assert err.value.status == 422 and "nowhere" in err.value.message


def test_replayed_signature_rejected(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    raw, headers = sdk.grant_request()
    first = sdk.post_grant(raw, headers)
    second = sdk.post_grant(raw, headers)
    assert first.status_code == 200
    assert second.status_code == 401 and second.json() == DENIED


def test_stale_and_future_timestamps_rejected(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    now_ms = int(time.time() * 1000)
    stale = sdk.grant(timestamp_ms=now_ms - 301_000)
    future = sdk.grant(timestamp_ms=now_ms + 301_000)
    slightly_off = sdk.grant(timestamp_ms=now_ms - 200_000)
    assert (stale.status_code, stale.json()) == (401, DENIED)
    assert (future.status_code, future.json()) == (401, DENIED)
    assert slightly_off.status_code == 200


def test_wrong_secret_unknown_app_and_tampering_rejected(registry: MetaServer, app: App) -> None:
    wrong = registry.sdk(app.app_id, "not-the-secret").grant()
    unknown = registry.sdk("no-such-app", app.secret).grant()
    sdk = registry.sdk(app.app_id, app.secret)
    raw, headers = sdk.grant_request()
    tampered = sdk.post_grant(raw.replace(b'"c1"', b'"c2"'), headers)
    other_app_body = sdk.grant(body={"app_id": "someone-else", "client_id": "c1", "ip": sdk.ip})
    raw2, headers2 = sdk.grant_request()
    del headers2[signing.HEADER_SIGNATURE]
    unsigned = sdk.post_grant(raw2, headers2)
    for response in (wrong, unknown, tampered, other_app_body, unsigned):
        assert (response.status_code, response.json()) == (401, DENIED)


def test_failed_auth_rate_limited_per_app_and_per_ip(registry: MetaServer) -> None:
    inside_one_fail_window()
    victim = new_app(registry)
    attacker = registry.sdk(victim.app_id, "guess", ip="198.51.100.10")
    codes = [attacker.grant().status_code for _ in range(5)]
    assert codes == [401] * 5
    limited = attacker.grant()  # the guesser throttled itself ...
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    # ... not the app: the right secret from the app's own host still gets its grant
    assert registry.sdk(victim.app_id, victim.secret).grant().status_code == 200
    # the source IP is locked, whatever app it names
    other = new_app(registry)
    from_same_ip = registry.sdk(other.app_id, other.secret, ip="198.51.100.10").grant()
    assert from_same_ip.status_code == 429
    assert registry.sdk(other.app_id, other.secret).grant().status_code == 200


def test_renew_gives_fresh_grant_with_current_acl(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    grant = sdk.grant("renewer").json()
    registry.admin().set_acl(app.app_id, produce=["payments"], consume=[], group=[])
    time.sleep(0.01)
    renewed = sdk.renew(grant["token"])
    assert renewed.status_code == 200, renewed.text
    fresh = renewed.json()
    assert set(fresh) == GRANT_KEYS
    assert fresh["token"] != grant["token"] and fresh["expires_at"] > grant["expires_at"]
    assert fresh["acl"] == {"produce": ["payments"], "consume": [], "group": []}
    assert sdk.renew(fresh["token"]).status_code == 200  # the new token renews too
    bad = sdk.renew(grant["token"][:-3] + "AAA")
    assert (bad.status_code, bad.json()) == (401, DENIED)
    missing = sdk.session.post(registry.url + "/v1/auth/renew", timeout=5)
    assert (missing.status_code, missing.json()) == (401, DENIED)


def test_rotate_secret_ends_old_secret_and_tokens(registry: MetaServer, app: App) -> None:
    old = registry.sdk(app.app_id, app.secret)
    token = old.grant().json()["token"]
    new_secret = registry.admin().rotate_secret(app.app_id)["secret"]
    assert new_secret != app.secret
    assert old.grant().status_code == 401
    assert old.renew(token).status_code == 401
    assert registry.sdk(app.app_id, new_secret).grant().status_code == 200


def test_acl_wildcards_in_grant(registry: MetaServer) -> None:
    app = new_app(registry, acl={"produce": ["orders.*", "audit"], "consume": ["*"], "group": ["billing-*"]})
    acl = registry.sdk(app.app_id, app.secret).grant().json()["acl"]
    assert acl_patterns.check(acl, "produce", "orders.eu")
    assert acl_patterns.check(acl, "produce", "audit")
    assert not acl_patterns.check(acl, "produce", "audit.x")
    assert not acl_patterns.check(acl, "produce", "payments")
    assert acl_patterns.check(acl, "consume", "anything")
    assert acl_patterns.check(acl, "group", "billing-eu") and not acl_patterns.check(acl, "group", "ops")
    with pytest.raises(AdminError) as err:
        registry.admin().set_acl(app.app_id, produce=["or*ders"])
    # refused when saved, with the reason (Kafka's ACLs could not enforce it), not the input back
    assert err.value.status == 422 and "pattern 1: '*' may only end a prefix" in str(err.value)
    assert "Kafka ACLs match only a literal name, a prefix" in str(err.value) and "or*ders" not in str(err.value)


def test_client_reports_realtime_and_history(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    token = sdk.grant("c1").json()["token"]
    assert sdk.report(token).status_code == 204
    assert sdk.report(token, state="degraded", errors=["dc-a unreachable"]).status_code == 204
    assert sdk.report(token, client_id="c2", role="consumer", group="billing-eu", topics=["orders.us"],
                      versions={"ykafka": "0.1.0", "confluent_kafka": "1.9.2", "librdkafka": "1.9.2"}
                      ).status_code == 204
    admin = registry.admin()
    current = {c["client_id"]: c for c in admin.clients(app=app.app_id)}
    assert set(current) == {"c1", "c2"}
    assert current["c1"]["state"] == "degraded" and current["c1"]["errors"] == ["dc-a unreachable"]
    assert current["c1"]["online"] is True and current["c1"]["hostname"] == "host-1"
    assert current["c1"]["config_release_keys"] == {"ykafka.global": "rk-1"}
    assert [c["client_id"] for c in admin.clients(app=app.app_id, librdkafka="1.*")] == ["c2"]
    assert [c["client_id"] for c in admin.clients(app=app.app_id, librdkafka="2.4.0")] == ["c1"]
    assert [c["client_id"] for c in admin.clients(app=app.app_id, group="billing-eu")] == ["c2"]
    assert {c["client_id"] for c in admin.clients(app=app.app_id, cluster="dc-a")} == {"c1", "c2"}
    history = admin.client_history(app=app.app_id)
    assert [(h["client_id"], h["state"]) for h in history] == [("c2", "running"), ("c1", "degraded"),
                                                              ("c1", "running")]
    # online while seen within 3 heartbeats (renew interval 1 s in these servers)
    # (c2 reported last, so it is the last to go offline: wait for both, not for the first)
    wait_until(lambda: len(admin.clients(app=app.app_id, online=False)) == 2, timeout=8)
    assert admin.clients(app=app.app_id, online=True) == []


def test_client_report_auth(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    token = sdk.grant().json()["token"]
    assert sdk.report("v1.bad.token").status_code == 401
    mismatch = sdk.report(token, app_id="other-app")
    assert mismatch.status_code == 403
    wrong_type = sdk.report(token, pid="not-a-number")
    assert wrong_type.status_code == 422
    assert any(err["loc"] == ["body", "pid"] for err in wrong_type.json()["detail"])
    unknown = sdk.report(token, surprise=1)
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["type"] == "extra_forbidden"


def test_bad_grant_input_is_422_with_field_errors(registry: MetaServer, app: App) -> None:
    sdk = registry.sdk(app.app_id, app.secret)
    not_json = sdk.session.post(registry.url + "/v1/auth/grant", data=b"{nope",
                                headers={"Content-Type": "application/json"}, timeout=5)
    assert not_json.status_code == 422 and not_json.json()["detail"][0]["type"] == "json_invalid"
    extra = sdk.grant(body={"app_id": app.app_id, "client_id": "c", "ip": "1", "admin": True})
    assert extra.status_code == 422 and extra.json()["detail"][0]["loc"] == ["body", "admin"]
    wrong = sdk.grant(body={"app_id": app.app_id, "client_id": 5, "ip": "1"})
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "client_id"]
    # SQL-looking input is just data
    injected = registry.sdk("x' OR '1'='1", "s").grant()
    assert injected.status_code == 401


def test_admin_requires_token_and_audits_every_change(registry: MetaServer) -> None:
    assert requests.get(registry.url + "/v1/admin/apps", timeout=5).status_code == 401
    wrong = requests.get(registry.url + "/v1/admin/apps", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert (wrong.status_code, wrong.json()) == (401, DENIED)
    alice = registry.admin(operator="alice")
    app_id = f"audited-{uuid.uuid4().hex[:6]}"
    created = alice.create_app(app_id, description="first")
    alice.set_acl(app_id, produce=["t1"])
    alice.update_app(app_id, description="second")
    alice.rotate_secret(app_id)
    registry.admin().delete_app(app_id)  # no operator header: the token's name
    rows = alice.audit(target=f"app:{app_id}")
    assert [(r["operator"], r["action"]) for r in rows] == [
        ("ops", "app.delete"), ("alice", "app.rotate_secret"), ("alice", "app.update"), ("alice", "acl.set"),
        ("alice", "app.create")]
    acl_row = rows[3]
    assert acl_row["before"] == {"produce": [], "consume": [], "group": []}
    assert acl_row["after"] == {"produce": ["t1"], "consume": [], "group": []}
    assert rows[2]["before"]["description"] == "first" and rows[2]["after"]["description"] == "second"
    dump = str(rows)
    assert created["secret"] not in dump and "signing_key" not in dump
    assert all(r["at"] > time.time() - 60 for r in rows)


def test_apps_crud(registry: MetaServer) -> None:
    admin = registry.admin()
    app = new_app(registry)
    assert app.app_id in {a["app_id"] for a in admin.list_apps()}
    assert admin.get_app(app.app_id)["enabled"] is True
    with pytest.raises(AdminError) as dup:
        admin.create_app(app.app_id)
    assert dup.value.status == 409
    with pytest.raises(AdminError) as bad_id:
        admin.create_app("bad id!")
    assert bad_id.value.status == 422 and "app_id" in bad_id.value.errors
    admin.update_app(app.app_id, enabled=False)
    assert registry.sdk(app.app_id, app.secret).grant().status_code == 401
    admin.update_app(app.app_id, enabled=True)
    assert registry.sdk(app.app_id, app.secret).grant().status_code == 200
    admin.delete_app(app.app_id)
    with pytest.raises(AdminError) as gone:
        admin.get_app(app.app_id)
    assert gone.value.status == 404
    raw = requests.post(registry.url + "/v1/admin/apps", json={"app_id": "x1", "colour": "red"},
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=5)
    assert raw.status_code == 422 and raw.json()["detail"][0]["loc"] == ["body", "colour"]


def test_clusters_crud_holds_no_shared_secret(registry: MetaServer, app: App) -> None:
    admin = registry.admin()
    name = f"c-{uuid.uuid4().hex[:6]}"
    security = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "ca_pem": "-----BEGIN CERTIFICATE-----"}
    saved = admin.set_cluster(name, "127.0.0.1:19099", dc="z", security=security)
    assert saved["security"] == security and "sasl" not in saved
    assert admin.get_cluster(name)["security"] == security
    assert {c["name"] for c in admin.list_clusters()} >= {"dc-a", "dc-b", name}
    grant = registry.sdk(app.app_id, app.secret).grant().json()
    assert grant["clusters"][name]["sasl"]["username"] == f"app.{app.app_id}@{name}.g1"
    assert grant["clusters"][name]["sasl"]["ca_pem"] == security["ca_pem"]
    with pytest.raises(AdminError) as shared:  # the registry takes no shared user and password any more
        registry.admin()._call("PUT", f"/v1/admin/clusters/{name}", json={
            "bootstrap_servers": "x:1", "sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}})
    assert shared.value.status == 422
    with pytest.raises(AdminError) as no_ca:
        admin.set_cluster(name, "x:1", security={"protocol": "SASL_SSL"})
    assert no_ca.value.status == 422 and "ca_pem" in str(no_ca.value)
    admin.set_cluster(name, "127.0.0.1:19100", dc="z", status="down")
    assert admin.get_cluster(name)["status"] == "down" and admin.get_cluster(name)["security"] is None
    with pytest.raises(AdminError) as in_use:
        admin.delete_cluster("dc-b")  # dc-a's standby
    assert in_use.value.status == 409
    with pytest.raises(AdminError) as bad_status:
        admin.set_cluster(name, "x:1", status="broken")
    assert bad_status.value.status == 422
    admin.delete_cluster(name)
    assert name not in registry.sdk(app.app_id, app.secret).grant().json()["clusters"]
    assert "secret-pw" not in str(admin.audit(target=f"cluster:{name}"))


def _unsigned_grant(registry: MetaServer, app: App) -> requests.Response:
    """A grant request carrying no signature at all, as an outsider without the app's secret would send it."""
    body = {"app_id": app.app_id, "client_id": "intruder", "ip": "127.0.0.1"}
    return requests.post(registry.url + "/v1/auth/grant", json=body, timeout=10)


def test_the_open_api_token_cannot_turn_auth_off(registry: MetaServer, app: App) -> None:
    """Issue 37 (hole 6): with the config service's Open API token an attacker released ``auth.enabled=false`` into
    ``ykafka.global``, after which an unsigned grant returned another app's broker password. Now the config service
    refuses the key in any ykafka namespace (403 naming the rule, never the value), the MetaServer never reads it
    from there, and only ``PUT /v1/admin/security`` (admin token, audited) turns it off."""
    from tests.ms_fixtures import OPENAPI_TOKEN

    admin = registry.admin()
    assert registry.configcenter_url is not None
    admin.push_config("global", {"trace.enabled": "false"})  # the namespace exists, as on any running stack
    items = (f"{registry.configcenter_url}/openapi/v1/envs/DEV/apps/{registry.apollo_app_id}/clusters/default"
             f"/namespaces/ykafka.global/items")
    body = {"key": "auth.enabled", "value": "false", "dataChangeLastModifiedBy": "mallory",
            "dataChangeCreatedBy": "mallory"}
    token = {"Authorization": OPENAPI_TOKEN}
    attempts = [requests.put(items + "/auth.enabled", params={"createIfNotExists": "true"}, json=body, headers=token,
                             timeout=10),
                requests.post(items, json=body, headers=token, timeout=10),
                requests.put(items + "/AUTH.ENABLED", params={"createIfNotExists": "true"},
                             json={**body, "key": "AUTH.ENABLED"}, headers=token, timeout=10)]
    for refused in attempts:
        assert refused.status_code == 403, refused.text
        assert "auth.enabled is a security switch" in refused.json()["message"]
        assert "false" not in refused.json()["message"] and "mallory" not in refused.text
    released = requests.post(items.removesuffix("/items") + "/releases", headers=token, timeout=10,
                             json={"releaseTitle": "off", "releaseComment": "", "releasedBy": "mallory"})
    assert released.status_code == 200, released.text
    served = requests.get(f"{registry.configcenter_url}/configs/{registry.apollo_app_id}/default/ykafka.global",
                          timeout=10).json()["configurations"]
    assert served == {"trace.enabled": "false"}
    assert _unsigned_grant(registry, app).status_code == 401
    assert registry.sdk(app.app_id, "wrong-secret").grant().json() == DENIED
    with pytest.raises(AdminError) as via_hot_config:  # nor through the admin's hot-config push
        admin.push_config("global", {"auth.enabled": "false"})
    assert via_hot_config.value.status == 422 and "security switch" in via_hot_config.value.errors["auth.enabled"]
    bad = requests.put(registry.url + "/v1/admin/security", json={"auth.enabled": "nope-4711"},
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    assert bad.status_code == 422 and "nope-4711" not in bad.text
    assert admin.security() == {"auth.enabled": True}

    # the admin API is the one way, and it is audited
    try:
        assert admin.set_security(auth_enabled=False) == {"auth.enabled": False}
        granted = _unsigned_grant(registry, app)
        assert granted.status_code == 200, granted.text
        assert granted.json()["acl"] == {"produce": ["orders.*"], "consume": ["orders.*"], "group": ["billing-*"]}
        assert registry.sdk("no-such-app", "x").grant().status_code == 401  # still needs a known app
    finally:
        admin.set_security(auth_enabled=True)
    assert (_unsigned_grant(registry, app).status_code, registry.sdk(app.app_id, app.secret).grant().status_code) \
        == (401, 200)
    trail = admin.audit(action="security.set", target="security", limit=2)
    assert [(row["before"], row["after"]) for row in trail] == [
        ({"auth.enabled": False}, {"auth.enabled": True}), ({"auth.enabled": True}, {"auth.enabled": False})]
    assert "auth disabled: grant issued without checking the signature" in registry.proc.log.read_text()


def test_short_token_ttl_expires(ms_factory: Any) -> None:
    server = ms_factory(token_ttl=1, configcenter=False)
    server.admin().set_cluster("dc-a", "127.0.0.1:1")
    app = new_app(server)
    sdk = server.sdk(app.app_id, app.secret)
    grant = sdk.grant().json()
    assert grant["configcenter"]["url"] is None
    assert sdk.renew(grant["token"]).status_code == 200
    time.sleep(1.2)
    assert sdk.renew(grant["token"]).status_code == 401
