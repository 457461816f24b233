"""Alert notifications: each alert the pipeline raises or resolves, routed to people's channels.

Channels (``notify.channels`` of ``configs/alerts.yaml``): ``webhook`` (the alert as JSON), ``slack`` (an
incoming-webhook ``{"text": ...}``), ``dingtalk`` / ``feishu`` (their bots' text messages) and ``email`` (SMTP).
Routes pick channels by level, rule, app, topic, group and cluster (fnmatch patterns); silences (same matches,
with an ``until`` time) hold notifications back until they expire. With ``sinks.metaserver`` set, the section
admins save in the console wins over the file's: it is read from the MetaServer (:func:`console_source`) before
new alerts are routed and before retries.

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


SECTION_KEYS = ("channels", "routes", "silences", "retry", "timeout_s")


def _until(text: Any) -> float:
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise NotifyConfigError("silence until: an ISO-8601 time, e.g. 2026-11-27T08:00:00Z") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def _mappings(value: Any, where: str) -> list[Mapping[str, Any]]:
    if not isinstance(value or [], list) or not all(isinstance(v, Mapping) for v in value or []):
        raise NotifyConfigError(f"{where}: a list of mappings")
    return list(value or [])


def _match(value: Any, where: str) -> None:
    if not isinstance(value or {}, Mapping):
        raise NotifyConfigError(f"{where}: match is a mapping of {', '.join(MATCH_KEYS)} to patterns")
    bad = sorted(set(value or {}) - set(MATCH_KEYS))
    if bad:
        raise NotifyConfigError(f"{where}: match on {', '.join(MATCH_KEYS)}")


def check(cfg: Any) -> None:
    """Refuse a bad ``notify`` section with the reason (before anything is sent); reasons never quote values."""
    if not isinstance(cfg, Mapping):
        raise NotifyConfigError("notify: a mapping of channels, routes, silences, retry")
    unknown = sorted(str(k) for k in cfg if k not in SECTION_KEYS)
    if unknown:
        raise NotifyConfigError(f"notify: unknown key(s) {', '.join(unknown)[:200]} (known: {', '.join(SECTION_KEYS)})")
    channels = cfg.get("channels") or {}
    if not isinstance(channels, Mapping):
        raise NotifyConfigError("channels: a mapping of name to channel")
    for name, ch in channels.items():
        if not isinstance(ch, Mapping) or ch.get("type") not in KINDS:
            raise NotifyConfigError(f"channel {name}: type is one of {', '.join(KINDS)}")
        if ch["type"] == "email":
            if not ch.get("smtp") or not ch.get("to") or not ch.get("from"):
                raise NotifyConfigError(f"channel {name}: email needs smtp (host:port), from and to")
            if not str(ch["smtp"]).rpartition(":")[2].isdigit():
                raise NotifyConfigError(f"channel {name}: smtp is host:port")
        elif not str(ch.get("url") or "").startswith(("http://", "https://")):
            raise NotifyConfigError(f"channel {name}: url must be http(s)")
    for i, route in enumerate(_mappings(cfg.get("routes"), "routes")):
        targets = route.get("channels")
        if not isinstance(targets, list) or not targets or any(
                not isinstance(c, str) or c not in channels for c in targets):
            raise NotifyConfigError(f"route {i + 1}: channels must name configured channels")
        _match(route.get("match"), f"route {i + 1}")
    for i, silence in enumerate(_mappings(cfg.get("silences"), "silences")):
        _match(silence.get("match"), f"silence {i + 1}")
        _until(silence.get("until"))
    retry = cfg.get("retry") or {}
    try:
        numbers = [float(retry.get(k, 0)) for k in ("backoff_s", "max_backoff_s")] if isinstance(retry, Mapping) else []
        timeout = float(cfg.get("timeout_s", 5.0))
        if (not isinstance(retry, Mapping) or not 1 <= int(retry.get("attempts", 8)) <= 1000
                or not all(0 <= n < 1e9 for n in numbers) or not 0 < timeout <= 600):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise NotifyConfigError("retry: attempts 1-1000, backoff_s and max_backoff_s >= 0 (seconds); "
                               "timeout_s 0-600") from None


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
                 clock: Callable[[], float] = time.time,
                 source: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.store, self.cluster, self.clock, self.source = store, cluster, clock, source
        self._configure(cfg)
        state = store.read_json("_state", "notify.json") or {}
        #: delivery id -> {"channel", "alert", "state": pending|sent|silenced|failed, "attempts", "next_at", ...}
        self.deliveries: dict[str, dict[str, Any]] = dict(state.get("deliveries", {}))

    def _configure(self, cfg: Mapping[str, Any]) -> None:
        check(cfg)
        self.cfg = cfg
        retry = cfg.get("retry") or {}
        self.attempts = int(retry.get("attempts", 8))
        self.backoff_s = float(retry.get("backoff_s", 2.0))
        self.max_backoff_s = float(retry.get("max_backoff_s", 300.0))
        self.timeout_s = float(cfg.get("timeout_s", 5.0))

    def refresh(self) -> None:
        """Take the configuration in force from ``source`` (the console's); unreachable or bad: keep the last."""
        if self.source is None:
            return
        try:
            self._configure(self.source())
        except Exception as exc:
            log.warning("ykafka.pipeline.notify_config_kept", error=str(exc)[:300])

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
        self.refresh()
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
        self._send_due()

    def flush(self) -> None:
        """Retry what is pending and due, with the channels in force now (a channel fixed in the console)."""
        now = self.clock()
        if any(d["state"] == "pending" and d["next_at"] <= now for d in self.deliveries.values()):
            self.refresh()
            self._send_due()

    def _send_due(self) -> None:
        """Send every pending delivery that is due; a failure waits its back-off (kept for the next pass)."""
        now = self.clock()
        channels = self.cfg.get("channels") or {}
        for key, d in self.deliveries.items():
            if d["state"] != "pending" or d["next_at"] > now:
                continue
            if d["channel"] not in channels:  # removed from the configuration since it was decided
                d.update(state="failed", at=now, error="channel no longer configured")
                continue
            try:
                self._send(key, channels[d["channel"]], d["alert"])
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


def console_source(metaserver: str, token: str, fallback: Mapping[str, Any],
                   timeout_s: float = 5.0) -> Callable[[], Mapping[str, Any]]:
    """The notify section in force on the MetaServer (``GET /v1/admin/notify?reveal=true``, admin token): the
    console's once an admin saved one there, else ``fallback`` (this pipeline's own file)."""
    url = metaserver.rstrip("/") + "/v1/admin/notify?reveal=true"

    def read() -> Mapping[str, Any]:
        response = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)
        if response.status_code != 200:
            raise RuntimeError(f"MetaServer notify config: HTTP {response.status_code}")
        found = response.json()
        return dict(found["config"]) if found.get("source") == "console" else fallback

    return read
