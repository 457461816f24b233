"""The config service records who holds which release (Apollo's instance views), in batches, pruned after a day."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from metaserver.configcenter.instances import InstanceRecorder
from metaserver.configcenter.readmodel import ReleaseView
from metaserver.configcenter.store import Store
from tests.cc_fixtures import ENV
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


NS = "ykafka.global"
IP_A, IP_B, IP_C = "198.51.100.1", "198.51.100.2", "198.51.100.3"


def _fetch(cc: ConfigService, app: str, ip: str, release_key: str = "-1") -> dict[str, Any]:
    resp = requests.get(f"{cc.url}/configs/{app}/default/{NS}",
                        params={"ip": ip, "dataCenter": "dc-a", "releaseKey": release_key}, timeout=5)
    assert resp.status_code in (200, 304), resp.text
    return resp.json() if resp.status_code == 200 else {}


def test_instances_by_release_namespace_and_not_in(cc: ConfigService, api: OpenApi) -> None:
    app = api.new_app_id("inst")
    first = api.setup(app, NS, {"producer.acks": "all"})
    assert first is not None
    for ip in (IP_A, IP_B, IP_C):
        _fetch(cc, app, ip)
    api.set_item(app, NS, "producer.acks", "1")
    second = api.publish(app, NS)
    _fetch(cc, app, IP_A)  # A picks up the new release; B and C still hold the first one
    assert _fetch(cc, app, IP_A, second["releaseKey"]) == {}  # a 304 is recorded too, release unchanged

    portal = f"/envs/{ENV}/instances"
    by_second = wait_until(lambda: api.ok(api.call("GET", f"{portal}/by-release", releaseId=second["id"]))["content"],
                           timeout=10, message="the batch with A's new release")
    assert [(i["ip"], i["appId"], i["clusterName"], i["dataCenter"]) for i in by_second] == \
        [(IP_A, app, "default", "dc-a")]
    assert by_second[0]["configs"][0]["release"]["releaseKey"] == second["releaseKey"]
    assert by_second[0]["configs"][0]["releaseDeliveryTime"]
    by_first = api.ok(api.call("GET", f"/envs/{ENV}/releases/{first['id']}/instances", page=0, size=1))
    assert by_first["total"] == 2 and by_first["size"] == 1 and len(by_first["content"]) == 1
    page2 = api.ok(api.call("GET", f"/envs/{ENV}/releases/{first['id']}/instances", page=1, size=1))
    assert {by_first["content"][0]["ip"], page2["content"][0]["ip"]} == {IP_B, IP_C}

    listed = api.ok(api.call("GET", f"{portal}/by-namespace", appId=app, clusterName="default", namespaceName=NS))
    held = {i["ip"]: i["configs"][0]["release"]["releaseKey"] for i in listed["content"]}
    assert held == {IP_A: second["releaseKey"], IP_B: first["releaseKey"], IP_C: first["releaseKey"]}
    assert api.ok(api.call("GET", f"{portal}/by-namespace/count", appId=app, clusterName="default",
                           namespaceName=NS)) == 3
    assert api.ok(api.call("GET", f"{api.ns_path(app, NS)}/instances")) == 3

    behind = api.ok(api.call("GET", f"{portal}/by-namespace-and-releases-not-in", appId=app, clusterName="default",
                             namespaceName=NS, releaseIds=str(second["id"])))
    assert sorted(i["ip"] for i in behind) == [IP_B, IP_C]
    also = api.ok(api.call("GET", f"{api.ns_path(app, NS)}/instances_not_in", excludeReleases=f"{second['id']}"))
    assert sorted(i["ip"] for i in also) == [IP_B, IP_C]

    bad = api.call("GET", f"{portal}/by-namespace-and-releases-not-in", appId=app, clusterName="default",
                   namespaceName=NS, releaseIds="x,<y>")
    assert bad.status_code == 400 and "<y>" not in bad.text
    assert api.call("GET", f"{portal}/by-release", releaseId=2**40).status_code == 404


def test_recorder_batches_refreshes_and_prunes(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "cc.db"))
    recorder = InstanceRecorder(store, refresh_s=60)
    release = ReleaseView(1, "20261125-a", "orders", "default", "ykafka.global", {})
    for _ in range(100):  # a hundred fetches of one client: one row, written once
        recorder.served("orders", "default", None, IP_A, [release])
    recorder.polled("orders", "default", None, IP_B, ["ykafka.global"])
    assert recorder.flush() == 1
    assert recorder.flush() == 0
    recorder.served("orders", "default", None, IP_A, [release])  # unchanged within refresh_s: not rewritten
    assert recorder.flush() == 0
    moved = ReleaseView(2, "20261125-b", "orders", "default", "ykafka.global", {})
    recorder.served("orders", "default", None, IP_A, [moved])  # a new release is written at once
    assert recorder.flush() == 1

    def held(s: Any) -> list[tuple[str, str]]:
        from sqlalchemy import select

        from metaserver.configcenter import models as m
        return [(i.ip, c.release_key) for i, c in s.execute(
            select(m.Instance, m.InstanceConfig).join(m.InstanceConfig, m.InstanceConfig.instance_id == m.Instance.id))]

    assert store.read(held) == [(IP_A, "20261125-b")]
    assert recorder.prune() == 0
    assert recorder.prune(now=datetime.now() + timedelta(days=1, minutes=1)) == 3  # A's config, A and B
    assert store.read(held) == []
    store.close()
