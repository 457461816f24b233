"""The MetaServer driving a rollout plan is SIGKILLed during a bake: its peer on the same database takes the
drivers' lease and finishes the plan from its database state (issue 29 item 2). Real ykafka producers, given
both MetaServers (``ykafka dev up --replicas 2``), produce throughout and report to whichever answers, so the
bake after the kill is judged on their reports; every message they sent is acknowledged and on the broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.console_fixtures import wait_reported_topic
from tests.helpers import create_topic, unique, wait_until
from tests.rollout_sim import Steady, ids_in_bands, in_force
from tests.sdk_fixtures import check_stream, read_topic
from tests.support import LocalStack, new_stack
from ykafka.devstack import replica_name

#: seconds-long bakes on a shared, loaded 2-core machine: latency is judged only above 1 s (tests/test_rollouts.py)
NOISY_HOST = {"p99_floor_ms": 1000}


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory, tansu_brokers: dict[str, str]) -> Iterator[LocalStack]:
    """Two config services and two MetaServers on one database, as `ykafka dev up --replicas 2` runs them, on the
    session's Tansu broker (only the control plane is started here)."""
    st = new_stack(tmp_path_factory.mktemp("peers"), broker="tansu", replicas=2,
                   external_bootstrap=tansu_brokers["dc-a"])
    try:
        yield st.up()
    finally:
        st.down()


def _get(url: str, path: str, token: str) -> dict[str, Any]:
    resp = requests.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=5)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_a_peer_finishes_the_plan_of_a_metaserver_killed_during_a_bake(peers: LocalStack) -> None:
    st, token = peers, peers.admin_token
    urls = st.cfg.metaserver_urls
    topic = unique("plan-takeover")
    create_topic(st.clusters["dc-a"], topic, 3)
    app = st.new_app([topic])
    ids = ids_in_bands(f"ykafka.topic.{topic}", app[0], [(0, 30), (30, 100), (30, 100)])  # 1 canary at 30 %
    loads = [Steady(st.client_config(app, **{"ykafka.client.id": cid, "ykafka.metrics.interval.ms": 500}), topic)
             for cid in ids]
    try:
        wait_reported_topic(st, app[0], ids, topic)
        plan = st.admin("POST", "/v1/admin/rollouts", {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "9"},
                                                       "steps": [30, 100], "bake_s": 6, "thresholds": NOISY_HOST})
        assert plan.status_code == 201, plan.text
        path = f"/v1/admin/rollouts/{plan.json()['id']}"

        def published() -> dict[str, Any] | None:
            p = _get(urls[1], path, token)
            return p if p["step_started"] else None

        baking = wait_until(published, timeout=20)
        assert baking["state"] == "running" and [d["action"] for d in baking["decisions"]] == ["publish"]
        leases = [_get(url, "/v1/admin/rollouts/driver", token) for url in urls]
        driving = next(i for i, lease in enumerate(leases) if lease["this"] == lease["holder"])
        survivor = urls[1 - driving]
        assert st.stack.kill(replica_name("metaserver", driving)) is not None  # SIGKILL mid-bake: not judged yet
        killed_at = time.time()

        def finished() -> dict[str, Any] | None:
            p = _get(survivor, path, token)
            return p if p["state"] not in ("running", "paused") else None

        done = wait_until(finished, timeout=40, interval=0.3)
        assert done["state"] == "done", [(d["action"], d["reason"]) for d in done["decisions"]]
        assert [d["action"] for d in done["decisions"]] == ["publish", "advance", "promote"]
        advance = done["decisions"][1]
        # judged by the survivor, after the kill, on the real producers' reports: 1 canary against 2 controls
        assert advance["at"] > killed_at and "within thresholds" in advance["reason"], advance
        canary, control = advance["evidence"]["canary"], advance["evidence"]["control"]
        assert canary["clients"] == 1 and control["clients"] == 2, advance["evidence"]
        assert canary["sends"] > 0 and control["sends"] > 0, advance["evidence"]
        lease = _get(survivor, "/v1/admin/rollouts/driver", token)
        assert lease["holder"] == lease["this"]
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.linger.ms") == 9 for ld in loads), timeout=20)
    finally:
        for ld in loads:
            ld.stop()
    sent = sum(ld.sent for ld in loads)
    assert sent > 0 and not any(ld.failed for ld in loads) and sum(ld.delivered for ld in loads) == sent
    counted = check_stream(read_topic(st.clusters["dc-a"], topic, sent), sent)
    assert counted["lost"] == 0 and counted["duplicated"] == 0, counted
