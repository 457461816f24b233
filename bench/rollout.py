"""A three-step rollout plan over 1,000 clients in scope: time from each step's start to every targeted client
reporting "applied", the decision time after each bake, and the MetaServer's CPU per 1,000 clients.

Starts its own config service and MetaServer (SQLite). The clients are simulated (tests/rollout_sim.py): one
long poll for the fleet, then each client fetches with its instance id (``ykafkaInstance``) and reports the
release key it holds, as the SDK does, plus a heartbeat report with growing health counters every second.
Steps 5 % -> 25 % -> 100 %, bake ``--bake`` seconds each. There is no raw confluent-kafka peer for this.

    python bench/rollout.py [--clients 1000] [--bake 5] [--quick]

Last line: RESULT {"clients": ..., "applied_s": [...], "decision_s": [...], "cpu_per_1000_clients_s": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.metaserver_auth import admin, start_server, stop_server  # noqa: E402
from bench.metaserver_clients import group_cpu_s  # noqa: E402
from tests.rollout_sim import SimFleet  # noqa: E402
from tests.support import start_config_service  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--bake", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="200 clients, 2 s bakes (the suite's run)")
    args = parser.parse_args()
    clients, bake = (200, 2.0) if args.quick else (args.clients, args.bake)
    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    cc = start_config_service(work / "cc", longpoll_timeout=30)
    import os

    os.environ["YKAFKA_MS_CONFIGCENTER_URL"] = cc.url
    os.environ["YKAFKA_MS_CONFIGCENTER_OPENAPI_TOKEN"] = cc.token
    os.environ["YKAFKA_MS_RENEW_INTERVAL"] = "2"
    proc, port = start_server(f"sqlite:///{work / 'ms.db'}", 1)
    url = f"http://127.0.0.1:{port}"
    fleet = None
    try:
        topic = f"orders.{uuid.uuid4().hex[:6]}"
        app_id = f"app-{uuid.uuid4().hex[:6]}"
        created = admin(port, "POST", "/v1/admin/apps", {"app_id": app_id})
        admin(port, "PUT", f"/v1/admin/apps/{app_id}/acl", {"produce": [topic], "consume": [], "group": []})
        admin(port, "POST", "/v1/admin/config", {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "5"}})
        fleet = SimFleet(url, cc.url, "ykafka", app_id, created["secret"], topic,
                         [f"{app_id}-{i:05d}" for i in range(clients)], beat_s=1.0, workers=8).start()
        deadline = time.time() + 120
        while len(admin(port, "GET", f"/v1/admin/clients?app={app_id}&online=true")) < clients:
            if time.time() > deadline:
                raise RuntimeError("the fleet never reported")
            time.sleep(0.5)
        cpu0, t0 = group_cpu_s(proc.pid), time.time()
        plan = admin(port, "POST", "/v1/admin/rollouts", {"scope": f"topic:{topic}",
                                                           "set": {"producer.linger.ms": "20"},
                                                           "steps": [5, 25, 100], "bake_s": bake})
        applied_s: list[float] = []
        decision_s: list[float] = []
        seen = 0
        while True:
            p: dict[str, Any] = admin(port, "GET", f"/v1/admin/rollouts/{plan['id']}")
            decisions = p["decisions"]
            for d in decisions[seen:]:
                if d["action"] in ("publish", "promote"):
                    target = set(p["canary"]) if d["action"] == "publish" else {c.client_id for c in fleet.clients}
                    applied_s.append(_applied(fleet, target, d["at"]))
                elif d["action"] in ("advance", "rollback"):
                    started = next(x["at"] for x in reversed(decisions[:decisions.index(d)])
                                   if x["action"] == "publish")
                    decision_s.append(round(d["at"] - started - bake, 3))
            seen = len(decisions)
            if p["state"] not in ("running", "paused"):
                break
            if time.time() - t0 > 300:
                raise RuntimeError("the plan did not finish")
            time.sleep(0.2)
        applied_s[-1] = _applied(fleet, {c.client_id for c in fleet.clients}, decisions[-1]["at"], wait_s=60)
        elapsed = time.time() - t0
        cpu = group_cpu_s(proc.pid) - cpu0
        result = {"clients": clients, "steps": [5, 25, 100], "bake_s": bake, "state": p["state"],
                  "reasons": [d["reason"] for d in decisions],
                  "canaries": [d["evidence"]["canary"] for d in decisions if d["action"] == "publish"],
                  "applied_s": applied_s, "decision_s": decision_s, "plan_s": round(elapsed, 2),
                  "metaserver_cpu_s": round(cpu, 2),
                  "cpu_per_1000_clients_s": round(cpu * 1000 / clients, 2),
                  "cpu_share": round(cpu / elapsed, 3), "reports": fleet.reports}
        print(json.dumps(result, indent=2))
        print("RESULT " + json.dumps(result))
    finally:
        if fleet is not None:
            fleet.stop()
        stop_server(proc)
        cc.stop()


def _applied(fleet: SimFleet, target: set[str], since: float, wait_s: float = 60.0) -> float:
    """Seconds from ``since`` until every client in ``target`` first held the release key it holds now."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        times = [c.applied_at.get(c.held) for c in fleet.clients if c.client_id in target]
        if times and all(t is not None and t >= since - 0.05 for t in times):
            return round(max(t for t in times if t is not None) - since, 3)
        time.sleep(0.1)
    return -1.0


if __name__ == "__main__":
    main()
