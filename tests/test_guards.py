"""Guard rules (issue 29 item 3): parsing the rules file and judging changes (pure logic), then the real stack:
a change breaking a rule is refused over the admin API with the rule's name and text and nothing is released;
the partitions rule reads the topic's real partition count; rule edits are audited."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from metaserver.domain.hotconfig import validate
from metaserver.rollouts import guards
from tests.helpers import create_topic, unique
from tests.support import LocalStack

RULES = guards.parse_rules(guards.DEFAULT_FILE.read_text())


def _world(topics: dict[str, dict[str, str]] | None = None, glob: dict[str, str] | None = None,
           partitions: int | None = 3) -> guards.World:
    def released(scope: object) -> Mapping[str, str]:
        return dict(glob or {}) if str(scope) == "global" else (topics or {}).get(str(scope).split(":", 1)[-1], {})

    return guards.World(released, lambda: dict(topics or {}), lambda _t, _c: partitions,
                        lambda _t, layer: layer.get("route.cluster") or "dc-a", "dc-a")


def _judge(scope: str, values: dict[str, str], before: dict[str, str] | None = None,
           world: guards.World | None = None) -> dict[str, str]:
    return guards.judge(validate(scope, values, [], None), before or {}, RULES, world or _world())


def test_the_shipped_rules_parse_and_name_the_designs_examples() -> None:
    assert [r.name for r in RULES] == ["p0-acks-all", "p0-idempotence", "p0-linger", "batch-size-bytes",
                                       "keep-two-partitions"]


def test_a_p0_topic_keeps_acks_all_and_linger_at_most_50_a_p2_topic_may_change_both() -> None:
    errors = _judge("topic:pay", {"producer.acks": "1", "producer.linger.ms": "80"}, {"topic.grade": "P0"})
    assert errors == {"guard:p0-acks-all": "P0 topics keep producer.acks=all: topic pay would get producer.acks=1",
                      "guard:p0-linger": "producer.linger.ms is at most 50 on P0 topics: topic pay would get "
                                         "producer.linger.ms=80"}
    assert _judge("topic:logs", {"producer.acks": "1", "producer.linger.ms": "80"}, {"topic.grade": "P2"}) == {}
    assert _judge("topic:pay", {"producer.linger.ms": "50"}, {"topic.grade": "P0"}) == {}


def test_raising_a_topic_to_p0_is_judged_on_the_values_it_already_has() -> None:
    errors = _judge("topic:pay", {"topic.grade": "P0"}, {"producer.idempotence": "false"})
    assert list(errors) == ["guard:p0-idempotence"]


def test_batch_size_as_a_message_count_is_refused_at_any_scope() -> None:
    assert list(_judge("global", {"producer.batch.size": "500"})) == ["guard:batch-size-bytes"]
    assert _judge("global", {"producer.batch.size": "65536"}) == {}


def test_a_global_change_is_judged_on_every_p0_topic_that_does_not_override_the_key() -> None:
    topics = {"pay": {"topic.grade": "P0"}, "ledger": {"topic.grade": "P0", "producer.acks": "all"},
              "logs": {}}
    errors = _judge("global", {"producer.acks": "1"}, world=_world(topics))
    assert errors == {"guard:p0-acks-all": "P0 topics keep producer.acks=all: topic pay would get producer.acks=1"}
    # a topic already outside a rule does not block an unrelated change elsewhere
    topics["pay"]["producer.acks"] = "1"
    assert _judge("global", {"producer.acks": "1"}, world=_world(topics)) == {}


def test_partitions_exclude_must_leave_two_and_an_unreadable_count_refuses() -> None:
    assert _judge("topic:t", {"producer.partitions.exclude": "0"}) == {}
    errors = _judge("topic:t", {"producer.partitions.exclude": "0,1"})
    assert errors["guard:keep-two-partitions"].endswith("leaves 1 of 3 partitions")
    errors = _judge("topic:t", {"producer.partitions.exclude": "0"}, world=_world(partitions=None))
    assert "could not be read" in errors["guard:keep-two-partitions"]
    # a topic its cluster does not have yet (docs/producer.md's first commands): nothing to protect, not refused
    assert _judge("topic:t", {"producer.partitions.exclude": "3"}, world=_world(partitions=0)) == {}


@pytest.mark.parametrize(("text", "where"), [
    ("rules: [{name: x, text: t, key: producer.nope, equals: 1}]", "rules.0"),
    ("rules: [{name: x, text: t, key: producer.acks, equals: '2'}]", "rules.0"),
    ("rules: [{name: x, text: t, key: producer.acks}]", "rules.0"),
    ("rules: [{name: x, text: t, key: producer.acks, equals: all, colour: red}]", "rules.0.colour"),
    ("rules: [{name: x, text: t, key: producer.acks, equals: all}, {name: x, text: u, key: producer.acks, "
     "equals: all}]", "rules"),
    ("rules: [", "line 1"),
])
def test_a_malformed_rule_is_refused_naming_its_place_without_echoing_it(text: str, where: str) -> None:
    with pytest.raises(guards.GuardRulesInvalid) as caught:
        guards.parse_rules(text)
    assert where in caught.value.errors, caught.value.errors
    assert "red" not in str(caught.value)


# --- the real stack ------------------------------------------------------------------------------

def test_the_admin_api_refuses_a_change_breaking_a_rule_and_releases_nothing(stack: LocalStack) -> None:
    topic = unique("guard-pay")
    scope = f"topic:{topic}"
    stack.push(scope, {"topic.grade": "P0", "producer.linger.ms": "5"})
    before = stack.admin("GET", f"/v1/admin/config?scope={scope}").json()
    for dry_run in (True, False):
        resp = stack.admin("POST", "/v1/admin/config", {"scope": scope, "set": {"producer.acks": "1"},
                                                        "dry_run": dry_run})
        assert resp.status_code == 422, resp.text
        assert resp.json() == {"detail": "refused by guard rules", "errors": {
            "guard:p0-acks-all": f"P0 topics keep producer.acks=all: topic {topic} would get producer.acks=1"}}
    after = stack.admin("GET", f"/v1/admin/config?scope={scope}").json()
    assert after["released"] == before["released"] == {"topic.grade": "P0", "producer.linger.ms": "5"}
    assert after["release"] == before["release"]
    # a gray release is judged the same way
    resp = stack.admin("POST", "/v1/admin/config", {"scope": scope, "set": {"producer.linger.ms": "200"},
                                                    "ips": ["10.9.9.9"]})
    assert resp.status_code == 422 and list(resp.json()["errors"]) == ["guard:p0-linger"], resp.text
    assert stack.admin("GET", f"/v1/admin/config?scope={scope}").json()["gray"] is None


def test_partitions_exclude_is_judged_on_the_topics_real_partition_count(stack: LocalStack) -> None:
    topic = unique("guard-parts")
    create_topic(stack.clusters["dc-a"], topic, 3)
    ok = stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{topic}",
                                                  "set": {"producer.partitions.exclude": "2"}})
    assert ok.status_code == 200, ok.text
    resp = stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{topic}",
                                                    "set": {"producer.partitions.exclude": "1,2"}})
    assert resp.status_code == 422, resp.text
    assert resp.json()["errors"]["guard:keep-two-partitions"] == (
        "producer.partitions.exclude leaves at least two partitions to write to: "
        f"topic {topic} would get producer.partitions.exclude=1,2 leaves 1 of 3 partitions")
    assert stack.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()["released"] == {
        "producer.partitions.exclude": "2"}


def test_rule_edits_over_the_admin_api_are_checked_applied_and_audited(stack: LocalStack) -> None:
    shipped = stack.admin("GET", "/v1/admin/guards").json()
    try:
        bad = stack.admin("PUT", "/v1/admin/guards", {"body": "rules: [{name: x, text: t, key: producer.acks}]"})
        assert bad.status_code == 422 and "rules.0" in bad.json()["errors"], bad.text
        assert stack.admin("GET", "/v1/admin/guards").json()["version"] == shipped["version"]
        body = shipped["body"] + ("  - name: no-tiny-linger\n    text: producer.linger.ms at least 1\n"
                                  "    key: producer.linger.ms\n    min: 1\n")
        saved = stack.admin("PUT", "/v1/admin/guards", {"body": body})
        assert saved.status_code == 200 and saved.json()["source"] == "console", saved.text
        assert saved.json()["version"] == shipped["version"] + 1
        resp = stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{unique('guard-new')}",
                                                        "set": {"producer.linger.ms": "0"}, "dry_run": True})
        assert resp.status_code == 422 and list(resp.json()["errors"]) == ["guard:no-tiny-linger"], resp.text
        audit = stack.admin("GET", "/v1/admin/audit?action=guard.rules&limit=1").json()[0]
        assert audit["after"]["version"] == saved.json()["version"]
        assert audit["after"]["rule no-tiny-linger"] == (
            "producer.linger.ms >= 1 on every topic: producer.linger.ms at least 1")
        assert "rule no-tiny-linger" not in audit["before"] and "rule p0-acks-all" in audit["before"]
    finally:
        stack.admin("PUT", "/v1/admin/guards", {"body": shipped["body"]})
