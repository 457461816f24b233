"""Rollout plans driven by the MetaServer (issue 29 item 2), with real producers producing throughout and every
message counted on the broker: a harmless change (a rate limit far above the load) goes 5 % -> 25 % -> 100 %
by itself and every client ends on it; a rate limit far below the load at 10 % is rolled back within its
bake window and the other clients never applied it. Bakes are seconds long."""

from __future__ import annotations

import time
from typing import Any

from tests.console_fixtures import wait_reported_topic
from tests.helpers import create_topic, unique, wait_until
from tests.rollout_sim import Steady, ids_in_bands, in_force
from tests.sdk_fixtures import check_stream, read_topic
from tests.support import LocalStack

#: seconds-long bakes on a shared, loaded 2-core machine: one client's p99 swings by tens of milliseconds from
#: one statistics window to the next, so the harmless plans judge latency only above 1 s (errors as usual)
NOISY_HOST = {"p99_floor_ms": 1000}


def _fleet(stack: LocalStack, topic: str, bands: list[tuple[float, float]]) -> tuple[str, list[Steady]]:
    create_topic(stack.clusters["dc-a"], topic, 3)
    app = stack.new_app([topic])
    ids = ids_in_bands(f"ykafka.topic.{topic}", app[0], bands)
    loads = [Steady(stack.client_config(app, **{"ykafka.client.id": cid, "ykafka.metrics.interval.ms": 500,
                                                "ykafka.throttle.max.wait.ms": 50}), topic) for cid in ids]
    wait_reported_topic(stack, app[0], ids, topic)
    return app[0], loads


def _finish(stack: LocalStack, topic: str, loads: list[Steady]) -> None:
    for ld in loads:
        ld.stop()
    sent = sum(ld.sent for ld in loads)
    assert sent > 0 and not any(ld.failed for ld in loads) and sum(ld.delivered for ld in loads) == sent
    assert check_stream(read_topic(stack.clusters["dc-a"], topic, sent), sent)["lost"] == 0


def _plan(stack: LocalStack, body: dict[str, Any]) -> dict[str, Any]:
    resp = stack.admin("POST", "/v1/admin/rollouts", body)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _wait_state(stack: LocalStack, plan_id: int, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        plan = stack.admin("GET", f"/v1/admin/rollouts/{plan_id}").json()
        return plan if plan["state"] in states else None

    return dict(wait_until(done, timeout=timeout, interval=0.3))


def test_a_harmless_change_goes_5_25_100_by_itself_and_every_client_ends_on_it(stack: LocalStack) -> None:
    topic = unique("plan-ok")
    _, loads = _fleet(stack, topic, [(0, 5), (5, 25), (25, 100), (25, 100), (25, 100)])
    first, second = loads[0].client_id, loads[1].client_id
    try:
        plan = _plan(stack, {"scope": f"topic:{topic}", "set": {"producer.rate.limit.msgs": "100000"},
                             "steps": [5, 25, 100], "bake_s": 3, "thresholds": NOISY_HOST})
        seen_before_promote: dict[str, int] = {}

        def at_25() -> bool:
            p = stack.admin("GET", f"/v1/admin/rollouts/{plan['id']}").json()
            if p["step"] == 1 and p["step_started"] is not None:
                seen_before_promote.update({ld.client_id: in_force(ld.producer, topic, "producer.rate.limit.msgs")
                                            for ld in loads})
                return True
            return p["state"] != "running"

        wait_until(at_25, timeout=40, interval=0.2)
        done = _wait_state(stack, plan["id"], ("done", "rolled_back"))
        assert done["state"] == "done", [(d["action"], d["reason"]) for d in done["decisions"]]
        assert [d["action"] for d in done["decisions"]] == ["publish", "advance", "publish", "advance", "promote"]
        assert done["decisions"][0]["evidence"]["canary"] == 1  # 5 % of 5: the first client only
        assert done["decisions"][2]["evidence"]["canary"] == 2  # 25 % of 5: it stays in, the second joins
        advance = done["decisions"][1]["evidence"]
        assert advance["canary"]["clients"] == 1 and advance["control"]["clients"] == 4
        assert advance["canary"]["sends"] > 0 and advance["control"]["sends"] > 0
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.rate.limit.msgs") == 100000 for ld in loads),
                   timeout=20)
        # while at 25 % the two canaries held the change, the two others did not
        assert {cid for cid, v in seen_before_promote.items() if v == 100000} <= {first, second}
        assert [seen_before_promote[ld.client_id] for ld in loads[2:]] == [0, 0, 0]
        current = stack.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()
        assert current["released"]["producer.rate.limit.msgs"] == "100000" and current["gray"] is None
        audit = stack.admin("GET", f"/v1/admin/audit?action=config.rollout&target=ykafka.topic.{topic}").json()
        assert [a["action"] for a in reversed(audit)] == [
            "config.rollout.create", "config.rollout.publish", "config.rollout.advance", "config.rollout.publish",
            "config.rollout.advance", "config.rollout.promote"]
        assert audit[1]["after"]["evidence"]["canary"]["clients"] == 2  # the second advance's figures
    finally:
        _finish(stack, topic, loads)


def test_a_rate_limit_far_below_the_load_at_10_percent_is_rolled_back_within_its_bake(stack: LocalStack) -> None:
    topic = unique("plan-bad")
    _, loads = _fleet(stack, topic, [(0, 10), (50, 100), (50, 100)])
    canary = loads[0]
    try:
        stack.push(f"topic:{topic}", {"producer.linger.ms": "5"})  # the main release every client holds
        plan = _plan(stack, {"scope": f"topic:{topic}", "set": {"producer.rate.limit.msgs": "2"},
                             "steps": [10, 50, 100], "bake_s": 4})
        started = time.monotonic()
        done = _wait_state(stack, plan["id"], ("done", "rolled_back"), timeout=40)
        assert done["state"] == "rolled_back", done["decisions"]
        assert time.monotonic() - started < 4 + 10  # judged when its bake ended, not later
        rollback = done["decisions"][-1]
        assert rollback["action"] == "rollback" and rollback["step"] == 0
        assert "send error rate" in rollback["reason"]
        ev = rollback["evidence"]
        assert ev["canary"]["clients"] == 1 and ev["control"]["clients"] == 2
        assert ev["canary"]["send_error_rate"] > 0.2 and ev["control"]["send_error_rate"] == 0
        assert canary.throttled > 0 and all(ld.throttled == 0 for ld in loads[1:])  # never applied it
        assert stack.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()["gray"] is None
        wait_until(lambda: in_force(canary.producer, topic, "producer.rate.limit.msgs") == 0, timeout=20)
        assert all(in_force(ld.producer, topic, "producer.rate.limit.msgs") == 0 for ld in loads)
    finally:
        _finish(stack, topic, loads)


def test_pause_resume_abort_and_force_are_recorded_and_abort_drops_the_canary(stack: LocalStack) -> None:
    topic = unique("plan-ctl")
    _, loads = _fleet(stack, topic, [(0, 50), (50, 100)])
    try:
        plan = _plan(stack, {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "12"}, "steps": [50, 100],
                             "bake_s": 600, "thresholds": NOISY_HOST})
        wait_until(lambda: stack.admin("GET", f"/v1/admin/rollouts/{plan['id']}").json()["step_started"],
                   timeout=20)
        busy = stack.admin("POST", "/v1/admin/rollouts", {"scope": f"topic:{topic}", "set": {"producer.acks": "1"}})
        assert busy.status_code == 422, busy.text
        for action in ("pause", "resume", "force"):
            resp = stack.admin("POST", f"/v1/admin/rollouts/{plan['id']}/action", {"action": action})
            assert resp.status_code == 200, resp.text
        forced = _wait_state(stack, plan["id"], ("done", "rolled_back"), timeout=30)  # judged at once, not in 600 s
        assert [d["action"] for d in forced["decisions"]][:5] == ["publish", "pause", "resume", "force", "advance"]
        plan = _plan(stack, {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "15"}, "steps": [50, 100],
                             "bake_s": 600})
        wait_until(lambda: stack.admin("GET", f"/v1/admin/rollouts/{plan['id']}").json()["step_started"],
                   timeout=20)
        wait_until(lambda: in_force(loads[0].producer, topic, "producer.linger.ms") == 15, timeout=20)
        resp = stack.admin("POST", f"/v1/admin/rollouts/{plan['id']}/action", {"action": "abort"})
        assert resp.status_code == 200 and resp.json()["state"] == "aborted", resp.text
        wait_until(lambda: in_force(loads[0].producer, topic, "producer.linger.ms") == 12, timeout=20)
        again = stack.admin("POST", f"/v1/admin/rollouts/{plan['id']}/action", {"action": "resume"})
        assert again.status_code == 422
    finally:
        _finish(stack, topic, loads)


def test_a_guard_rule_added_during_a_plan_rolls_its_next_step_back(stack: LocalStack) -> None:
    topic = unique("plan-guard")
    _, loads = _fleet(stack, topic, [(0, 30), (30, 60), (60, 100)])
    shipped = stack.admin("GET", "/v1/admin/guards").json()
    try:
        plan = _plan(stack, {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "40"}, "steps": [30, 60, 100],
                             "bake_s": 600, "thresholds": NOISY_HOST})
        wait_until(lambda: stack.admin("GET", f"/v1/admin/rollouts/{plan['id']}").json()["step_started"],
                   timeout=20)
        rule = ("  - name: linger-cap\n    text: producer.linger.ms at most 30\n"
                "    key: producer.linger.ms\n    max: 30\n")
        assert stack.admin("PUT", "/v1/admin/guards", {"body": shipped["body"] + rule}).status_code == 200
        assert stack.admin("POST", f"/v1/admin/rollouts/{plan['id']}/action", {"action": "force"}).status_code == 200
        done = _wait_state(stack, plan["id"], ("done", "rolled_back", "aborted"), timeout=40)
        assert done["state"] == "rolled_back", [(d["action"], d["reason"]) for d in done["decisions"]]
        assert done["decisions"][-1]["reason"].startswith("refused by guard rules: guard:linger-cap: producer.linger.ms"
                                                          " at most 30: topic ")
        assert stack.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()["gray"] is None
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.linger.ms") == 5 for ld in loads), timeout=20)
    finally:
        stack.admin("PUT", "/v1/admin/guards", {"body": shipped["body"]})
        _finish(stack, topic, loads)
