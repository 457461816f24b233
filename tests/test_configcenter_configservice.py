"""Config-service API over real HTTP: /configs, /configfiles, /notifications/v2 (Apollo client protocol)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


def configs(cc: ConfigService, app: str, ns: str, cluster: str = "default", **params: str) -> requests.Response:
    return requests.get(f"{cc.url}/configs/{app}/{cluster}/{ns}", params=params or None, timeout=5)


def test_health(cc: ConfigService) -> None:
    resp = requests.get(cc.url + "/health", timeout=5)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_first_fetch_then_304_by_release_key(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    release = api.setup(app, "ykafka.global", {"producer.acks": "all", "consumer.workers": "4"})
    assert release is not None
    resp = configs(cc, app, "ykafka.global", ip="10.0.0.1")
    assert resp.status_code == 200
    body = resp.json()
    assert body == {"appId": app, "cluster": "default", "namespaceName": "ykafka.global",
                    "configurations": {"producer.acks": "all", "consumer.workers": "4"},
                    "releaseKey": release["releaseKey"]}
    again = configs(cc, app, "ykafka.global", releaseKey=body["releaseKey"])
    assert again.status_code == 304
    assert again.content == b""
    stale = configs(cc, app, "ykafka.global", releaseKey="some-old-key")
    assert stale.status_code == 200
    assert stale.json()["configurations"]["producer.acks"] == "all"


def test_unknown_and_unreleased_namespaces_are_404(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.topic.orders", {"route.cluster": "dc-a"}, publish=False)
    never_released = configs(cc, app, "ykafka.topic.orders")
    assert never_released.status_code == 404
    assert never_released.json()["status"] == 404
    assert "ykafka.topic.orders" in never_released.json()["message"]
    assert configs(cc, app, "ykafka.topic.missing").status_code == 404
    assert configs(cc, "no-such-app", "application").status_code == 404


def test_cluster_falls_back_to_default_and_properties_suffix_is_stripped(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"trace.enabled": "true"})
    body = configs(cc, app, "ykafka.global.properties", cluster="dc-somewhere").json()
    assert body["cluster"] == "default"
    assert body["namespaceName"] == "ykafka.global.properties"  # echoed as asked, like Apollo
    assert body["configurations"] == {"trace.enabled": "true"}


def test_own_cluster_release_wins_over_default(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"producer.linger.ms": "5"})
    api.ok(api.call("POST", f"/envs/DEV/apps/{app}/clusters", {"name": "sha", "appId": app,
                                                               "dataChangeCreatedBy": "ops"}))
    api.set_item(app, "ykafka.global", "producer.linger.ms", "50", cluster="sha")
    api.publish(app, "ykafka.global", cluster="sha")
    assert configs(cc, app, "ykafka.global", cluster="sha").json()["configurations"] == {"producer.linger.ms": "50"}
    assert configs(cc, app, "ykafka.global").json()["configurations"] == {"producer.linger.ms": "5"}
    via_dc = configs(cc, app, "ykafka.global", cluster="other", dataCenter="sha").json()
    assert via_dc["cluster"] == "sha"
    assert via_dc["configurations"] == {"producer.linger.ms": "50"}


def test_configfiles_json_and_properties(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"a.b": "1", "path": "C:\\tmp", "greeting": "hi there", "eq": "x=y"})
    js = requests.get(f"{cc.url}/configfiles/json/{app}/default/ykafka.global", timeout=5)
    assert js.status_code == 200
    assert js.json() == {"a.b": "1", "path": "C:\\tmp", "greeting": "hi there", "eq": "x=y"}
    props = requests.get(f"{cc.url}/configfiles/{app}/default/ykafka.global", timeout=5)
    assert props.status_code == 200
    assert props.headers["content-type"].startswith("text/plain")
    assert props.text.splitlines() == ["a.b=1", "path=C\\:\\\\tmp", "greeting=hi there", "eq=x\\=y"]
    assert requests.get(f"{cc.url}/configfiles/json/{app}/default/missing", timeout=5).status_code == 404


def test_first_poll_with_minus_one_answers_at_once(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    start = time.monotonic()
    resp = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": -1}])
    assert time.monotonic() - start < 1.0
    assert resp.status_code == 200
    [note] = resp.json()
    assert note["namespaceName"] == "ykafka.global"
    assert note["notificationId"] > 0
    assert note["messages"] == {"details": {f"{app}+default+ykafka.global": note["notificationId"]}}


def test_poll_times_out_with_304(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    current = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": -1}]).json()[0]
    start = time.monotonic()
    resp = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": current["notificationId"]}])
    elapsed = time.monotonic() - start
    assert resp.status_code == 304
    assert cc.longpoll_timeout - 0.1 <= elapsed < cc.longpoll_timeout + 1.5


def test_poll_abandoned_by_its_client_is_dropped_before_its_timeout(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    current = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": -1}]).json()[0]

    def parked() -> int:
        return int(requests.get(cc.url + "/stats", timeout=5).json()["longPolls"])

    before = parked()
    start = time.monotonic()

    def give_up() -> None:  # the client gives up after 0.6 s; the server would hold the poll for its 2 s
        with contextlib.suppress(requests.Timeout):
            cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": current["notificationId"]}],
                    timeout=0.6)

    client = threading.Thread(target=give_up, daemon=True)
    client.start()
    while parked() == before:
        assert time.monotonic() - start < 0.6, "the poll was not parked"
        time.sleep(0.01)
    client.join(5)
    while parked() > before:
        assert time.monotonic() - start < cc.longpoll_timeout - 0.2, "the abandoned poll is still parked"
        time.sleep(0.02)


def test_release_wakes_a_parked_poll_at_once(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"producer.acks": "1"})
    current = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": -1}]).json()[0]
    parked = cc.park(app, [{"namespaceName": "ykafka.global", "notificationId": current["notificationId"]}])
    api.set_item(app, "ykafka.global", "producer.acks", "all")
    released_at = time.monotonic()
    api.publish(app, "ykafka.global")
    resp = parked.join()
    assert resp.status_code == 200
    assert parked.answered_at - released_at < 1.0
    [note] = resp.json()
    assert note["namespaceName"] == "ykafka.global"
    assert note["notificationId"] > current["notificationId"]
    assert note["messages"]["details"] == {f"{app}+default+ykafka.global": note["notificationId"]}
    fetched = configs(cc, app, "ykafka.global").json()
    assert fetched["configurations"] == {"producer.acks": "all"}


def test_one_poll_watches_many_namespaces_including_ones_not_yet_created(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"g": "1"})
    api.setup(app, "ykafka.cluster.dc-a", {"c": "1"})
    first = cc.poll(app, [{"namespaceName": "ykafka.global", "notificationId": -1},
                               {"namespaceName": "ykafka.cluster.dc-a", "notificationId": -1},
                               {"namespaceName": "ykafka.topic.orders", "notificationId": -1}])
    assert first.status_code == 200
    ids = {n["namespaceName"]: n["notificationId"] for n in first.json()}
    assert set(ids) == {"ykafka.global", "ykafka.cluster.dc-a"}
    watching = [{"namespaceName": "ykafka.global", "notificationId": ids["ykafka.global"]},
                {"namespaceName": "ykafka.cluster.dc-a", "notificationId": ids["ykafka.cluster.dc-a"]},
                {"namespaceName": "ykafka.topic.orders", "notificationId": -1}]
    parked = cc.park(app, watching)
    # the topic namespace does not exist yet: creating it fires nothing, its first release does
    api.setup(app, "ykafka.topic.orders", {"route.cluster": "dc-b"}, publish=False)
    time.sleep(0.2)
    assert parked.result is None
    api.publish(app, "ykafka.topic.orders")
    resp = parked.join()
    assert resp.status_code == 200
    [note] = resp.json()
    assert note["namespaceName"] == "ykafka.topic.orders"
    assert note["notificationId"] > max(ids.values())
    # the next poll with ids up to date for all three is quiet until another release
    watching[2]["notificationId"] = note["notificationId"]
    parked = cc.park(app, watching)
    api.set_item(app, "ykafka.cluster.dc-a", "c", "2")
    api.publish(app, "ykafka.cluster.dc-a")
    [note2] = parked.join().json()
    assert note2["namespaceName"] == "ykafka.cluster.dc-a"
    assert note2["notificationId"] > note["notificationId"]


def test_namespace_case_and_suffix_are_restored_in_the_answer(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    resp = cc.poll(app, [{"namespaceName": "YKafka.Global.properties", "notificationId": -1}])
    [note] = resp.json()
    assert note["namespaceName"] == "YKafka.Global"
    assert note["messages"]["details"] == {f"{app}+default+ykafka.global": note["notificationId"]}


def test_public_namespace_of_another_app_is_served_and_watched(cc: ConfigService, api: OpenApi) -> None:
    owner, client = api.new_app_id("owner"), api.new_app_id("client")
    api.create_app(owner)
    created = api.create_namespace(owner, "shared", public=True)
    assert created["name"] == "infra.shared"  # public namespaces get the org prefix, as in Apollo
    api.set_item(owner, "infra.shared", "timeout", "30")
    api.publish(owner, "infra.shared")
    api.create_app(client)
    body = configs(cc, client, "infra.shared").json()
    assert body["configurations"] == {"timeout": "30"}
    [note] = cc.poll(client, [{"namespaceName": "infra.shared", "notificationId": -1}]).json()
    assert note["messages"]["details"] == {f"{owner}+default+infra.shared": note["notificationId"]}


def test_malformed_notifications_are_400_in_apollo_shape(cc: ConfigService) -> None:
    for raw in ('[{"namespaceName":"a","notificationId":1', "[]", '{"namespaceName":"a"}', '[{"namespaceName":""}]',
                '[{"namespaceName":"a","notificationId":"x"}]', '["a"]'):
        resp = requests.get(cc.url + "/notifications/v2",
                            params={"appId": "x", "cluster": "default", "notifications": raw}, timeout=5)
        assert resp.status_code == 400, raw
        body = resp.json()
        assert set(body) == {"status", "message", "timestamp", "exception"}
        assert body["status"] == 400
        assert body["message"].startswith("invalid notifications format")
        assert raw not in body["message"]  # never the input back
    missing = requests.get(cc.url + "/notifications/v2", params={"cluster": "default", "notifications": "[]"},
                           timeout=5)
    assert missing.status_code == 400
    assert json.loads(missing.text)["status"] == 400


def test_non_properties_namespace_serves_raw_content(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.create_app(app)
    created = api.create_namespace(app, "routes", fmt="json")
    assert created["name"] == "routes.json"
    api.set_item(app, "routes.json", "content", '{"orders": "dc-a"}')
    api.publish(app, "routes.json")
    body = configs(cc, app, "routes.json").json()
    assert body["configurations"] == {"content": '{"orders": "dc-a"}'}
    raw = requests.get(f"{cc.url}/configfiles/raw/{app}/default/routes.json", timeout=5)
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.text == '{"orders": "dc-a"}'


def test_meta_service_discovery_and_stats(cc: ConfigService) -> None:
    [instance] = requests.get(cc.url + "/services/config", params={"appId": "x", "ip": "1.2.3.4"}, timeout=5).json()
    assert instance["appName"] == "APOLLO-CONFIGSERVICE"
    assert instance["homepageUrl"] == cc.url + "/"
    assert requests.get(cc.url + "/services/admin", timeout=5).json()[0]["appName"] == "APOLLO-ADMINSERVICE"
    stats = requests.get(cc.url + "/stats", timeout=5).json()
    assert stats["longPolls"] == 0
    assert stats["namespaces"] > 0


def test_a_poll_may_list_hundreds_of_namespaces(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"k": "v"})
    watching = [{"namespaceName": f"ykafka.topic.some-fairly-long-topic-name-{i}", "notificationId": -1}
                for i in range(400)] + [{"namespaceName": "ykafka.global", "notificationId": -1}]
    resp = cc.poll(app, watching)
    assert len(resp.request.url or "") > 40_000
    assert resp.status_code == 200
    assert [n["namespaceName"] for n in resp.json()] == ["ykafka.global"]


def test_hot_paths_keep_the_guards_and_fall_back_on_anything_else(cc: ConfigService, api: OpenApi) -> None:
    """/configs and /notifications/v2 skip FastAPI's routing (configservice.HotPaths): the query guard still
    runs ahead of them, and a request they do not take (HEAD, a refused poll) is answered by the full app."""
    app = api.new_app_id()
    assert api.setup(app, "hot.ns", {"k": "v"}) is not None
    twice = requests.get(f"{cc.url}/configs/{app}/default/hot.ns?ip=1.2.3.4&ip=5.6.7.8", timeout=5)
    assert twice.status_code == 400 and "'ip' given more than once" in twice.json()["message"]
    poll_twice = requests.get(f"{cc.url}/notifications/v2?appId={app}&appId=x&cluster=default&notifications=[]",
                              timeout=5)
    assert poll_twice.status_code == 400 and "'appId' given more than once" in poll_twice.json()["message"]
    head = requests.head(f"{cc.url}/configs/{app}/default/hot.ns", timeout=5)
    assert head.status_code == 405  # the router's answer: GET only, as before
    assert configs(cc, app, "hot.ns").json()["configurations"] == {"k": "v"}
    assert requests.get(f"{cc.url}/configs/{app}/default/hot.ns/extra", timeout=5).status_code == 404
