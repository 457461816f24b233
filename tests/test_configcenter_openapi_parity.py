"""Open API requests exactly as programs written for released Apollo (<= 2.5) send them (httpx, no redirects)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService

from tests.cc_fixtures import ENV, TOKEN

HEADERS = {"Authorization": TOKEN, "Content-Type": "application/json;charset=UTF-8"}


def _client(cc: ConfigService) -> httpx.Client:
    return httpx.Client(base_url=cc.url, headers=HEADERS, timeout=10)  # httpx follows no redirect by default


def test_trailing_slash_is_served_as_without(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id("slash")
    with _client(cc) as http:
        created = http.post("/openapi/v1/apps/", json={"app": {"appId": app, "name": app, "orgId": "infra",
                                                                "orgName": "Infra", "ownerName": "ops"},
                                                        "admins": ["ops"]})
        assert created.status_code == 200, created.text
        got = http.get(f"/openapi/v1/apps/{app}/")
        assert got.status_code == 200 and got.json()["appId"] == app
        clusters = http.get(f"/openapi/v1/envs/{ENV}/apps/{app}/clusters/default/")
        assert clusters.status_code == 200 and clusters.json()["name"] == "default"


def test_apps_by_self_is_not_taken_for_an_app_id(cc: ConfigService, api: OpenApi) -> None:
    mine = [api.new_app_id("self") for _ in range(3)]
    for app in mine:
        api.create_app(app)
    with _client(cc) as http:
        everything = http.get("/openapi/v1/apps/by-self", params={"page": 0, "size": 500})
        assert everything.status_code == 200, everything.text
        ids = [a["appId"] for a in everything.json()]
        assert set(mine) <= set(ids)
        page = http.get("/openapi/v1/apps/by-self", params={"page": 1, "size": 2}).json()
        assert [a["appId"] for a in page] == ids[2:4]
        assert http.get("/openapi/v1/apps/by-self", params={"size": 0}).status_code == 400


def test_organizations_lists_the_apps_organizations(cc: ConfigService, api: OpenApi) -> None:
    api.create_app(api.new_app_id("org"))  # orgId infra, orgName Infra
    with _client(cc) as http:
        orgs = http.get("/openapi/v1/organizations")
    assert orgs.status_code == 200, orgs.text
    assert {"orgId": "infra", "orgName": "Infra"} in orgs.json()


def test_gray_del_release_publishes_the_branch_without_the_keys(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id("graydel")
    ns = "ykafka.global"
    api.setup(app, ns, {"producer.acks": "all", "trace.enabled": "true"})
    path = f"/openapi/v1{api.ns_path(app, ns)}"
    with _client(cc) as http:
        branch = http.post(f"{path}/branches", params={"operator": "ops"}).json()["clusterName"]
        put = http.put(f"{path}/branches/{branch}/items/linger.ms", params={"createIfNotExists": "true"},
                       json={"key": "linger.ms", "value": "5", "dataChangeCreatedBy": "ops"})
        assert put.status_code == 200, put.text
        released = http.post(f"{path}/branches/{branch}/gray-del-releases",
                             json={"releaseTitle": "gray-del", "releaseComment": "drop trace", "releasedBy": "ops",
                                   "isEmergencyPublish": False, "grayDelKeys": ["trace.enabled"]})
        assert released.status_code == 200, released.text
        assert released.json()["configurations"] == {"producer.acks": "all", "linger.ms": "5"}
        master = http.get(f"{path}/releases/latest").json()
        assert master["configurations"] == {"producer.acks": "all", "trace.enabled": "true"}
        unknown = http.post(f"{path}/branches/nosuchbranch/gray-del-releases",
                            json={"releaseTitle": "x", "releasedBy": "ops", "grayDelKeys": ["a"]})
        assert unknown.status_code in (400, 404), unknown.text
