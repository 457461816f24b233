"""The MetaServer driving a rollout plan is SIGKILLed during a bake: its peer on the same database takes the
drivers' lease and finishes the plan from its database state (issue 29 item 2). Simulated clients (fetching
with their instance id and reporting over HTTP, tests/rollout_sim.py) report to both MetaServers."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import requests

from tests.helpers import wait_until
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, new_app
from tests.rollout_sim import SimFleet

H = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def test_a_peer_finishes_the_plan_of_a_metaserver_killed_during_a_bake(
        ms_factory: Callable[..., MetaServer], tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    a = ms_factory(db_url=db_url)
    b = ms_factory(db_url=db_url, apollo_app_id=a.apollo_app_id)
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    app = new_app(a, acl={"produce": [topic], "consume": [], "group": []})
    assert a.configcenter_url is not None
    fleet = SimFleet(f"{a.url},{b.url}", a.configcenter_url, a.apollo_app_id, app.app_id, app.secret, topic,
                     [f"sim-{i}-{uuid.uuid4().hex[:6]}" for i in range(20)], beat_s=0.5).start()
    try:
        wait_until(lambda: len(requests.get(f"{a.url}/v1/admin/clients?app={app.app_id}&online=true", headers=H,
                                            timeout=5).json()) == 20, timeout=20)
        resp = requests.post(f"{a.url}/v1/admin/rollouts", headers=H, timeout=10, json={
            "scope": f"topic:{topic}", "set": {"producer.linger.ms": "9"}, "steps": [30, 100], "bake_s": 6})
        assert resp.status_code == 201, resp.text
        plan_id = resp.json()["id"]

        def published() -> dict | None:
            p = requests.get(f"{b.url}/v1/admin/rollouts/{plan_id}", headers=H, timeout=5).json()
            return p if p["step_started"] else None

        baking = wait_until(published, timeout=20)
        assert baking["state"] == "running" and baking["decisions"][0]["action"] == "publish"
        states = {s.url: requests.get(f"{s.url}/v1/admin/rollouts/driver", headers=H, timeout=5).json()
                  for s in (a, b)}
        driving = next(s for s in (a, b) if states[s.url]["this"] == states[s.url]["holder"])
        survivor = b if driving is a else a
        assert driving.proc.proc is not None
        os.killpg(driving.proc.proc.pid, signal.SIGKILL)  # mid-bake: the step is out, not judged yet
        driving.proc.proc.wait(timeout=10)
        driving.proc.proc = None
        killed_at = time.time()

        def finished() -> dict | None:
            p = requests.get(f"{survivor.url}/v1/admin/rollouts/{plan_id}", headers=H, timeout=5).json()
            return p if p["state"] not in ("running", "paused") else None

        done = wait_until(finished, timeout=40, interval=0.3)
        assert done["state"] == "done", [(d["action"], d["reason"]) for d in done["decisions"]]
        assert [d["action"] for d in done["decisions"]] == ["publish", "advance", "publish", "promote"] or \
            [d["action"] for d in done["decisions"]] == ["publish", "advance", "promote"]
        advance = next(d for d in done["decisions"] if d["action"] == "advance")
        assert advance["at"] > killed_at and advance["evidence"]["canary"]["clients"] >= 1
        lease = requests.get(f"{survivor.url}/v1/admin/rollouts/driver", headers=H, timeout=5).json()
        assert lease["holder"] == lease["this"]
        wait_until(lambda: all(fleet.values.get(c.client_id, {}).get("producer.linger.ms") == "9"
                               for c in fleet.clients), timeout=20)
    finally:
        fleet.stop()
