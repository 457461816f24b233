"""Everything the config center knows survives a restart on the same SQLite file."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import requests

from metaserver.configcenter.signature import build_headers

if TYPE_CHECKING:
    from tests.support import ConfigService


NS = "ykafka.topic.orders"


def test_data_survives_a_restart(cc_factory: Callable[..., ConfigService]) -> None:
    from tests.cc_fixtures import OpenApi

    first = cc_factory()
    api = OpenApi(first.url)
    api.setup("ykafka", NS, {"route.cluster": "dc-a"})
    api.set_item("ykafka", NS, "route.cluster", "dc-b")
    api.publish("ykafka", NS)
    path = api.ns_path("ykafka", NS)
    branch = api.ok(api.call("POST", f"{path}/branches", operator="ops"))["clusterName"]
    api.ok(api.call("PUT", f"{path}/branches/{branch}/items/route.cluster",
                    {"key": "route.cluster", "value": "dc-c", "dataChangeCreatedBy": "ops"}, createIfNotExists="true"))
    api.ok(api.call("PUT", f"{path}/branches/{branch}/rules",
                    {"ruleItems": [{"clientAppId": "ykafka", "clientIpList": ["10.1.1.1"]}]}, operator="ops"))
    api.ok(api.call("POST", f"{path}/branches/{branch}/releases", {"releaseTitle": "g", "releasedBy": "ops"}))
    cli_token = first.cli("token", "create")
    secret = first.cli("accesskey", "add", "--app-id", "guarded")
    api.setup("guarded", "application", {"g": "1"})

    before = requests.get(f"{first.url}/configs/ykafka/default/{NS}", timeout=5).json()
    [note_before] = first.poll("ykafka", [{"namespaceName": NS, "notificationId": -1}]).json()
    first.stop()

    second = cc_factory(db=first.db)
    assert second.port != first.port
    # start-up reads every namespace in a few set queries; it must see exactly what reading each one sees
    from metaserver.configcenter.store import Store

    store = Store(first.database)
    try:
        states, _ = store.load_all()
        with store._sessions() as session:
            one_by_one = {pair: store.load_state(session, *pair) for pair in states}
        assert states == one_by_one and states[("ykafka", NS)].gray and states[("ykafka", NS)].notifications
    finally:
        store.close()
    after = requests.get(f"{second.url}/configs/ykafka/default/{NS}", timeout=5)
    assert after.json() == before
    assert after.json()["configurations"] == {"route.cluster": "dc-b"}
    assert requests.get(f"{second.url}/configs/ykafka/default/{NS}", params={"releaseKey": before["releaseKey"]},
                        timeout=5).status_code == 304
    gray = requests.get(f"{second.url}/configs/ykafka/default/{NS}", params={"ip": "10.1.1.1"}, timeout=5).json()
    assert gray["configurations"] == {"route.cluster": "dc-c"}
    [note_after] = second.poll("ykafka", [{"namespaceName": NS, "notificationId": -1}]).json()
    assert note_after == note_before
    quiet = second.poll("ykafka", [{"namespaceName": NS, "notificationId": note_before["notificationId"]}])
    assert quiet.status_code == 304

    # credentials persisted too
    assert requests.get(second.url + "/openapi/v1/apps", headers={"Authorization": cli_token},
                        timeout=5).status_code == 200
    guarded = "/configs/guarded/default/application"
    assert requests.get(second.url + guarded, timeout=5).status_code == 401
    signed = requests.get(second.url + guarded, headers=build_headers("guarded", guarded, secret), timeout=5)
    assert signed.json()["configurations"] == {"g": "1"}

    # notification ids keep increasing after the restart, and the restarted server wakes polls
    api2 = OpenApi(second.url)
    parked = second.park("ykafka", [{"namespaceName": NS, "notificationId": note_before["notificationId"]}])
    api2.set_item("ykafka", NS, "route.cluster", "dc-a")
    start = time.monotonic()
    api2.publish("ykafka", NS)
    [woken] = parked.join().json()
    assert parked.answered_at - start < 1.0
    assert woken["notificationId"] > note_before["notificationId"]
