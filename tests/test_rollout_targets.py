"""Gray-release targets (issue 29 item 1): a stable percentage hashed from the client instance's id, combined
with apps, hosts, labels, IPs and versions; real producers on one host each get the release or not by their
own id (the config service serves a rule listing instance labels), nothing lost; the preview splits the
clients reached and names those that cannot honour a key."""

from __future__ import annotations

import uuid

import pytest

from metaserver.rollouts import targets as tg
from tests.console_fixtures import Load, wait_reported_topic
from tests.helpers import create_topic, unique, wait_until
from tests.rollout_sim import in_force
from tests.sdk_fixtures import check_stream, read_topic
from tests.support import LocalStack


@pytest.mark.parametrize("percent", [5, 10, 25, 50])
def test_a_percentage_of_1000_instances_is_within_2_points_and_stable_as_it_grows(percent: float) -> None:
    clients = [{"client_id": f"app-host-{uuid.uuid4().hex}"} for _ in range(1000)]

    def chosen(p: float, population: list[dict[str, str]] = clients, keep: frozenset[str] = frozenset()) -> set[str]:
        return {c["client_id"] for c in tg.pick(population, tg.Targets(percent=p), "ykafka.topic.orders", keep)}

    assert abs(len(chosen(percent)) / 10 - percent) <= 2, len(chosen(percent))
    assert chosen(percent) <= chosen(min(100, percent * 5))  # a client in the 5 % stays in the 25 %
    assert chosen(100) == {c["client_id"] for c in clients}
    # 200 more clients join between two steps: the earlier canaries, kept by the plan, are still in
    grown = clients + [{"client_id": f"late-{uuid.uuid4().hex}"} for _ in range(200)]
    step1 = chosen(percent)
    step2 = chosen(min(100, percent * 5), grown, frozenset(step1))
    assert step1 <= step2 and abs(len(step2) / 12 - min(100, percent * 5)) <= 2


def test_dimensions_combine_with_and_values_within_one_with_or() -> None:
    c = {"client_id": "a-1", "app_id": "pay", "hostname": "h1", "ip": "10.0.0.1", "ykafka_version": "0.1.0",
         "librdkafka_version": "2.6.1", "label": "canary"}
    assert tg.selects(tg.Targets(apps=["pay", "web"], librdkafka=["2.*"], hosts=["h1"]), c)
    assert not tg.selects(tg.Targets(apps=["pay"], librdkafka=["1.*"]), c)
    assert tg.selects(tg.Targets(hosts=["10.0.0.1"], labels=["canary"], ykafka=["0.1.0"]), c)
    old = {**c, "librdkafka_version": "1.4.2", "ykafka_version": None}
    assert tg.cannot_honour(old, ["producer.batch.size", "producer.linger.ms"], per_instance=True) == [
        "ykafka unknown sends no instance id: per-instance targets cannot reach it",
        "producer.batch.size: librdkafka 1.4.2 lacks batch.size (since 1.5.0)"]
    assert tg.cannot_honour(c, ["producer.batch.size"], per_instance=True) == []


def test_bad_targets_are_422_with_field_errors_and_nothing_is_released(stack: LocalStack) -> None:
    scope = f"topic:{unique('tgt-bad')}"
    for targets in ({"percent": 0}, {"percent": 101}, {"apps": ["<x>"]}, {"ips": ["nope"]}, {"colour": "red"}):
        resp = stack.admin("POST", "/v1/admin/config", {"scope": scope, "set": {"producer.linger.ms": "9"},
                                                        "targets": targets})
        assert resp.status_code == 422 and "<x>" not in resp.text and "nope" not in resp.text, resp.text
    resp = stack.admin("POST", "/v1/admin/config", {"scope": scope, "set": {"producer.linger.ms": "9"},
                                                    "targets": {"percent": 50}, "ips": ["10.0.0.1"]})
    assert resp.status_code == 422 and "not both" in resp.json()["errors"]["targets"]
    resp = stack.admin("POST", "/v1/admin/config", {"scope": scope, "set": {"producer.linger.ms": "9"},
                                                    "targets": {"apps": ["no-such-app"]}})
    assert resp.status_code == 422 and "reaches none" in resp.json()["errors"]["targets"]
    assert stack.admin("GET", f"/v1/admin/config?scope={scope}").json()["release"] is None


def test_a_percentage_and_an_app_reach_exactly_the_instances_they_select_on_one_host(stack: LocalStack) -> None:
    topic = unique("tgt-pct")
    create_topic(stack.clusters["dc-a"], topic, 3)
    apps = [stack.new_app([topic]), stack.new_app([topic])]
    ns = f"ykafka.topic.{topic}"
    # ids whose buckets fall on both sides of 50 % for each app: the split is by id, every process on 127.0.0.1
    ids: dict[str, list[str]] = {}
    for app_id, _ in apps:
        picked: list[str] = []
        while len([i for i in picked if tg.bucket(ns, i) < 50]) < 2 or len([i for i in picked
                                                                           if tg.bucket(ns, i) >= 50]) < 1:
            picked.append(f"{app_id}-{uuid.uuid4().hex[:6]}")
        ids[app_id] = [i for i in picked if tg.bucket(ns, i) < 50][:2] + [i for i in picked
                                                                          if tg.bucket(ns, i) >= 50][:1]
    stack.push(f"topic:{topic}", {"producer.linger.ms": "7"})
    loads = [Load(stack.client_config(app, **{"ykafka.client.id": cid, "ykafka.client.ip": "127.0.0.1"}), topic)
             .start() for app in apps for cid in ids[app[0]]]
    try:
        for app_id, _ in apps:
            wait_reported_topic(stack, app_id, ids[app_id], topic)
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.linger.ms") == 7 for ld in loads), timeout=20)
        targets = {"percent": 50, "apps": [apps[0][0]]}
        dry = stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "30"},
                                                       "targets": targets, "dry_run": True})
        assert dry.status_code == 200, dry.text
        reach = dry.json()["reach"]
        want = set(ids[apps[0][0]][:2])
        assert {c["client_id"] for c in reach["clients"]} == want and reach["reached"] == 2
        assert reach["in_scope"] == 6 and reach["by"]["app"] == {apps[0][0]: 2} and reach["unable"] == []
        assert reach["by"]["cluster"] == {"dc-a": 2}
        resp = stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{topic}",
                                                        "set": {"producer.linger.ms": "30"}, "targets": targets})
        assert resp.status_code == 200, resp.text
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.linger.ms") == 30
                               for ld in loads if ld.client_id in want), timeout=20)
        for _ in range(10):  # the others never get it (they fetched the same notification)
            assert [in_force(ld.producer, topic, "producer.linger.ms") for ld in loads
                    if ld.client_id not in want] == [7, 7, 7, 7]
            wait_until(lambda: True, timeout=0.1)
        gray = stack.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()["gray"]
        assert tg.ids_of(gray["labels"]) == want and gray["ips"] == []
    finally:
        for ld in loads:
            ld.stop()
    sent = sum(ld.sent for ld in loads)
    assert sent > 0 and not any(ld.failed for ld in loads) and sum(ld.delivered for ld in loads) == sent
    assert check_stream(read_topic(stack.clusters["dc-a"], topic, sent), sent)["lost"] == 0
