"""Access-key signatures on config-service calls (Apollo's ClientAuthenticationFilter), over real HTTP."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

import requests

from metaserver.configcenter.signature import build_headers

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


NS = "ykafka.global"


def guarded_app(cc: ConfigService, api: OpenApi) -> tuple[str, str]:
    """An app with a released namespace and an access key, once the server enforces the key."""
    app = api.new_app_id()
    api.setup(app, NS, {"producer.acks": "all"})
    secret = cc.cli("accesskey", "add", "--app-id", app)
    assert len(secret) == 32
    deadline = time.monotonic() + 5
    while requests.get(f"{cc.url}/configs/{app}/default/{NS}", timeout=5).status_code != 401:
        assert time.monotonic() < deadline, "access key never enforced"
        time.sleep(0.1)
    return app, secret


def test_signed_requests_pass_on_every_config_endpoint(cc: ConfigService, api: OpenApi) -> None:
    app, secret = guarded_app(cc, api)
    for path in (f"/configs/{app}/default/{NS}?ip=10.0.0.1", f"/configfiles/json/{app}/default/{NS}",
                 f"/configfiles/{app}/default/{NS}"):
        resp = requests.get(cc.url + path, headers=build_headers(app, path, secret), timeout=5)
        assert resp.status_code == 200, path
    configs = requests.get(f"{cc.url}/configs/{app}/default/{NS}",
                           headers=build_headers(app, f"/configs/{app}/default/{NS}", secret), timeout=5)
    assert configs.json()["configurations"] == {"producer.acks": "all"}
    query = urlencode({"appId": app, "cluster": "default",
                       "notifications": json.dumps([{"namespaceName": NS, "notificationId": -1}])}, quote_via=quote)
    path = "/notifications/v2?" + query
    resp = requests.get(cc.url + path, headers=build_headers(app, path, secret), timeout=5)
    assert resp.status_code == 200
    assert resp.json()[0]["namespaceName"] == NS


def test_missing_wrong_and_stale_signatures_are_401(cc: ConfigService, api: OpenApi) -> None:
    app, secret = guarded_app(cc, api)
    path = f"/configs/{app}/default/{NS}"
    missing = requests.get(cc.url + path, timeout=5)
    assert missing.status_code == 401
    assert missing.json()["message"] == "RequestTimeTooSkewed"
    no_auth_header = requests.get(cc.url + path, headers={"Timestamp": str(int(time.time() * 1000))}, timeout=5)
    assert no_auth_header.status_code == 401
    assert no_auth_header.json()["message"] == "Unauthorized"
    wrong = requests.get(cc.url + path, headers=build_headers(app, path, "0" * 32), timeout=5)
    assert wrong.status_code == 401
    assert wrong.json()["message"] == "Unauthorized"
    other_path = requests.get(cc.url + path, headers=build_headers(app, path + "?ip=1.1.1.1", secret), timeout=5)
    assert other_path.status_code == 401
    now = int(time.time() * 1000)
    stale = requests.get(cc.url + path, headers=build_headers(app, path, secret, now_ms=now - 61_000), timeout=5)
    assert stale.status_code == 401
    assert stale.json()["message"] == "RequestTimeTooSkewed"
    future = requests.get(cc.url + path, headers=build_headers(app, path, secret, now_ms=now + 61_000), timeout=5)
    assert future.status_code == 401
    slightly_old = requests.get(cc.url + path, headers=build_headers(app, path, secret, now_ms=now - 30_000),
                                timeout=5)
    assert slightly_old.status_code == 200
    notifications = requests.get(cc.url + "/notifications/v2", params={
        "appId": app, "cluster": "default", "notifications": json.dumps([{"namespaceName": NS,
                                                                          "notificationId": -1}])}, timeout=5)
    assert notifications.status_code == 401


def test_apps_without_access_keys_need_no_signature(cc: ConfigService, api: OpenApi) -> None:
    guarded_app(cc, api)
    open_app = api.new_app_id()
    api.setup(open_app, NS, {"k": "v"})
    assert requests.get(f"{cc.url}/configs/{open_app}/default/{NS}", timeout=5).status_code == 200


def test_invalid_app_id_in_a_config_path_is_400(cc: ConfigService) -> None:
    resp = requests.get(f"{cc.url}/configs/bad!app/default/{NS}", timeout=5)
    assert resp.status_code == 400
    assert resp.json()["message"] == "InvalidAppId"


def test_access_keys_through_the_open_api(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"k": "v"})
    base = f"/apps/{app}/envs/DEV/accesskeys"
    created = api.ok(api.call("POST", base, operator="ops"))
    assert (created["appId"], created["enabled"], created["mode"]) == (app, False, 0)
    assert len(created["secret"]) == 32
    path = f"/configs/{app}/default/{NS}"
    assert requests.get(cc.url + path, timeout=5).status_code == 200  # created disabled, as Apollo

    # observer mode: bad signatures are only logged
    api.ok(api.call("PUT", f"{base}/{created['id']}/activation", mode="1", operator="ops"))
    assert requests.get(cc.url + path, timeout=5).status_code == 200
    # filter mode: enforced at once
    api.ok(api.call("PUT", f"{base}/{created['id']}/activation", operator="ops"))
    assert requests.get(cc.url + path, timeout=5).status_code == 401
    signed = requests.get(cc.url + path, headers=build_headers(app, path, created["secret"]), timeout=5)
    assert signed.status_code == 200
    listed = api.ok(api.call("GET", base))
    assert [(k["id"], k["enabled"]) for k in listed] == [(created["id"], True)]

    refused = api.call("DELETE", f"{base}/{created['id']}", operator="ops")
    assert refused.status_code == 400
    assert refused.json()["message"] == "AccessKey should disable first"
    api.ok(api.call("PUT", f"{base}/{created['id']}/deactivation", operator="ops"))
    assert requests.get(cc.url + path, timeout=5).status_code == 200
    assert api.call("DELETE", f"{base}/{created['id']}", operator="ops").status_code == 200
    assert api.ok(api.call("GET", base)) == []
    for _ in range(5):
        api.ok(api.call("POST", base, operator="ops"))
    over = api.call("POST", base, operator="ops")
    assert over.status_code == 400
    assert over.json()["message"] == "AccessKeys count limit exceeded"
