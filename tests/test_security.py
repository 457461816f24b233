"""Regression tests for the holes an outsider's probe found (issue: security and bad-input hardening), each
against the real MetaServer / config service over HTTP: no 500, no input echoed back, no bypass."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import requests

from tests.cc_fixtures import OpenApi
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, fake_ip, inside_one_fail_window, new_app
from tests.support import ConfigService
from tests.test_configcenter_accesskeys import NS, build_headers, guarded_app
from ykafka import signing

LIMIT = 5  # the test MetaServers' --auth-fail-limit


@pytest.fixture(scope="module")
def registry(ms: MetaServer) -> MetaServer:
    admin = ms.admin()
    admin.set_cluster("dc-a", "127.0.0.1:19001", dc="a", standby="dc-b")
    admin.set_cluster("dc-b", "127.0.0.1:19002", dc="b", standby="dc-a")
    return ms


def _admin(ms: MetaServer, method: str, path: str, ip: str | None = None, token: str = ADMIN_TOKEN,
           **kwargs: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": ip or fake_ip()}
    return requests.request(method, ms.url + path, headers=headers, timeout=15, **kwargs)


# --- 1. oversized signature timestamp ----------------------------------------------------------------

def test_a_400_digit_timestamp_is_401_and_counts_as_a_failure(registry: MetaServer) -> None:
    inside_one_fail_window()
    app = new_app(registry)
    sdk = registry.sdk(app.app_id, app.secret)
    for _ in range(LIMIT):
        raw, headers = sdk.grant_request()
        headers[signing.HEADER_TIMESTAMP] = "9" * 400
        resp = sdk.post_grant(raw, headers)
        assert resp.status_code == 401, resp.text
        assert resp.json() == {"detail": "authentication failed"}
    assert sdk.grant().status_code == 429  # the bad ones were counted: this source is now throttled


# --- 2. ``since`` overflow ---------------------------------------------------------------------------

@pytest.mark.parametrize("since", ["1e9d", "1e400d", "inf", "nan", "-5m", "0s", "99999999999999999999w", "x"])
@pytest.mark.parametrize("path", ["/v1/admin/alerts", "/v1/admin/aggregates"])
def test_since_out_of_range_is_422_with_the_accepted_format(registry: MetaServer, path: str, since: str) -> None:
    resp = _admin(registry, "GET", path, params={"since": since})
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"] == ("since: use a positive duration of at most 366d, a number with s, m, h, d "
                                     "or w, e.g. 90s, 15m, 1h, 2d")  # the same text whatever came in


# --- 3. deeply nested notifications ------------------------------------------------------------------

def test_deeply_nested_notifications_are_400_without_internal_text(cc: ConfigService) -> None:
    nested = "[" * 5000 + "]" * 5000  # past the JSON parser's recursion limit
    resp = requests.get(cc.url + "/notifications/v2",
                        params={"appId": "someapp", "cluster": "default", "notifications": nested}, timeout=10)
    assert resp.status_code == 400, resp.text[:300]
    body = resp.json()
    assert body["message"].startswith("invalid notifications format")
    assert "Recursion" not in resp.text and "[[[" not in resp.text


# --- 4. repeated appId on notifications/v2 (access-key bypass) ----------------------------------------

def test_a_repeated_app_id_cannot_bypass_the_access_key(cc: ConfigService, api: OpenApi) -> None:
    app, _secret = guarded_app(cc, api)
    notifications = json.dumps([{"namespaceName": NS, "notificationId": -1}])
    query = urlencode([("appId", "other"), ("appId", app), ("cluster", "default"), ("notifications", notifications)],
                      quote_via=quote)
    path = "/notifications/v2?" + query
    # signed for "other" (no access key): the old middleware checked the first appId, the handler read the last
    resp = requests.get(cc.url + path, timeout=5)
    assert resp.status_code == 400, resp.text
    assert "appId" in resp.json()["message"] and app not in resp.text
    for name in ("cluster", "notifications"):
        pairs = [("appId", app), ("cluster", "default"), ("notifications", notifications), (name, "x")]
        again = requests.get(cc.url + "/notifications/v2?" + urlencode(pairs, quote_via=quote), timeout=5)
        assert again.status_code == 400 and name in again.json()["message"]
    signed_ok = "/notifications/v2?" + urlencode({"appId": app, "cluster": "default", "notifications": notifications},
                                                 quote_via=quote)
    signed = requests.get(cc.url + signed_ok, headers=build_headers(app, signed_ok, _secret), timeout=5)
    assert signed.status_code == 200


def test_repeated_single_valued_parameters_are_400_on_the_metaserver_too(registry: MetaServer) -> None:
    resp = _admin(registry, "GET", "/v1/admin/clients?app=a&app=b")
    assert resp.status_code == 400 and "'app'" in resp.json()["detail"]
    ok = _admin(registry, "GET", "/v1/admin/alerts?level=WARN&level=ERR")  # a list parameter stays repeatable
    assert ok.status_code == 200


# --- 5. route.cluster naming an unregistered cluster ------------------------------------------------

def test_route_values_naming_unregistered_clusters_are_refused_before_the_config_center(registry: MetaServer) -> None:
    for key in ("route.cluster", "route.standby"):
        resp = _admin(registry, "POST", "/v1/admin/config",
                      json={"scope": "topic:orders.sec", "set": {key: "nowhere"}})
        assert resp.status_code == 422, resp.text
        assert resp.json()["errors"] == {key: "unknown cluster 'nowhere'; registered: dc-a, dc-b"}
    current = _admin(registry, "GET", "/v1/admin/config", params={"scope": "topic:orders.sec"})
    assert current.status_code == 200 and "nowhere" not in current.text  # nothing was written
    ok = _admin(registry, "POST", "/v1/admin/config", json={"scope": "topic:orders.sec",
                                                            "set": {"route.cluster": "dc-b"}, "dry_run": True})
    assert ok.status_code == 200, ok.text


# --- 6. request-size limit -------------------------------------------------------------------------

def test_an_oversized_body_is_413_before_parsing_and_never_echoed(registry: MetaServer) -> None:
    big = b'{"app_id": "' + b"A" * (3 * 1024 * 1024) + b'", "client_id": "c"}'
    resp = requests.post(registry.url + "/v1/auth/grant", data=big, timeout=30,
                         headers={"Content-Type": "application/json", "X-Forwarded-For": fake_ip()})
    assert resp.status_code == 413 and len(resp.content) < 200 and "AAAA" not in resp.text

    def chunks() -> Any:  # no Content-Length: refused once the stream passes the limit
        for _ in range(48):
            yield b"B" * 65536

    streamed = requests.post(registry.url + "/v1/auth/grant", data=chunks(), timeout=30,
                             headers={"Content-Type": "application/json", "X-Forwarded-For": fake_ip()})
    assert streamed.status_code == 413 and "BBBB" not in streamed.text


def test_validation_errors_never_echo_the_input(registry: MetaServer) -> None:
    marker = "<script>alert(1)</script>" * 10
    resp = requests.post(registry.url + "/v1/auth/grant", json={"app_id": 42, "client_id": marker, "extra": marker},
                         headers={"X-Forwarded-For": fake_ip()}, timeout=10)
    assert resp.status_code == 422
    assert "<script>" not in resp.text and resp.json()["detail"][0].keys() == {"loc", "msg", "type"}


# --- 7. shutdown answers parked polls at once --------------------------------------------------------

def test_stopping_the_config_service_answers_parked_polls_with_304_within_a_second(tmp_path: Path) -> None:
    server = ConfigService(tmp_path / "cc.db", longpoll_timeout=60).start()
    try:
        api = OpenApi(server.url)
        app = api.new_app_id()
        api.setup(app, NS, {"a": "1"})
        release_id = requests.get(server.url + "/notifications/v2", timeout=5, params={
            "appId": app, "cluster": "default",
            "notifications": json.dumps([{"namespaceName": NS, "notificationId": -1}])}).json()[0]["notificationId"]
        parked = [server.park(app, [{"namespaceName": NS, "notificationId": release_id}], wait=False)
                  for _ in range(5)]
        deadline = time.monotonic() + 5
        while requests.get(server.url + "/stats", timeout=5).json()["longPolls"] < 5:
            assert time.monotonic() < deadline, "polls never parked"
            time.sleep(0.02)
        assert server.proc is not None
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        answers = [p.join(5) for p in parked]
        answered_in = time.monotonic() - started
        server.proc.wait(5)
        exited_in = time.monotonic() - started
        assert [a.status_code for a in answers] == [304] * 5
        assert answered_in <= 1.0 and exited_in <= 2.0, (answered_in, exited_in)
    finally:
        server.stop()


# --- 8. names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [".", "..", ".hidden", "a b", "x" * 129, "emoji-\u2603", "a/b"])
def test_illegal_app_and_cluster_names_are_refused_with_the_rule(registry: MetaServer, name: str) -> None:
    resp = _admin(registry, "POST", "/v1/admin/apps", json={"app_id": name})
    assert resp.status_code == 422, resp.text
    msg = resp.json()["detail"][0]["msg"]
    assert msg.endswith("1-128 characters of letters, digits, '.', '_', '-', not starting with '.'"), msg
    cluster = _admin(registry, "PUT", f"/v1/admin/clusters/{quote(name, safe='')}",
                     json={"bootstrap_servers": "127.0.0.1:1", "dc": "a"})
    assert cluster.status_code in (404, 405, 422), cluster.text  # '/' never reaches the route


# --- lockout by others, admin-token guessing ----------------------------------------------------------

def test_bad_signatures_from_another_host_do_not_lock_the_app_out(registry: MetaServer) -> None:
    inside_one_fail_window()
    app = new_app(registry)
    attacker = registry.sdk(app.app_id, "wrong-secret-" + "x" * 20, ip=fake_ip())
    for _ in range(LIMIT + 3):
        assert attacker.grant().status_code in (401, 429)
    assert attacker.grant().status_code == 429  # the guesser throttled itself
    real = registry.sdk(app.app_id, app.secret, ip=fake_ip())
    assert real.grant().status_code == 200


def test_knocking_without_a_token_locks_nobody_out(registry: MetaServer) -> None:
    """A sweep of the admin API with no credential (what a crawler or an attacker's port scan sends) is refused
    and not counted: before, LIMIT knocks from a shared address locked the operators' own token out of it."""
    inside_one_fail_window()
    shared = fake_ip()
    for _ in range(LIMIT + 3):
        answer = requests.get(registry.url + "/v1/admin/apps", timeout=10, headers={"X-Forwarded-For": shared})
        assert answer.status_code == 401, answer.status_code
    assert _admin(registry, "GET", "/v1/admin/apps", ip=shared).status_code == 200


def test_guessing_the_admin_token_is_rate_limited_per_source(registry: MetaServer) -> None:
    inside_one_fail_window()
    guesser = fake_ip()
    codes = [_admin(registry, "GET", "/v1/admin/apps", ip=guesser, token=f"guess-{i}").status_code
             for i in range(LIMIT + 3)]
    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}
    assert _admin(registry, "GET", "/v1/admin/apps", ip=guesser).status_code == 429  # even the right one, from there
    assert _admin(registry, "GET", "/v1/admin/apps", ip=fake_ip()).status_code == 200  # others are unaffected
