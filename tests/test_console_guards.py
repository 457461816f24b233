"""Guard rules in the console (issue 29 item 3), in a real browser against the real stack: an operator's
change breaking a rule is refused at preview and at publish with the rule's name and text while a real
producer keeps producing (nothing released, nothing lost); everyone reads the rules, only admins edit them,
and each edit is audited."""

from __future__ import annotations

from typing import Any

from tests.console_fixtures import Console, Load, wait_reported_topic
from tests.helpers import create_topic, unique
from tests.rollout_sim import in_force
from tests.sdk_fixtures import check_stream, read_topic


def test_a_change_breaking_a_guard_rule_is_refused_in_the_console_and_nothing_is_published(
        console: Console, page: Any) -> None:
    st = console.stack
    topic = unique("guard-console")
    app = st.new_app([topic], [topic], ["*"])
    create_topic(st.clusters["dc-a"], topic, 3)
    st.push(f"topic:{topic}", {"topic.grade": "P0"})
    load = Load(st.client_config(app, **{"ykafka.client.id": f"{app[0]}-g"}), topic).start()
    try:
        wait_reported_topic(st, app[0], [load.client_id], topic)
        released = st.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()
        console.login(page, "operator")
        page.goto(f"{console.url}/console/config?scope=topic:{topic}")
        page.fill("textarea[name=changes]", "producer.acks=1\nproducer.linger.ms=20")
        page.click("#preview-btn")
        refused = page.locator("#form-errors").inner_text()
        assert "Refused, nothing was published" in refused
        assert f"guard:p0-acks-all: P0 topics keep producer.acks=all: topic {topic} would get producer.acks=1" \
            in refused, refused
        assert page.locator("#publish").count() == 0  # no preview to publish
        console.shot(page, "guard-refused")
        # a forged publish of the same change is judged again, and refused
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        resp = page.request.post(f"{console.url}/console/config/publish", form={
            "csrf": csrf, "scope": f"topic:{topic}", "changes": "producer.acks=1", "ips": "", "labels": "",
            "comment": ""})
        assert resp.status == 422 and "guard:p0-acks-all" in resp.text()
        after = st.admin("GET", f"/v1/admin/config?scope=topic:{topic}").json()
        assert after["released"] == released["released"] == {"topic.grade": "P0"}
        assert after["release"] == released["release"]
        assert in_force(load.producer, topic, "producer.acks") == "all"
    finally:
        load.stop()
    assert load.sent > 0 and not load.failed and load.delivered == load.sent
    result = check_stream(read_topic(st.clusters["dc-a"], topic, load.sent), load.sent)
    assert result["lost"] == 0, result


def test_everyone_reads_the_guard_rules_admins_edit_them_and_each_edit_is_audited(
        console: Console, page: Any) -> None:
    shipped = console.stack.admin("GET", "/v1/admin/guards").json()
    try:
        console.login(page, "viewer")
        page.goto(f"{console.url}/console/guards")
        assert page.locator("#guard-rules tr[data-rule]").count() == len(shipped["rules"])
        assert "P0 topics keep producer.acks=all" in page.locator("#guard-rules").inner_text()
        assert page.locator("#guards-form").count() == 0
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        forged = page.request.post(f"{console.url}/console/guards", form={"csrf": csrf, "body": "rules: []"})
        assert forged.status == 403
        page.context.clear_cookies()
        console.login(page, "admin")
        page.goto(f"{console.url}/console/guards")
        page.fill("textarea[name=body]", shipped["body"] + "  - name: x\n    text: t\n    key: producer.nope\n"
                                                          "    min: 1\n")
        page.click("#guards-form button[type=submit]")
        assert "unknown catalog key" in page.locator("#guards-error").inner_text()
        body = shipped["body"] + ("  - name: p0-linger-floor\n    text: producer.linger.ms at least 1 on P0\n"
                                  "    grade: P0\n    key: producer.linger.ms\n    min: 1\n")
        page.fill("textarea[name=body]", body)
        page.click("#guards-form button[type=submit]")
        page.locator("#guards-saved").wait_for()
        assert page.locator("#guard-rules tr[data-rule='p0-linger-floor']").count() == 1
        console.shot(page, "guard-rules")
        page.goto(f"{console.url}/console/audit?operator=console:{console.users['admin']}")
        edit = page.locator("#audit tr[data-action='guard.rules']").first.inner_text()
        assert "rule p0-linger-floor" in edit and "producer.linger.ms >= 1 on grade P0" in edit, edit
    finally:
        console.stack.admin("PUT", "/v1/admin/guards", {"body": shipped["body"]})
