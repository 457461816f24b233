"""Alert notifications configured in the console (issue 30 item 2), in a real browser against the real stack:
an admin adds channels pointing at a local HTTP receiver and a real SMTP server (aiosmtpd) and a route, and an
alert the pipeline raises afterwards reaches both, then resolves (the pipeline reads the console's section from
the MetaServer); secrets are masked on every page and kept when the masked form is saved back; a bad edit is
refused with the pipeline's own reason and nothing is saved; a viewer reads but cannot edit; a silence added
on the page holds the next alert back; every edit is audited."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pipeline.alerts import Alert, AlertConfig, AlertManager
from pipeline.store import Store
from tests.console_fixtures import Console
from tests.helpers import unique
from tests.notify_fixtures import Mailbox, Receiver

SLACK_TOKEN, SMTP_PASSWORD = "T0SECRET/B0SECRET/xoxbSECRETTOKEN", "smtp-pass-SECRET"


def test_channels_routes_and_silences_edited_in_the_console_drive_the_pipelines_notifications(
        console: Console, page: Any, receiver: Receiver, mailbox: tuple[Mailbox, int], tmp_path: Path) -> None:
    st = console.stack
    box, smtp_port = mailbox
    shipped = st.admin("GET", "/v1/admin/notify?reveal=true").json()
    topic, quiet = unique("notify-console"), unique("notify-quiet")
    section = (f"channels:\n  oncall:\n    type: webhook\n    url: {receiver.url}/oncall\n"
               f"  team-slack:\n    type: slack\n    url: https://hooks.slack.com/services/{SLACK_TOKEN}\n"
               f"  mail:\n    type: email\n    smtp: 127.0.0.1:2525\n    from: ykafka@example.com\n"
               f"    to: [oncall@example.com]\n    username: ykafka\n    password: {SMTP_PASSWORD}\n"
               f"  oncall-mail:\n    type: email\n    smtp: 127.0.0.1:{smtp_port}\n    from: ykafka@example.com\n"
               f"    to: oncall@example.com\n"
               f"routes:\n  - match: {{topic: 'notify-*'}}\n    channels: [oncall, oncall-mail]\n")
    pipeline = AlertManager(Store(str(tmp_path / "store")), AlertConfig(sinks={
        "kafka": False, "metaserver": console.url, "metaserver_token": st.admin_token}), cluster="dc-a")
    try:
        console.login(page, "admin")
        page.goto(f"{console.url}/console/notifications")
        page.fill("#notify-form textarea[name=body]", section)
        page.click("#notify-form button[type=submit]")
        page.locator("#notify-saved").wait_for()
        assert page.locator("#notify-channels tr[data-channel]").count() == 4
        html = page.content()
        assert "SECRET" not in html, "a secret is shown"
        assert "https://hooks.slack.com/services/****" in page.locator("#notify-channels").inner_text()

        # a bad edit: refused with the pipeline's own reason, nothing saved; the refused text is not echoed
        version = st.admin("GET", "/v1/admin/notify").json()["version"]
        page.fill("#notify-form textarea[name=body]", section + "  - match: {level: ERR}\n    channels: [pager]\n")
        page.click("#notify-form button[type=submit]")
        assert "route 2: channels must name configured channels" in page.locator("#notify-error").inner_text()
        assert "SECRET" not in page.content()
        assert "- pager" in page.locator("#notify-form textarea").input_value()  # the edit kept to fix, masked
        assert st.admin("GET", "/v1/admin/notify").json()["version"] == version

        # saving the masked form back keeps every secret (the pipeline gets them in clear)
        page.goto(f"{console.url}/console/notifications")
        page.click("#notify-form button[type=submit]")
        page.locator("#notify-saved").wait_for()
        clear = st.admin("GET", "/v1/admin/notify?reveal=true").json()["config"]["channels"]
        assert clear["team-slack"]["url"].endswith(SLACK_TOKEN) and clear["mail"]["password"] == SMTP_PASSWORD

        # an alert raised afterwards reaches the receiver, through the console's route
        now = dt.datetime.now(dt.UTC)
        pipeline.process([Alert("consumer-lag", "ERR", "commits froze while the lag grew", {"lag": [5, 9]},
                                topic=topic, group="billing")], ["consumer-lag"], now)
        (got,) = receiver.got["/oncall"]
        assert (got["rule"], got["topic"], got["status"], got["cluster"]) == ("consumer-lag", topic, "firing", "dc-a")

        # a silence added on the page holds the next alert back
        page.fill("#silence-form input[name=topic]", quiet)
        page.fill("#silence-form input[name=hours]", "1")
        page.fill("#silence-form input[name=comment]", "planned backfill, OPS-7")
        page.click("#silence-form button[type=submit]")
        page.locator("#notify-saved").wait_for()
        assert page.locator("#notify-silences tr[data-active=yes]").count() >= 1
        console.shot(page, "notifications")
        pipeline.process([Alert("consumer-lag", "ERR", "stalled", {}, topic=quiet, group="batch")],
                         ["consumer-lag"], now + dt.timedelta(minutes=1))
        assert [b["topic"] for b in receiver.got["/oncall"]] == [topic, topic]  # the first, then its "resolved"
        assert [b["status"] for b in receiver.got["/oncall"]] == ["firing", "resolved"]
        assert [m["Subject"].split()[0] for m in box.messages] == ["[ERR]", "RESOLVED"]
        assert all(topic in m["Subject"] for m in box.messages)
        state = json.loads((tmp_path / "store" / "_state" / "notify.json").read_text())["deliveries"]
        held = [d for d in state.values() if d["alert"]["topic"] == quiet]
        assert [(d["state"], d["silence"]) for d in held] == [("silenced", "planned backfill, OPS-7")] * 2

        # each edit audited, secrets masked there too
        audit = st.admin("GET", f"/v1/admin/audit?operator=console:{console.users['admin']}").json()
        actions = [a["action"] for a in audit if a["target"] == "notifications"]
        assert actions.count("notify.config") == 2 and actions.count("notify.silence") == 1, actions
        assert "SECRET" not in json.dumps(audit)

        # a viewer reads the page (masked) but cannot edit
        page.context.clear_cookies()
        console.login(page, "viewer")
        page.goto(f"{console.url}/console/notifications")
        assert page.locator("#notify-channels tr[data-channel='oncall']").count() == 1
        assert page.locator("#notify-form").count() == page.locator("#silence-form").count() == 0
        assert "SECRET" not in page.content()
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        for path, form in (("", {"body": "channels: {}"}), ("/silence", {"topic": "*", "hours": "1"})):
            forged = page.request.post(f"{console.url}/console/notifications{path}", form={"csrf": csrf, **form})
            assert forged.status == 403
        assert st.admin("GET", "/v1/admin/notify").json()["version"] == version + 2
    finally:
        st.admin("PUT", "/v1/admin/notify", {"body": json.dumps(shipped["config"])})


def test_the_admin_api_masks_secrets_and_refuses_a_bad_section_with_the_reason(
        console: Console, receiver: Receiver, tmp_path: Path) -> None:
    st = console.stack
    shipped = st.admin("GET", "/v1/admin/notify?reveal=true").json()
    try:
        bad = st.admin("PUT", "/v1/admin/notify", {"body": "channels: {x: {type: pager}}"})
        assert bad.status_code == 422
        assert bad.json()["detail"] == "channel x: type is one of webhook, slack, dingtalk, feishu, email"
        odd = st.admin("PUT", "/v1/admin/notify", {"body": "routes: [{channels: [{a: 1}]}]"})
        assert odd.status_code == 422 and odd.json()["detail"] == "route 1: channels must name configured channels"
        ding = "https://oapi.dingtalk.com/robot/send?access_token=SECRETTOKEN"
        ok = st.admin("PUT", "/v1/admin/notify", {"body": f"channels: {{ding: {{type: dingtalk, url: '{ding}'}}}}"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["config"]["channels"]["ding"]["url"] == "https://oapi.dingtalk.com/robot/****?access_token=****"
        assert "SECRET" not in ok.text
        # a masked value left where there is nothing to restore is refused, not stored
        renamed = ok.json()["body"].replace("ding:", "ding2:")
        refused = st.admin("PUT", "/v1/admin/notify", {"body": renamed})
        assert refused.status_code == 422 and refused.json()["detail"] == (
            "channel ding2: url is masked; type it in full (secrets are not shown)")
        assert st.admin("GET", "/v1/admin/notify?reveal=true").json()["config"]["channels"]["ding"]["url"] == ding

        # a channel that is down, fixed on the MetaServer: the pending notification's retry goes to the fixed URL
        hook = ("channels: {{hook: {{type: webhook, url: '{}'}}}}\nroutes: [{{channels: [hook]}}]\n"
                "retry: {{backoff_s: 0}}\n")
        assert st.admin("PUT", "/v1/admin/notify", {"body": hook.format(receiver.url + "/down")}).status_code == 200
        receiver.fail["/down"] = 1
        pipeline = AlertManager(Store(str(tmp_path / "store")), AlertConfig(sinks={
            "kafka": False, "metaserver": console.url, "metaserver_token": st.admin_token}))
        lag = Alert("consumer-lag", "WARN", "growing", {}, topic=unique("notify-retry"))
        now = dt.datetime.now(dt.UTC)
        pipeline.process([lag], ["consumer-lag"], now)
        assert "/down" not in receiver.got
        assert st.admin("PUT", "/v1/admin/notify", {"body": hook.format(receiver.url + "/fixed")}).status_code == 200
        pipeline.process([lag], ["consumer-lag"], now)  # nothing new: only the retry, with the section in force
        assert [b["reason"] for b in receiver.got["/fixed"]] == ["growing"] and "/down" not in receiver.got
    finally:
        st.admin("PUT", "/v1/admin/notify", {"body": json.dumps(shipped["config"])})


def test_a_webhook_url_is_shown_without_anything_that_may_be_its_token() -> None:
    from metaserver.domain.notifications import mask_url

    cases = {
        "http://127.0.0.1:8080/oncall": "http://127.0.0.1:8080/oncall",  # a word: the kind of endpoint
        "https://hooks.slack.com/services/T0/B0/xyz": "https://hooks.slack.com/services/****",
        "https://example.com/3f9a1c0d7e2b44aa": "https://example.com/****",  # the token is the only segment
        "https://example.com/averyveryverylongsegmentname": "https://example.com/****",
        "https://u:pw@example.com/hook?token=abc&x=1": "https://u:****@example.com/hook?token=****&x=****",
        "https://example.com": "https://example.com",
        "http://[::1:bad": "****",
    }
    assert {url: mask_url(url) for url in cases} == cases
