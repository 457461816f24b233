"""An Apollo client written by others (PyPI `apollo-config-client`) works against our service unchanged.

It fetches `/configs`, long-polls `/notifications/v2` and signs with an access key exactly as it does
against a real Apollo. Skipped where the package is not installed (it is not a project dependency).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

if TYPE_CHECKING:
    from tests.cc_fixtures import OpenApi
    from tests.support import ConfigService


def test_apollo_config_client_fetches_watches_and_signs(cc: ConfigService, api: OpenApi, tmp_path: Path) -> None:
    apollo_config = pytest.importorskip("apollo_config")
    app = api.new_app_id()
    api.setup(app, "ykafka.global", {"producer.acks": "all"})
    api.setup(app, "ykafka.topic.orders", {}, publish=False)  # subscribed before its first release
    secret = cc.cli("accesskey", "add", "--app-id", app)
    deadline = time.monotonic() + 5  # the server rescans access keys every second
    while requests.get(f"{cc.url}/configs/{app}/default/ykafka.global", timeout=5).status_code != 401:
        assert time.monotonic() < deadline, "access key never enforced"
        time.sleep(0.1)

    client = apollo_config.ApolloClient(app, cc.url, namespaces=["ykafka.global", "ykafka.topic.orders"],
                                        access_key_secret=secret, cache_dir=str(tmp_path), poll_timeout=10,
                                        poll_interval=0.1)
    changes: list[tuple[str, dict[str, Any]]] = []
    changed = threading.Event()

    def on_change(namespace: str, diff: dict[str, Any]) -> None:
        changes.append((namespace, diff))
        changed.set()

    client.register_callback(on_change)
    client.start()
    try:
        assert client.get_value("producer.acks", namespace="ykafka.global") == "all"
        changed.wait(5)  # the first poll reports ykafka.global's existing release; no diff for it
        changes.clear()
        changed.clear()

        api.set_item(app, "ykafka.topic.orders", "route.cluster", "dc-b")
        api.publish(app, "ykafka.topic.orders")
        assert changed.wait(5), "client never saw the release"
        assert changes == [("ykafka.topic.orders", {"route.cluster": {"old": None, "new": "dc-b"}})]
        assert client.get_value("route.cluster", namespace="ykafka.topic.orders") == "dc-b"

        changes.clear()
        changed.clear()
        api.set_item(app, "ykafka.global", "producer.acks", "1")
        api.publish(app, "ykafka.global")
        assert changed.wait(5)
        assert changes == [("ykafka.global", {"producer.acks": {"old": "all", "new": "1"}})]
    finally:
        client.stop()

    unsigned = apollo_config.ApolloClient(app, cc.url, namespaces=["ykafka.global"], cache_dir=str(tmp_path / "u"))
    with pytest.raises(Exception, match="401"):
        unsigned._fetch_namespace("ykafka.global")
