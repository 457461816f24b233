"""Gray releases (branches with IP / label rules), merge, abandon and rollback, over real HTTP."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


NS = "ykafka.topic.orders"
GRAY_IP = "10.0.0.7"
OTHER_IP = "10.0.0.8"


def served(cc: ConfigService, app: str, ip: str | None = None, label: str | None = None) -> dict[str, Any]:
    params = {k: v for k, v in (("ip", ip), ("label", label)) if v}
    resp = requests.get(f"{cc.url}/configs/{app}/default/{NS}", params=params, timeout=5)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def current_id(cc: ConfigService, app: str) -> int:
    note: int = cc.poll(app, [{"namespaceName": NS, "notificationId": -1}]).json()[0]["notificationId"]
    return note


def make_branch(api: OpenApi, app: str, ips: list[str], labels: list[str] | None = None,
                items: dict[str, str] | None = None, publish: bool = True) -> str:
    path = api.ns_path(app, NS)
    created = api.ok(api.call("POST", f"{path}/branches", operator="ops"))
    branch: str = created["clusterName"]
    assert created["namespaceName"] == NS
    assert branch != "default"
    for key, value in (items or {}).items():
        api.ok(api.call("PUT", f"{path}/branches/{branch}/items/{key}",
                        {"key": key, "value": value, "dataChangeCreatedBy": "ops"}, createIfNotExists="true"))
    api.ok(api.call("PUT", f"{path}/branches/{branch}/rules",
                    {"ruleItems": [{"clientAppId": app, "clientIpList": ips, "clientLabelList": labels or []}]},
                    operator="ops"))
    if publish:
        api.ok(api.call("POST", f"{path}/branches/{branch}/releases",
                        {"releaseTitle": "gray", "releasedBy": "ops"}))
    return branch


def test_gray_rules_serve_the_branch_only_to_matching_ips(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"producer.rate.limit.msgs": "1000", "trace.enabled": "false"})
    before = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": before}])
    branch = make_branch(api, app, [GRAY_IP], items={"producer.rate.limit.msgs": "10"})

    # setting rules and publishing the branch both wake the namespace's polls
    woken = parked.join()
    assert woken.status_code == 200
    assert woken.json()[0]["notificationId"] > before

    gray = served(cc, app, GRAY_IP)
    main = served(cc, app, OTHER_IP)
    assert gray["configurations"] == {"producer.rate.limit.msgs": "10", "trace.enabled": "false"}
    assert main["configurations"] == {"producer.rate.limit.msgs": "1000", "trace.enabled": "false"}
    assert gray["releaseKey"] != main["releaseKey"]
    assert served(cc, app)["configurations"]["producer.rate.limit.msgs"] == "1000"  # no ip: peer 127.0.0.1

    path = api.ns_path(app, NS)
    found = api.ok(api.call("GET", f"{path}/branches"))
    assert found["clusterName"] == branch
    assert [(i["key"], i["value"]) for i in found["items"]] == [("producer.rate.limit.msgs", "10")]
    rules = api.ok(api.call("GET", f"{path}/branches/{branch}/rules"))
    assert rules["branchName"] == branch
    assert rules["ruleItems"] == [{"clientAppId": app, "clientIpList": [GRAY_IP], "clientLabelList": []}]
    assert api.ok(api.call("GET", f"{path}/branches/{branch}/items"))[0]["value"] == "10"

    # a master release re-applies the branch override on top of the new master values
    gray_id = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": gray_id}], ip=GRAY_IP)
    api.set_item(app, NS, "trace.enabled", "true")
    api.publish(app, NS)
    assert parked.join().status_code == 200
    assert served(cc, app, GRAY_IP)["configurations"] == {"producer.rate.limit.msgs": "10", "trace.enabled": "true"}
    assert served(cc, app, OTHER_IP)["configurations"] == {"producer.rate.limit.msgs": "1000",
                                                           "trace.enabled": "true"}


def test_label_and_wildcard_rules(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"consumer.workers": "4"})
    make_branch(api, app, [], labels=["canary"], items={"consumer.workers": "16"})
    assert served(cc, app, OTHER_IP, label="canary")["configurations"] == {"consumer.workers": "16"}
    assert served(cc, app, OTHER_IP, label="stable")["configurations"] == {"consumer.workers": "4"}
    # a rule for another client app never matches this one
    other = api.new_app_id()
    api.setup(other, NS, {"consumer.workers": "1"})
    make_branch(api, other, ["*"], items={"consumer.workers": "2"})
    assert requests.get(f"{cc.url}/configs/{other}/default/{NS}", params={"ip": "1.2.3.4"},
                        timeout=5).json()["configurations"] == {"consumer.workers": "2"}


def test_merge_folds_the_branch_into_main_and_deletes_it(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"producer.acks": "1", "producer.linger.ms": "5"})
    branch = make_branch(api, app, [GRAY_IP], items={"producer.acks": "all"})
    path = api.ns_path(app, NS)

    # merge refuses while master has unpublished edits, and changes nothing
    api.set_item(app, NS, "producer.linger.ms", "7")
    refused = api.call("POST", f"{path}/branches/{branch}/merge", {"releaseTitle": "merge", "releasedBy": "ops"},
                       deleteBranch="true")
    assert refused.status_code == 400
    assert refused.json()["message"] == "Merge operation failed. Because master has modified items"
    assert served(cc, app, GRAY_IP)["configurations"]["producer.acks"] == "all"
    api.set_item(app, NS, "producer.linger.ms", "5")

    before = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": before}], ip=OTHER_IP)
    merged = api.ok(api.call("POST", f"{path}/branches/{branch}/merge",
                             {"releaseTitle": "merge", "releaseComment": "gray ok", "releasedBy": "ops"},
                             deleteBranch="true"))
    assert merged["clusterName"] == "default"
    assert merged["configurations"] == {"producer.acks": "all", "producer.linger.ms": "5"}
    assert parked.join().json()[0]["notificationId"] > before
    assert served(cc, app, OTHER_IP)["configurations"] == {"producer.acks": "all", "producer.linger.ms": "5"}
    assert served(cc, app, GRAY_IP)["releaseKey"] == served(cc, app, OTHER_IP)["releaseKey"]
    branch_after = api.call("GET", f"{path}/branches")
    assert branch_after.status_code == 200
    assert branch_after.content == b""
    items = {i["key"]: i["value"] for i in api.ok(api.call("GET", f"{path}/items"))["content"]}
    assert items == {"producer.acks": "all", "producer.linger.ms": "5"}


def test_merge_through_the_newer_open_api_path_keeps_the_branch(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"k": "main"})
    branch = make_branch(api, app, [GRAY_IP], items={"k": "gray"})
    path = api.ns_path(app, NS)
    merged = api.ok(api.call("POST", f"{path}/branches/{branch}", {"releaseTitle": "m", "releasedBy": "ops"},
                             deleteBranch="false", operator="ops"))
    assert merged["configurations"] == {"k": "gray"}
    assert api.ok(api.call("GET", f"{path}/branches"))["clusterName"] == branch


def test_abandon_returns_gray_clients_to_main(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"consumer.paused": "false"})
    branch = make_branch(api, app, [GRAY_IP], items={"consumer.paused": "true"})
    assert served(cc, app, GRAY_IP)["configurations"] == {"consumer.paused": "true"}
    path = api.ns_path(app, NS)
    missing_operator = api.call("DELETE", f"{path}/branches/{branch}")
    assert missing_operator.status_code == 400
    before = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": before}], ip=GRAY_IP)
    assert api.call("DELETE", f"{path}/branches/{branch}", operator="ops").status_code == 200
    assert parked.join().json()[0]["notificationId"] > before
    assert served(cc, app, GRAY_IP)["configurations"] == {"consumer.paused": "false"}
    assert api.call("GET", f"{path}/branches").content == b""
    gone = api.call("PUT", f"{path}/branches/{branch}/rules", {"ruleItems": []}, operator="ops")
    assert gone.status_code == 400
    assert "branch not exist" in gone.json()["message"]


def test_rollback_serves_the_previous_release_and_wakes_polls(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    r1 = api.setup(app, NS, {"route.cluster": "dc-a"})
    assert r1 is not None
    api.set_item(app, NS, "route.cluster", "dc-b")
    r2 = api.publish(app, NS)
    assert served(cc, app)["configurations"] == {"route.cluster": "dc-b"}
    before = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": before}])
    start = time.monotonic()
    resp = api.call("PUT", f"/envs/DEV/releases/{r2['id']}/rollback", operator="ops")
    assert resp.status_code == 200
    woken = parked.join()
    assert woken.json()[0]["notificationId"] > before
    assert parked.answered_at - start < 1.0
    body = served(cc, app)
    assert body["configurations"] == {"route.cluster": "dc-a"}
    assert body["releaseKey"] == r1["releaseKey"]
    latest = api.ok(api.call("GET", f"{api.ns_path(app, NS)}/releases/latest"))
    assert latest["id"] == r1["id"]
    # the abandoned release cannot be rolled back again; the last active one cannot be rolled back at all
    again = api.call("PUT", f"/envs/DEV/releases/{r2['id']}/rollback", operator="ops")
    assert again.status_code == 400
    assert again.json()["message"] == "release is not active"
    only_one = api.call("PUT", f"/envs/DEV/releases/{r1['id']}/rollback", operator="ops")
    assert only_one.status_code == 400
    assert "only one active release" in only_one.json()["message"]
    assert api.call("PUT", "/envs/DEV/releases/99999999/rollback", operator="ops").status_code == 404
    assert api.call("PUT", f"/envs/DEV/releases/{r1['id']}/rollback").status_code == 400  # no operator


def test_rollback_to_a_chosen_release(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {}, publish=False)
    versions = []
    for value in ("1", "2", "3"):
        api.set_item(app, NS, "v", value)
        versions.append(api.publish(app, NS))
    resp = api.call("PUT", f"/envs/DEV/releases/{versions[2]['id']}/rollback", operator="ops",
                    toReleaseId=str(versions[0]["id"]))
    assert resp.status_code == 200
    assert served(cc, app)["configurations"] == {"v": "1"}
    active = api.ok(api.call("GET", f"{api.ns_path(app, NS)}/releases/active"))
    assert [r["id"] for r in active] == [versions[0]["id"]]


def test_rollback_of_a_gray_release_serves_the_previous_gray_release(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"k": "main"})
    branch = make_branch(api, app, [GRAY_IP], items={"k": "gray-1"})
    path = api.ns_path(app, NS)
    api.ok(api.call("PUT", f"{path}/branches/{branch}/items/k", {"key": "k", "value": "gray-2",
                                                                  "dataChangeLastModifiedBy": "ops"}))
    g2 = api.ok(api.call("POST", f"{path}/branches/{branch}/releases", {"releaseTitle": "g2", "releasedBy": "ops"}))
    assert g2["clusterName"] == branch
    assert served(cc, app, GRAY_IP)["configurations"] == {"k": "gray-2"}
    before = current_id(cc, app)
    parked = cc.park(app, [{"namespaceName": NS, "notificationId": before}], ip=GRAY_IP)
    assert api.call("PUT", f"/envs/DEV/releases/{g2['id']}/rollback", operator="ops").status_code == 200
    assert parked.join().status_code == 200
    assert served(cc, app, GRAY_IP)["configurations"] == {"k": "gray-1"}
    assert served(cc, app, OTHER_IP)["configurations"] == {"k": "main"}


def test_master_rollback_keeps_gray_overrides(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, NS, {"a": "1", "b": "1"})
    make_branch(api, app, [GRAY_IP], items={"a": "gray"})
    api.set_item(app, NS, "b", "2")
    r2 = api.publish(app, NS)
    assert served(cc, app, GRAY_IP)["configurations"] == {"a": "gray", "b": "2"}
    assert served(cc, app, OTHER_IP)["configurations"] == {"a": "1", "b": "2"}
    assert api.call("PUT", f"/envs/DEV/releases/{r2['id']}/rollback", operator="ops").status_code == 200
    assert served(cc, app, OTHER_IP)["configurations"] == {"a": "1", "b": "1"}
    assert served(cc, app, GRAY_IP)["configurations"] == {"a": "gray", "b": "1"}
    gray = served(cc, app, GRAY_IP)
    assert gray["cluster"] != "default"  # the branch release is reported from the branch cluster, as Apollo
