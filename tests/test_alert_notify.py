"""Alert notifications (issue 30): the pipeline's alerts routed to a real local HTTP receiver (generic webhook,
Slack-, DingTalk- and Feishu-compatible bodies) and a real SMTP server (aiosmtpd); one message per alert and one
"resolved", silences, a channel that is down retried with back-off, nothing sent twice after a restart."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from pipeline.alerts import Alert, AlertConfig, AlertManager
from pipeline.notify import NotifyConfigError, check
from pipeline.store import Store
from tests.notify_fixtures import Mailbox, Receiver


def _cfg(receiver: Receiver, smtp_port: int) -> AlertConfig:
    until = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat()
    return AlertConfig(notify={
        "channels": {"hook": {"type": "webhook", "url": receiver.url + "/hook"},
                     "slack": {"type": "slack", "url": receiver.url + "/slack"},
                     "ding": {"type": "dingtalk", "url": receiver.url + "/ding"},
                     "lark": {"type": "feishu", "url": receiver.url + "/lark"},
                     "mail": {"type": "email", "smtp": f"127.0.0.1:{smtp_port}", "from": "ykafka@example.com",
                              "to": ["oncall@example.com"]}},
        "routes": [{"match": {"level": ["ERR", "OK"], "cluster": "dc-a"}, "channels": ["hook", "slack", "mail"]},
                   {"match": {"topic": "orders*"}, "channels": ["ding", "lark"]}],
        "silences": [{"match": {"rule": "noisy"}, "until": until, "comment": "known, ticket OPS-1"},
                     {"match": {"rule": "lag"}, "until": past}],  # expired: does not hold anything back
        "retry": {"attempts": 5, "backoff_s": 0.0}})


def test_one_message_per_alert_resolved_silenced_retried_and_never_twice_after_a_restart(
        tmp_path: Path, receiver: Receiver, mailbox: tuple[Mailbox, int]) -> None:
    box, port = mailbox
    store = Store(str(tmp_path / "store"))
    cfg = _cfg(receiver, port)
    mgr = AlertManager(store, cfg, cluster="dc-a")
    now = dt.datetime.now(dt.UTC)
    stalled = Alert("lag", "ERR", "commits froze while the lag grew", {"lag": [5, 9]}, topic="orders", group="billing")
    noisy = Alert("noisy", "ERR", "flaps", {}, topic="orders-eu")
    receiver.fail["/slack"] = 2  # Slack is down for two attempts
    for _ in range(3):  # three evaluations of the same condition: one notification
        mgr.process([stalled, noisy], ["lag", "noisy"], now)
    assert [b["rule"] for b in receiver.got["/hook"]] == ["lag"]
    hook = receiver.got["/hook"][0]
    assert hook["status"] == "firing" and hook["evidence"] == {"lag": [5, 9]} and hook["cluster"] == "dc-a"
    text = "[ERR] lag (topic orders, group billing, cluster dc-a): commits froze while the lag grew"
    assert receiver.got["/ding"] == [{"msgtype": "text", "text": {"content": text}}]
    assert receiver.got["/lark"] == [{"msg_type": "text", "content": {"text": text}}]
    assert receiver.got["/slack"] == [{"text": text}]  # retried twice (no back-off here), then delivered once
    assert [m["Subject"].strip() for m in box.messages] == [text]
    assert box.messages[0]["To"] == "oncall@example.com"
    state = json.loads((tmp_path / "store" / "_state" / "notify.json").read_text())["deliveries"]
    silenced = [d for d in state.values() if d["alert"]["rule"] == "noisy"]
    assert silenced and all(d["state"] == "silenced" and d["silence"] == "known, ticket OPS-1" for d in silenced)
    slack = next(d for d in state.values() if d["channel"] == "slack" and d["alert"]["rule"] == "lag")
    assert slack["state"] == "sent" and slack["attempts"] == 2

    # the condition clears: one "resolved" per channel
    mgr.process([noisy], ["lag", "noisy"], now + dt.timedelta(minutes=1))
    resolved = "RESOLVED lag (topic orders, group billing, cluster dc-a): cleared (was ERR)"
    assert [b["text"] for b in receiver.got["/slack"]] == [text, resolved]
    assert [b["status"] for b in receiver.got["/hook"]] == ["firing", "resolved"]
    assert [m["Subject"].strip() for m in box.messages] == [text, resolved]

    # a restarted sender (new manager and notifier over the same store) repeats nothing
    before = (len(receiver.ids), len(box.messages))
    again = AlertManager(store, _cfg(receiver, port), cluster="dc-a")
    again.process([noisy], ["lag", "noisy"], now + dt.timedelta(minutes=2))
    again.notifier.notify([stalled.as_event()])  # even handed the same event again
    assert (len(receiver.ids), len(box.messages)) == before
    assert len(receiver.ids) == len(set(receiver.ids)) == 8  # hook, slack, ding, lark for firing and resolved


def test_a_channel_down_waits_its_back_off_and_a_restart_delivers_what_was_pending(
        tmp_path: Path, receiver: Receiver, mailbox: tuple[Mailbox, int]) -> None:
    _box, port = mailbox
    store = Store(str(tmp_path / "store"))
    cfg = _cfg(receiver, port)
    cfg.notify["retry"] = {"attempts": 5, "backoff_s": 3600}
    cfg.notify["routes"] = [{"match": {}, "channels": ["hook"]}]
    receiver.fail["/hook"] = 1
    AlertManager(store, cfg, cluster="dc-a").process([Alert("lag", "WARN", "growing", {}, topic="t")], ["lag"],
                                                     dt.datetime.now(dt.UTC))
    assert "/hook" not in receiver.got  # refused once; the next try waits an hour
    state = json.loads((tmp_path / "store" / "_state" / "notify.json").read_text())["deliveries"]
    (pending,) = state.values()
    assert pending["state"] == "pending" and pending["attempts"] == 1 and pending["error"] == "HTTP 503"
    later = AlertManager(store, cfg, cluster="dc-a")
    assert later.notifier is not None
    later.notifier.clock = lambda: pending["next_at"] + 1  # an hour later, after a restart
    later.process([Alert("lag", "WARN", "growing", {}, topic="t")], ["lag"], dt.datetime.now(dt.UTC))
    assert [b["reason"] for b in receiver.got["/hook"]] == ["growing"]


def test_a_bad_notify_section_is_refused_with_the_reason() -> None:
    with pytest.raises(NotifyConfigError, match="channel x: type is one of webhook, slack, dingtalk, feishu, email"):
        check({"channels": {"x": {"type": "pager"}}})
    with pytest.raises(NotifyConfigError, match="route 1: channels must name configured channels"):
        check({"channels": {}, "routes": [{"channels": ["nope"]}]})
    with pytest.raises(NotifyConfigError, match="silence until: an ISO-8601 time"):
        check({"silences": [{"until": "tomorrow"}]})
