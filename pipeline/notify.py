"""Alert notifications: each alert the pipeline raises or resolves, routed to people's channels.

Channels (``notify.channels`` of ``configs/alerts.yaml``): ``webhook`` (the alert as JSON), ``slack`` (an
incoming-webhook ``{"text": ...}``), ``dingtalk`` / ``feishu`` (their bots' text messages) and ``email`` (SMTP).
Routes pick channels by level, rule, app, topic, group and cluster (fnmatch patterns); silences (same matches,
with an ``until`` time) hold notifications back until they expire.

The alert manager already raises an alert once per level change and resolves it once, so one notification
goes out per alert and one "resolved" per resolution, never one per evaluation. Each (alert id, status,
channel) is a delivery kept in the store (``_state/notify.json``) from the moment it is decided: a channel
that is down is retried with exponential back-off at the next passes, and a restarted sender neither loses
nor repeats one that was sent (every notification carries its delivery id, ``X-Ykafka-Notification``, so a
receiver can also drop the rare repeat of a send cut by a crash).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import smtplib
import time
from collections.abc import Callable, Mapping
from email.message import EmailMessage
from typing import Any

import requests
import structlog

from .store import Store

log = structlog.get_logger(__name__)

KINDS = ("webhook", "slack", "dingtalk", "feishu", "email")
MATCH_KEYS = ("level", "rule", "app", "topic", "group", "cluster")


class NotifyConfigError(ValueError):
    pass


def _until(text: Any) -> float:
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise NotifyConfigError(f"silence until: an ISO-8601 time, e.g. 2026-11-27T08:00:00Z, not {text!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def check(cfg: Mapping[str, Any]) -> None:
    """Refuse a bad ``notify`` section with the reason (before anything is sent)."""
    channels = cfg.get("channels") or {}
    for name, ch in channels.items():
        if not isinstance(ch, Mapping) or ch.get("type") not in KINDS:
            raise NotifyConfigError(f"channel {name}: type is one of {', '.join(KINDS)}")
        if ch["type"] == "email":
            if not ch.get("smtp") or not ch.get("to") or not ch.get("from"):
                raise NotifyConfigError(f"channel {name}: email needs smtp (host:port), from and to")
        elif not str(ch.get("url") or "").startswith(("http://", "https://")):
            raise NotifyConfigError(f"channel {name}: url must be http(s)")
    for i, route in enumerate(cfg.get("routes") or []):
        unknown = [c for c in route.get("channels") or [] if c not in channels]
        if unknown or not route.get("channels"):
            raise NotifyConfigError(f"route {i + 1}: channels must name configured channels")
        bad = sorted(set(route.get("match") or {}) - set(MATCH_KEYS))
        if bad:
            raise NotifyConfigError(f"route {i + 1}: match on {', '.join(MATCH_KEYS)}")
    for silence in cfg.get("silences") or []:
        _until(silence.get("until"))


def _matches(match: Mapping[str, Any], alert: Mapping[str, Any]) -> bool:
    for key, patterns in (match or {}).items():
        value = alert.get(key)
        pats = [patterns] if isinstance(patterns, str) else list(patterns)
        if value is None or not any(fnmatch.fnmatchcase(str(value), str(p)) for p in pats):
            return False
    return True


def _text(alert: Mapping[str, Any]) -> str:
    where = ", ".join(f"{k} {alert[k]}" for k in ("topic", "group", "partition", "cluster") if alert.get(k) is not None)
    head = "RESOLVED" if alert.get("status") == "resolved" else f"[{alert.get('level')}]"
    return f"{head} {alert.get('rule')}{' (' + where + ')' if where else ''}: {alert.get('reason')}"


def render(kind: str, alert: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body a channel of ``kind`` takes."""
    if kind == "slack":
        return {"text": _text(alert)}
    if kind == "dingtalk":
        return {"msgtype": "text", "text": {"content": _text(alert)}}
    if kind == "feishu":
        return {"msg_type": "text", "content": {"text": _text(alert)}}
    body = dict(alert)
    if isinstance(body.get("evidence"), str):
        body["evidence"] = json.loads(body["evidence"])
    return body


class Notifier:
    """Routes, silences, sends and retries alert notifications; its deliveries persist in the store."""

    def __init__(self, store: Store, cfg: Mapping[str, Any], cluster: str = "",
                 clock: Callable[[], float] = time.time) -> None:
        check(cfg)
        self.store, self.cfg, self.cluster, self.clock = store, cfg, cluster, clock
        retry = cfg.get("retry") or {}
        self.attempts = int(retry.get("attempts", 8))
        self.backoff_s = float(retry.get("backoff_s", 2.0))
        self.max_backoff_s = float(retry.get("max_backoff_s", 300.0))
        self.timeout_s = float(cfg.get("timeout_s", 5.0))
        state = store.read_json("_state", "notify.json") or {}
        #: delivery id -> {"channel", "alert", "state": pending|sent|silenced|failed, "attempts", "next_at", ...}
        self.deliveries: dict[str, dict[str, Any]] = dict(state.get("deliveries", {}))

    def _save(self) -> None:
        cutoff = self.clock() - 7 * 86400  # done deliveries are kept a week (a restart within it repeats none)
        self.deliveries = {k: d for k, d in self.deliveries.items()
                           if d["state"] == "pending" or d.get("at", 0) >= cutoff}
        self.store.write_json({"deliveries": self.deliveries}, "_state", "notify.json")

    def silenced(self, alert: Mapping[str, Any]) -> str | None:
        now = self.clock()
        for s in self.cfg.get("silences") or []:
            if _until(s.get("until")) > now and _matches(s.get("match") or {}, alert):
                return str(s.get("comment") or "silenced")
        return None

    def channels_for(self, alert: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        for route in self.cfg.get("routes") or []:
            if _matches(route.get("match") or {}, alert):
                out += [c for c in route["channels"] if c not in out]
                if route.get("continue") is False:
                    break
        return out

    def notify(self, alerts: list[dict[str, Any]]) -> None:
        """Decide the deliveries of new alert events (kept before any send), then send what is due."""
        for event in alerts:
            alert = {**event, "cluster": event.get("cluster") or self.cluster or None}
            why = self.silenced(alert)
            for channel in self.channels_for(alert):
                key = f"{alert['id']}:{alert['status']}:{channel}"
                if key in self.deliveries:
                    continue  # decided before (a re-run of the same change): never twice
                self.deliveries[key] = {"channel": channel, "alert": alert, "attempts": 0, "next_at": 0.0,
                                        "state": "silenced" if why else "pending", "at": self.clock(),
                                        **({"silence": why} if why else {})}
        self._save()
        self.flush()

    def flush(self) -> None:
        """Send every pending delivery that is due; a failure waits its back-off (kept for the next pass)."""
        now = self.clock()
        for key, d in self.deliveries.items():
            if d["state"] != "pending" or d["next_at"] > now:
                continue
            try:
                self._send(key, self.cfg["channels"][d["channel"]], d["alert"])
                d.update(state="sent", at=self.clock())
            except Exception as exc:  # a channel down or refusing: retried with back-off
                d["attempts"] += 1
                d["error"] = str(exc)[:300]
                if d["attempts"] >= self.attempts:
                    d.update(state="failed", at=self.clock())
                    log.error("ykafka.pipeline.notify_failed", channel=d["channel"], error=d["error"])
                else:
                    d["next_at"] = now + min(self.max_backoff_s, self.backoff_s * 2 ** (d["attempts"] - 1))
                    log.warning("ykafka.pipeline.notify_retry", channel=d["channel"], error=d["error"],
                                attempt=d["attempts"])
            self._save()  # after each send: a crash repeats at most the one in flight

    def _send(self, key: str, channel: Mapping[str, Any], alert: Mapping[str, Any]) -> None:
        if channel["type"] == "email":
            msg = EmailMessage()
            msg["Subject"] = _text(alert)[:200]
            msg["From"] = str(channel["from"])
            to = channel["to"]
            msg["To"] = ", ".join(to) if isinstance(to, list) else str(to)
            msg["X-Ykafka-Notification"] = key
            msg.set_content(_text(alert) + "\n\n" + json.dumps(render("webhook", alert), indent=2, default=str))
            host, _, port = str(channel["smtp"]).rpartition(":")
            with smtplib.SMTP(host, int(port), timeout=self.timeout_s) as smtp:
                if channel.get("starttls"):
                    smtp.starttls()
                if channel.get("username"):
                    smtp.login(str(channel["username"]), str(channel.get("password") or ""))
                smtp.send_message(msg)
            return
        response = requests.post(str(channel["url"]), json=render(channel["type"], alert), timeout=self.timeout_s,
                                 headers={"X-Ykafka-Notification": key})
        if response.status_code >= 300:
            raise RuntimeError(f"HTTP {response.status_code}")
