"""Hot-config push through the MetaServer admin API into the embedded config center (real HTTP both ways).

Covers: the pushed value is served by ``/configs`` and wakes a ``/notifications/v2`` long poll; a rejected
value never reaches the config center; dry run; read-back; rollback; gray release to client IPs and merge.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

import requests  # noqa: E402

from tests.ms_fixtures import OPENAPI_TOKEN, MetaServer  # noqa: E402
from ykafka.admin.client import AdminError  # noqa: E402


def _topic() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}"


def configs(ms: MetaServer, namespace: str, ip: str | None = None) -> requests.Response:
    params = {"ip": ip} if ip else None
    return requests.get(f"{ms.configcenter_url}/configs/{ms.apollo_app_id}/default/{namespace}", params=params,
                        timeout=5)


def openapi_items(ms: MetaServer, namespace: str) -> dict[str, str]:
    url = (f"{ms.configcenter_url}/openapi/v1/envs/DEV/apps/{ms.apollo_app_id}/clusters/default/namespaces/"
           f"{namespace}/items")
    response = requests.get(url, headers={"Authorization": OPENAPI_TOKEN}, timeout=5)
    if response.status_code == 404:
        return {}
    data = response.json()
    rows = data["content"] if isinstance(data, dict) else data
    return {row["key"]: row["value"] for row in rows}


def poll(ms: MetaServer, namespace: str, notification_id: int, timeout: float = 10) -> requests.Response:
    notifications = json.dumps([{"namespaceName": namespace, "notificationId": notification_id}])
    return requests.get(f"{ms.configcenter_url}/notifications/v2",
                        params={"appId": ms.apollo_app_id, "cluster": "default", "notifications": notifications},
                        timeout=timeout)


def test_push_is_served_and_wakes_long_poll(ms: MetaServer) -> None:
    admin = ms.admin(operator="carol")
    topic = _topic()
    namespace = f"ykafka.topic.{topic}"
    first = admin.push_config(f"topic:{topic}", {"producer.acks": "1", "producer.linger.ms": 20})
    assert first["namespace"] == namespace
    assert first["changes"] == [{"key": "producer.acks", "before": None, "after": "1"},
                                {"key": "producer.linger.ms", "before": None, "after": "20"}]
    served = configs(ms, namespace).json()
    assert served["configurations"] == {"producer.acks": "1", "producer.linger.ms": "20"}
    # learn the current notification id (answers at once), then hold a poll and push a change
    initial = poll(ms, namespace, -1)
    assert initial.status_code == 200
    current_id = initial.json()[0]["notificationId"]
    result: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: result.update(response=poll(ms, namespace, current_id)))
    waiter.start()
    threading.Event().wait(0.3)
    admin.push_config(f"topic:{topic}", {"producer.acks": "-1"}, delete=["producer.linger.ms"])
    waiter.join(timeout=15)
    woke = result["response"]
    assert woke.status_code == 200
    assert woke.json()[0]["namespaceName"] == namespace and woke.json()[0]["notificationId"] > current_id
    assert configs(ms, namespace).json()["configurations"] == {"producer.acks": "all"}  # canonical form of -1
    audit = admin.audit(target=namespace)
    assert [(r["operator"], r["action"]) for r in audit] == [("carol", "config.set"), ("carol", "config.set")]
    assert audit[0]["before"] == {"producer.acks": "1", "producer.linger.ms": "20"}
    assert audit[0]["after"]["values"] == {"producer.acks": "all", "producer.linger.ms": None}


def test_rejected_value_never_reaches_config_center(ms: MetaServer) -> None:
    admin = ms.admin()
    topic = _topic()
    namespace = f"ykafka.topic.{topic}"
    admin.push_config(f"topic:{topic}", {"producer.acks": "1"})
    with pytest.raises(AdminError) as err:
        admin.push_config(f"topic:{topic}", {"producer.acks": "2", "producer.linger.ms": "5",
                                             "consumer.workers": "0", "no.such.key": "x", "auth.enabled": "false"})
    assert err.value.status == 422
    assert set(err.value.errors) == {"producer.acks", "consumer.workers", "no.such.key", "auth.enabled"}
    assert "must be one of 0, 1, all" in err.value.errors["producer.acks"]
    assert "security switch" in err.value.errors["auth.enabled"]  # only PUT /v1/admin/security changes it
    # nothing written, not even the valid key pushed alongside
    assert openapi_items(ms, namespace) == {"producer.acks": "1"}
    assert configs(ms, namespace).json()["configurations"] == {"producer.acks": "1"}
    with pytest.raises(AdminError) as bad_scope:
        admin.push_config("topics:x", {"producer.acks": "1"})
    assert bad_scope.value.status == 422 and "scope" in bad_scope.value.errors
    assert len(admin.audit(target=namespace)) == 1  # only the accepted first push


def test_dry_run_diffs_and_writes_nothing(ms: MetaServer) -> None:
    admin = ms.admin()
    topic = _topic()
    namespace = f"ykafka.topic.{topic}"
    admin.push_config(f"topic:{topic}", {"producer.acks": "1", "trace.enabled": "true"})
    dry = admin.push_config(f"topic:{topic}", {"producer.acks": "0", "trace.enabled": "yes"},
                            delete=["producer.compression"], dry_run=True)
    assert dry["dry_run"] is True
    # trace.enabled "yes" renders to "true": unchanged, so not in the diff
    assert dry["changes"] == [{"key": "producer.acks", "before": "1", "after": "0"}]
    assert configs(ms, namespace).json()["configurations"] == {"producer.acks": "1", "trace.enabled": "true"}
    assert len(admin.audit(target=namespace)) == 1


def test_get_and_rollback(ms: MetaServer) -> None:
    admin = ms.admin()
    topic = _topic()
    scope = f"topic:{topic}"
    admin.push_config(scope, {"producer.acks": "1"})
    admin.push_config(scope, {"producer.acks": "0", "producer.compression": "zstd"})
    current = admin.get_config(scope)
    assert current["released"] == {"producer.acks": "0", "producer.compression": "zstd"}
    assert current["gray"] is None and current["release"]["id"] is not None
    rolled = admin.rollback_config(scope)
    assert rolled["released"] == {"producer.acks": "1"}
    assert configs(ms, f"ykafka.topic.{topic}").json()["configurations"] == {"producer.acks": "1"}
    assert admin.audit(target=f"ykafka.topic.{topic}")[0]["action"] == "config.rollback"
    with pytest.raises(AdminError) as err:
        admin.rollback_config(f"topic:{_topic()}")
    assert err.value.status == 422


def test_gray_release_to_client_ips_then_merge(ms: MetaServer) -> None:
    admin = ms.admin()
    group = f"billing-{uuid.uuid4().hex[:6]}"
    scope = f"group:{group}"
    namespace = f"ykafka.group.{group}"
    admin.push_config(scope, {"consumer.workers": "4"})
    gray = admin.push_config(scope, {"consumer.rate.limit.msgs": "10"}, ips=["198.51.100.7"])
    assert gray["gray"]["ips"] == ["198.51.100.7"]
    assert configs(ms, namespace, ip="198.51.100.7").json()["configurations"] == {
        "consumer.workers": "4", "consumer.rate.limit.msgs": "10"}
    assert configs(ms, namespace, ip="198.51.100.8").json()["configurations"] == {"consumer.workers": "4"}
    view = admin.get_config(scope)
    assert view["released"] == {"consumer.workers": "4"}
    assert view["gray"]["ips"] == ["198.51.100.7"]
    assert view["gray"]["released"]["consumer.rate.limit.msgs"] == "10"
    with pytest.raises(AdminError) as bad_ip:
        admin.push_config(scope, {"consumer.workers": "2"}, ips=["not-an-ip"])
    assert bad_ip.value.status == 422 and "ips" in bad_ip.value.errors
    merged = admin.merge_gray(scope)
    assert merged["released"] == {"consumer.workers": "4", "consumer.rate.limit.msgs": "10"}
    assert merged["gray"] is None
    assert configs(ms, namespace, ip="198.51.100.8").json()["configurations"] == merged["released"]
    actions = [r["action"] for r in admin.audit(target=namespace)]
    assert actions == ["config.gray_merge", "config.gray", "config.set"]


def test_gray_abandon(ms: MetaServer) -> None:
    admin = ms.admin()
    topic = _topic()
    scope = f"topic:{topic}"
    admin.push_config(scope, {"producer.rate.limit.msgs": "100"}, ips=["198.51.100.9"])  # no main release yet
    namespace = f"ykafka.topic.{topic}"
    assert configs(ms, namespace, ip="198.51.100.9").json()["configurations"] == {"producer.rate.limit.msgs": "100"}
    admin.abandon_gray(scope)
    assert admin.get_config(scope)["gray"] is None
    assert configs(ms, namespace, ip="198.51.100.9").json()["configurations"] == {}


def test_openapi_adapter_reads_every_page_of_items(ms: MetaServer) -> None:
    from metaserver.domain.apollo import ApolloOpenApi

    assert ms.configcenter_url is not None
    api = ApolloOpenApi(ms.configcenter_url, OPENAPI_TOKEN, app_id=ms.apollo_app_id)
    topic = _topic()
    ms.admin().push_config(f"topic:{topic}", {"producer.acks": "1"})  # creates app + namespace
    namespace = f"ykafka.topic.{topic}"
    for i in range(620):
        api.set_item(namespace, f"extra.{i:04d}", str(i))
    items = api.items(namespace)
    assert len(items) == 621
    assert items["extra.0619"] == "619" and items["producer.acks"] == "1"
