"""Open API over real HTTP: Apollo's paths and shapes, token auth, and every bad-input case (4xx, no change)."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import pytest
import requests

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


ERROR_KEYS = {"status", "message", "timestamp", "exception"}


def apollo_error(resp: requests.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text)
    body: dict[str, Any] = resp.json()
    assert set(body) == ERROR_KEYS
    assert body["status"] == status
    return body


def test_apps_envclusters_and_namespaces_listing(api: OpenApi) -> None:
    app = api.new_app_id("ykafka")
    api.create_app(app)
    ns = api.create_namespace(app, "ykafka.global")
    assert ns["name"] == "ykafka.global"
    assert ns["appId"] == app
    assert ns["format"] == "properties"
    assert ns["isPublic"] is False
    assert ns["dataChangeCreatedBy"] == "ops"

    apps = api.ok(api.call("GET", "/apps", appIds=app))
    assert [(a["appId"], a["name"], a["orgId"], a["ownerName"]) for a in apps] == [(app, app, "infra", "ops")]
    assert api.ok(api.call("GET", f"/apps/{app}"))["orgName"] == "Infra"
    assert api.ok(api.call("GET", f"/apps/{app}/envclusters")) == [{"env": "DEV", "clusters": ["default"]}]
    assert api.ok(api.call("GET", "/envs")) == ["DEV"]

    api.set_item(app, "ykafka.global", "producer.acks", "all")
    listed = api.ok(api.call("GET", f"/envs/DEV/apps/{app}/clusters/default/namespaces"))
    assert [(n["namespaceName"], n["format"], n["isPublic"]) for n in listed] == [
        ("application", "properties", False), ("ykafka.global", "properties", False)]
    one = api.ok(api.call("GET", api.ns_path(app, "ykafka.global")))
    assert one["clusterName"] == "default"
    assert [(i["key"], i["value"]) for i in one["items"]] == [("producer.acks", "all")]
    assert api.ok(api.call("GET", f"{api.ns_path(app, 'ykafka.global')}/lock")) == {
        "namespaceName": "ykafka.global", "isLocked": False}
    cluster = api.ok(api.call("GET", f"/envs/DEV/apps/{app}/clusters/default"))
    assert (cluster["name"], cluster["appId"]) == ("default", app)
    app_namespaces = api.ok(api.call("GET", f"/apps/{app}/appnamespaces"))
    assert [a["name"] for a in app_namespaces] == ["application", "ykafka.global"]


def test_item_create_read_update_delete(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    path = api.ns_path(app, "ykafka.global")
    created = api.ok(api.call("POST", f"{path}/items", {"key": "timeout", "value": "3000", "comment": "ms",
                                                        "dataChangeCreatedBy": "zhanglea"}))
    assert (created["key"], created["value"], created["comment"]) == ("timeout", "3000", "ms")
    assert created["dataChangeCreatedBy"] == "zhanglea"
    assert created["dataChangeCreatedTime"][10] == "T"
    duplicate = apollo_error(api.call("POST", f"{path}/items", {"key": "timeout", "value": "1",
                                                                "dataChangeCreatedBy": "ops"}), 400)
    assert duplicate["message"] == "item already exists for itemKey:timeout"

    api.ok(api.call("PUT", f"{path}/items/timeout", {"key": "timeout", "value": 5000,
                                                     "dataChangeLastModifiedBy": "ops"}))
    got = api.ok(api.call("GET", f"{path}/items/timeout"))
    assert (got["value"], got["comment"], got["dataChangeLastModifiedBy"]) == ("5000", "ms", "ops")

    not_there = apollo_error(api.call("PUT", f"{path}/items/nope", {"key": "nope", "value": "1",
                                                                    "dataChangeLastModifiedBy": "ops"}), 404)
    assert "itemKey:nope" in not_there["message"]
    api.ok(api.call("PUT", f"{path}/items/nope", {"key": "nope", "value": "1", "dataChangeCreatedBy": "ops"},
                    createIfNotExists="true"))
    page = api.ok(api.call("GET", f"{path}/items", page="0", size="1"))
    assert (page["page"], page["size"], page["total"]) == (0, 1, 2)
    assert [i["key"] for i in page["content"]] == ["timeout"]

    encoded = base64.b64encode(b"nope").decode()
    assert api.ok(api.call("GET", f"{path}/encodedItems/{encoded}"))["value"] == "1"
    assert api.call("DELETE", f"{path}/items/nope", operator="ops").status_code == 200
    apollo_error(api.call("GET", f"{path}/items/nope"), 404)
    apollo_error(api.call("DELETE", f"{path}/items/nope", operator="ops"), 404)


def test_release_latest_and_by_id(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    path = api.ns_path(app, "ykafka.global")
    never = api.call("GET", f"{path}/releases/latest")
    assert never.status_code == 200
    assert never.content == b""
    api.set_item(app, "ykafka.global", "a", "1")
    release = api.ok(api.call("POST", f"{path}/releases", {"releaseTitle": "2016-08-11",
                                                           "releaseComment": "Modify timeout value",
                                                           "releasedBy": "zhanglea"}))
    assert (release["appId"], release["clusterName"], release["namespaceName"]) == (app, "default", "ykafka.global")
    assert (release["name"], release["comment"]) == ("2016-08-11", "Modify timeout value")
    assert release["configurations"] == {"a": "1"}
    assert release["dataChangeCreatedBy"] == "zhanglea"
    assert api.ok(api.call("GET", f"{path}/releases/latest"))["id"] == release["id"]
    assert api.ok(api.call("GET", f"/envs/DEV/releases/{release['id']}"))["name"] == "2016-08-11"
    apollo_error(api.call("GET", "/envs/DEV/releases/987654321"), 404)


def test_any_env_name_is_accepted(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    listed = api.ok(api.call("GET", f"/envs/PRO/apps/{app}/clusters/default/namespaces/ykafka.global"))
    assert listed["items"][0]["value"] == "v"


def test_tokens_missing_wrong_scoped_and_created_by_cli(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    bare = requests.get(cc.url + "/openapi/v1/apps", timeout=5)
    assert apollo_error(bare, 401)["message"] == "Unauthorized"
    wrong = requests.get(cc.url + "/openapi/v1/apps", headers={"Authorization": "nope"}, timeout=5)
    apollo_error(wrong, 401)

    fresh = cc.cli("token", "create")
    assert len(fresh) == 40
    assert requests.get(cc.url + "/openapi/v1/apps", headers={"Authorization": fresh}, timeout=5).status_code == 200
    chosen = cc.cli("token", "create", "--token", "my-fixed-token", "--app-id", "scoped-only")
    assert chosen == "my-fixed-token"
    scoped = requests.post(f"{cc.url}/openapi/v1{api.ns_path(app, 'ykafka.global')}/items",
                           headers={"Authorization": chosen, "Content-Type": "application/json"},
                           data=json.dumps({"key": "x", "value": "1", "dataChangeCreatedBy": "ops"}), timeout=5)
    assert apollo_error(scoped, 403)["message"] == "Access is denied"
    bearer = requests.get(cc.url + "/openapi/v1/apps", headers={"Authorization": f"Bearer {fresh}"}, timeout=5)
    assert bearer.status_code == 200


BAD_ITEM_BODIES = [
    pytest.param({"value": "1", "dataChangeCreatedBy": "ops"}, "key should not be null or empty", id="no-key"),
    pytest.param({"key": "k", "dataChangeCreatedBy": "ops"}, "value should not be null", id="no-value"),
    pytest.param({"key": "k", "value": "1"}, "operator should not be null or empty", id="no-operator"),
    pytest.param({"key": "k" * 129, "value": "1", "dataChangeCreatedBy": "ops"}, "key too long. length limit:128",
                 id="key-129"),
    pytest.param({"key": "k", "value": "v" * (64 * 1024 + 1), "dataChangeCreatedBy": "ops"},
                 "value too long. length limit:65536", id="value-64KiB+1"),
    pytest.param({"key": "k", "value": "1", "comment": "c" * 257, "dataChangeCreatedBy": "ops"},
                 "Comment length should not exceed 256 characters", id="comment-257"),
    pytest.param({"key": "k", "value": ["not", "a", "string"], "dataChangeCreatedBy": "ops"}, "value", id="value-list"),
]


@pytest.mark.parametrize(("body", "message"), BAD_ITEM_BODIES)
def test_bad_item_bodies_are_400_and_change_nothing(api: OpenApi, body: dict[str, Any], message: str) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"existing": "1"})
    path = api.ns_path(app, "ykafka.global")
    error = apollo_error(api.call("POST", f"{path}/items", body), 400)
    assert message in error["message"]
    items = api.ok(api.call("GET", f"{path}/items"))["content"]
    assert [(i["key"], i["value"]) for i in items] == [("existing", "1")]


def test_key_of_exactly_128_and_value_of_exactly_64KiB_are_accepted(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    key, value = "k" * 128, "v" * (64 * 1024)
    api.ok(api.call("POST", f"{api.ns_path(app, 'ykafka.global')}/items",
                    {"key": key, "value": value, "dataChangeCreatedBy": "ops"}))
    assert api.publish(app, "ykafka.global")["configurations"] == {key: value}


def test_bad_json_and_missing_bodies_are_400_not_422(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"existing": "1"})
    path = cc.url + "/openapi/v1" + api.ns_path(app, "ykafka.global")
    headers = {"Authorization": api.http.headers["Authorization"], "Content-Type": "application/json"}
    broken = requests.post(path + "/items", data='{"key": "k", "value": ', headers=headers, timeout=5)
    assert "JSON" in apollo_error(broken, 400)["message"]
    empty = requests.post(path + "/items", headers=headers, timeout=5)
    apollo_error(empty, 400)
    not_object = requests.post(path + "/releases", data='"release please"', headers=headers, timeout=5)
    apollo_error(not_object, 400)
    bad_query = requests.get(path + "/items", params={"page": "first"}, headers=headers, timeout=5)
    apollo_error(bad_query, 400)
    assert api.ok(api.call("GET", f"{api.ns_path(app, 'ykafka.global')}/releases/active"))[0]["configurations"] == {
        "existing": "1"}


def test_unknown_app_cluster_namespace(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    item = {"key": "x", "value": "1", "dataChangeCreatedBy": "ops"}
    unknown_app = apollo_error(api.call("POST", f"{api.ns_path('no-such-app', 'ykafka.global')}/items", item), 404)
    assert unknown_app["message"] == "app not found for appId:no-such-app"
    unknown_cluster = apollo_error(api.call("POST", f"{api.ns_path(app, 'ykafka.global', 'nowhere')}/items", item),
                                   404)
    assert unknown_cluster["message"] == f"cluster not found for appId:{app} clusterName:nowhere"
    unknown_ns = apollo_error(api.call("POST", f"{api.ns_path(app, 'ykafka.topic.nope')}/items", item), 404)
    assert "namespaceName:ykafka.topic.nope" in unknown_ns["message"]
    apollo_error(api.call("POST", f"{api.ns_path(app, 'ykafka.topic.nope')}/releases",
                          {"releaseTitle": "t", "releasedBy": "ops"}), 404)
    apollo_error(api.call("GET", f"/apps/{app}-missing/envclusters"), 404)
    apollo_error(api.call("GET", f"/envs/DEV/apps/{app}/clusters/nowhere/namespaces"), 404)
    apollo_error(api.call("GET", api.ns_path(app, "ykafka.topic.nope")), 404)
    apollo_error(api.call("POST", f"{api.ns_path(app, 'ykafka.topic.nope')}/branches", operator="ops"), 400)
    missing_app_ns = apollo_error(api.call("POST", "/apps/no-such-app/appnamespaces", {
        "name": "x", "appId": "no-such-app", "format": "properties", "isPublic": False,
        "dataChangeCreatedBy": "ops"}), 400)
    assert missing_app_ns["message"] == "app not exists for appId:no-such-app"
    apollo_error(api.call("GET", "/no/such/route"), 404)


def test_bad_app_and_namespace_creation(api: OpenApi) -> None:
    app = api.new_app_id()
    api.create_app(app)
    again = apollo_error(api.call("POST", "/apps", {"app": {"appId": app, "name": app, "ownerName": "ops"}}), 400)
    assert again["message"] == f"app already exists for appId:{app}"
    apollo_error(api.call("POST", "/apps", {"admins": ["ops"]}), 400)
    apollo_error(api.call("POST", "/apps", {"app": {"appId": "bad id!", "name": "x", "ownerName": "ops"}}), 400)
    apollo_error(api.call("POST", "/apps", {"app": {"appId": "no-name", "ownerName": "ops"}}), 400)
    ns = {"name": "ykafka.global", "appId": app, "format": "properties", "isPublic": False,
          "dataChangeCreatedBy": "ops"}
    api.ok(api.call("POST", f"/apps/{app}/appnamespaces", ns))
    dup = apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", ns), 400)
    assert dup["message"] == "Private AppNamespace ykafka.global already exists!"
    mismatch = apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", {**ns, "appId": "other"}), 400)
    assert mismatch["message"].startswith("AppId not equal")
    apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", {**ns, "name": "x.json"}), 400)
    apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", {**ns, "name": "bad name"}), 400)
    apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", {**ns, "name": "other", "format": "ini"}), 400)
    no_operator = {k: v for k, v in ns.items() if k != "dataChangeCreatedBy"}
    apollo_error(api.call("POST", f"/apps/{app}/appnamespaces", {**no_operator, "name": "other"}), 400)
    names = [a["name"] for a in api.ok(api.call("GET", f"/apps/{app}/appnamespaces"))]
    assert names == ["application", "ykafka.global"]


def test_bad_release_and_rule_requests(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    path = api.ns_path(app, "ykafka.global")
    no_title = apollo_error(api.call("POST", f"{path}/releases", {"releasedBy": "ops"}), 400)
    assert no_title["message"] == "Params(releaseTitle and releasedBy) can not be empty"
    apollo_error(api.call("POST", f"{path}/releases", {"releaseTitle": "t"}), 400)
    apollo_error(api.call("POST", f"{path}/releases", {"releaseTitle": "t" * 65, "releasedBy": "ops"}), 400)
    branch = api.ok(api.call("POST", f"{path}/branches", operator="ops"))["clusterName"]
    twice = apollo_error(api.call("POST", f"{path}/branches", operator="ops"), 400)
    assert "branch already exists" in twice["message"]
    apollo_error(api.call("PUT", f"{path}/branches/{branch}/rules", {"ruleItems": [{"clientIpList": ["1.1.1.1"]}]},
                          operator="ops"), 400)
    apollo_error(api.call("PUT", f"{path}/branches/{branch}/rules", {"ruleItems": "all"}, operator="ops"), 400)
    assert api.call("GET", f"{path}/branches/{branch}/rules").content == b""
    apollo_error(api.call("POST", f"{path}/branches/not-a-branch/releases",
                          {"releaseTitle": "t", "releasedBy": "ops"}), 400)
    active = api.ok(api.call("GET", f"{path}/releases/active"))
    assert len(active) == 1


def test_branch_item_endpoints_and_patch_merge(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"a": "1", "b": "1"})
    path = api.ns_path(app, "ykafka.global")
    branch = api.ok(api.call("POST", f"{path}/branches", operator="ops"))["clusterName"]
    created = api.ok(api.call("POST", f"{path}/branches/{branch}/items",
                              {"key": "a", "value": "2", "dataChangeCreatedBy": "ops"}))
    assert (created["key"], created["value"]) == ("a", "2")
    api.ok(api.call("POST", f"{path}/branches/{branch}/items", {"key": "tmp", "value": "x",
                                                                "dataChangeCreatedBy": "ops"}))
    assert api.call("DELETE", f"{path}/branches/{branch}/items/tmp", operator="ops").status_code == 200
    api.ok(api.call("PUT", f"{path}/branches/{branch}/items/a", {"key": "a", "value": "3",
                                                                 "dataChangeLastModifiedBy": "ops"}))
    assert api.ok(api.call("GET", f"{path}/branches/{branch}/items/a"))["value"] == "3"
    assert [i["key"] for i in api.ok(api.call("GET", f"{path}/branches/{branch}/items"))] == ["a"]
    # the branch is a child cluster: the plain item API reaches it too, as in Apollo
    assert api.ok(api.call("GET", f"{api.ns_path(app, 'ykafka.global', branch)}/items/a"))["value"] == "3"
    api.ok(api.call("PUT", f"{path}/branches/{branch}/rules",
                    {"ruleItems": [{"clientAppId": app, "clientIpList": ["10.9.9.9"]}]}, operator="ops"))
    gray = api.ok(api.call("POST", f"{path}/branches/{branch}/releases", {"releaseTitle": "g", "releasedBy": "ops"}))
    assert gray["configurations"] == {"a": "3", "b": "1"}
    merged = api.ok(api.call("PATCH", f"{path}/branches/{branch}/merge",
                             {"releaseTitle": "merge", "releasedBy": "ops"}, deleteBranch="true"))
    assert merged["configurations"] == {"a": "3", "b": "1"}
    assert requests.get(f"{cc.url}/configs/{app}/default/ykafka.global", timeout=5).json()["configurations"] == {
        "a": "3", "b": "1"}
    apollo_error(api.call("GET", f"{path}/branches/{branch}/items"), 400)


def test_encoded_item_keys(api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    path = api.ns_path(app, "ykafka.global")
    key = "route/with/slashes"
    encoded = base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")
    api.ok(api.call("PUT", f"{path}/encodedItems/{encoded}", {"key": key, "value": "v1",
                                                              "dataChangeCreatedBy": "ops"}, createIfNotExists="true"))
    assert api.ok(api.call("GET", f"{path}/encodedItems/{encoded}"))["value"] == "v1"
    assert api.call("DELETE", f"{path}/encodedItems/{encoded}", operator="ops").status_code == 200
    apollo_error(api.call("GET", f"{path}/encodedItems/{encoded}"), 404)
    apollo_error(api.call("GET", f"{path}/encodedItems/%25%25%25"), 400)


def test_authorized_apps_and_single_app_namespace(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    one = api.ok(api.call("GET", f"/apps/{app}/appnamespaces/ykafka.global"))
    assert (one["name"], one["appId"], one["comment"]) == ("ykafka.global", app, "test")
    apollo_error(api.call("GET", f"/apps/{app}/appnamespaces/nope"), 404)
    assert app in [a["appId"] for a in api.ok(api.call("GET", "/apps/authorized"))]
    scoped = cc.cli("token", "create", "--app-id", app)
    mine = requests.get(cc.url + "/openapi/v1/apps/authorized", headers={"Authorization": scoped}, timeout=5)
    assert [a["appId"] for a in mine.json()] == [app]


def test_oversized_body_is_413(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {}, publish=False)
    resp = requests.post(f"{cc.url}/openapi/v1{api.ns_path(app, 'ykafka.global')}/items",
                         headers={"Authorization": api.http.headers["Authorization"],
                                  "Content-Type": "application/json"},
                         data=json.dumps({"key": "k", "value": "v" * (2 * 1024 * 1024), "dataChangeCreatedBy": "ops"}),
                         timeout=10)
    apollo_error(resp, 413)
    assert api.ok(api.call("GET", f"{api.ns_path(app, 'ykafka.global')}/items"))["total"] == 0


def test_hostile_values_are_400_never_500(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"existing": "1"})
    path = cc.url + "/openapi/v1" + api.ns_path(app, "ykafka.global")
    headers = {"Authorization": api.http.headers["Authorization"], "Content-Type": "application/json"}
    lone_surrogate = b'{"key": "k", "value": "\\ud800", "dataChangeCreatedBy": "ops"}'
    apollo_error(requests.post(path + "/items", data=lone_surrogate, headers=headers, timeout=5), 400)
    apollo_error(requests.post(path + "/releases", data=b'{"releaseTitle": "\\udfff", "releasedBy": "ops"}',
                               headers=headers, timeout=5), 400)
    apollo_error(requests.post(path + "/items", data=json.dumps({"key": "k", "value": "v", "type": 10**20,
                                                                 "dataChangeCreatedBy": "ops"}),
                               headers=headers, timeout=5), 400)
    huge = "99999999999999999999999"
    apollo_error(api.call("GET", f"/envs/DEV/releases/{huge}"), 400)
    apollo_error(api.call("PUT", f"/envs/DEV/releases/{huge}/rollback", operator="ops"), 400)
    apollo_error(api.call("GET", f"{api.ns_path(app, 'ykafka.global')}/items", page=huge), 400)
    resp = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": int(huge)}])
    assert resp.status_code == 304
    items = api.ok(api.call("GET", f"{api.ns_path(app, 'ykafka.global')}/items"))["content"]
    assert [(i["key"], i["value"]) for i in items] == [("existing", "1")]
