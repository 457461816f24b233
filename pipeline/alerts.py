"""Alerts: rules from ``configs/alerts.yaml`` judged over the store, de-duplicated, sent to the sinks.

Rules: latency above a threshold (per topic / group, over the aggregates of the last ``window_s``), error
rate, consumer lag judged Burrow-style (:mod:`pipeline.burrow`) and the completeness audit
(:mod:`pipeline.audit`). Each alert has a reason and JSON evidence.

De-duplication: an alert is raised when its (rule, subject) first reaches a level or changes level, and
resolved once when the condition clears; the state lives in the store (``_state/alerts.json``) so a
restarted pipeline does not raise again what it already raised. The alert ``id`` is stable per
(rule, subject, level), so a downstream consumer can drop the rare duplicate after a crash.

Sinks: ``__ykafka_alerts`` (Kafka), an optional webhook (JSON POST) and optionally the MetaServer
(``POST /v1/admin/alerts`` with the admin token).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from ykafka import events
from ykafka.events import MetricName

from . import burrow, notify
from .aggregates import error_rates, read_aggregates
from .store import Store, hour_prefixes

log = structlog.get_logger(__name__)

_PACKAGED_RULES = Path(__file__).resolve().parent / "alerts.yaml"  # configs/alerts.yaml, in the ykafka-server wheel
DEFAULT_RULES = (_PACKAGED_RULES if _PACKAGED_RULES.exists()
                 else Path(__file__).resolve().parent.parent / "configs" / "alerts.yaml")


@dataclass
class AlertConfig:
    window_s: int = 120
    latency: list[dict[str, Any]] = field(default_factory=list)
    error_rate: list[dict[str, Any]] = field(default_factory=list)
    lag: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    #: notification channels, routes, silences and retries (pipeline/notify.py)
    notify: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> AlertConfig:
        """Read the YAML rules (default ``configs/alerts.yaml``); ``overrides`` replace top-level sections."""
        source = Path(path) if path else DEFAULT_RULES
        raw: dict[str, Any] = yaml.safe_load(source.read_text()) if source.exists() else {}
        raw.update(overrides or {})
        cfg = cls(int(raw.get("window_s", 120)), list(raw.get("latency") or []), list(raw.get("error_rate") or []),
                  dict(raw.get("lag") or {}), dict(raw.get("audit") or {}), dict(raw.get("sinks") or {}),
                  dict(raw.get("notify") or {}))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        notify.check(self.notify)
        for rule in self.latency:
            for needed in ("name", "metric", "threshold_ms"):
                if needed not in rule:
                    raise ValueError(f"latency rule {rule!r} needs {needed!r}")
            if rule.get("stat", "p99") not in ("p50", "p95", "p99", "p99_max", "max", "mean"):
                raise ValueError(f"latency rule {rule['name']}: stat must be p50/p95/p99/p99_max/max/mean")
        for rule in self.error_rate:
            if rule.get("side", "send") not in ("send", "consume") or "threshold" not in rule:
                raise ValueError(f"error-rate rule {rule!r} needs side send|consume and a threshold")


@dataclass
class Alert:
    rule: str
    level: str
    reason: str
    evidence: dict[str, Any]
    topic: str | None = None
    group: str | None = None
    partition: int | None = None
    client_id: str | None = None
    status: str = "firing"
    ts: int = 0
    extra_subject: str = ""  # e.g. the audit bucket

    @property
    def subject(self) -> str:
        return "|".join(str(x) for x in (self.rule, self.topic, self.group, self.partition, self.client_id,
                                         self.extra_subject))

    @property
    def id(self) -> str:
        return hashlib.sha1(f"{self.subject}|{self.level}".encode()).hexdigest()[:16]

    def as_event(self) -> dict[str, Any]:
        return {"ts": self.ts or events.now_ms(), "id": self.id, "rule": self.rule, "level": self.level,
                "status": self.status, "topic": self.topic, "group": self.group, "partition": self.partition,
                "client_id": self.client_id, "reason": self.reason,
                "evidence": json.dumps(self.evidence, default=str, separators=(",", ":"))}


def _matches(value: str | None, patterns: Iterable[str] | None) -> bool:
    if not patterns:
        return True
    return any(fnmatch.fnmatch(value or "", p) for p in patterns)


# --- rule evaluation -------------------------------------------------------------------------------

def latency_alerts(store: Store, cfg: AlertConfig, now: dt.datetime) -> list[Alert]:
    out: list[Alert] = []
    since = dt.timedelta(seconds=cfg.window_s)
    for rule in cfg.latency:
        rows = read_aggregates(store, since, now, names=[rule["metric"]], by=("name", "topic", "group"),
                               whole_range=True)
        for row in rows:
            if not _matches(row.get("topic"), rule.get("topics")) or not _matches(row.get("group"), rule.get("groups")):
                continue
            stat = rule.get("stat", "p99")
            value = row.get(stat)
            if value is None or value <= float(rule["threshold_ms"]):
                continue
            out.append(Alert(rule["name"], rule.get("level", "WARN"),
                             f"{rule['metric']} {stat} {value:g} ms > {rule['threshold_ms']} ms over the last "
                             f"{cfg.window_s}s", {"metric": rule["metric"], "stat": stat, "value": value,
                                                  "threshold_ms": rule["threshold_ms"], "window": row},
                             topic=row.get("topic"), group=row.get("group")))
    return out


def error_rate_alerts(store: Store, cfg: AlertConfig, now: dt.datetime) -> list[Alert]:
    out: list[Alert] = []
    for rule in cfg.error_rate:
        side = rule.get("side", "send")
        for row in error_rates(store, dt.timedelta(seconds=cfg.window_s), now, side=side, whole_range=True):
            total = row["errors"] + row["msgs"]
            if total < float(rule.get("min_events", 1)) or row["rate"] <= float(rule["threshold"]):
                continue
            if not _matches(row.get("topic"), rule.get("topics")):
                continue
            out.append(Alert(rule["name"], rule.get("level", "ERR"),
                             f"{side} error rate {row['rate']:.2%} > {float(rule['threshold']):.2%} "
                             f"({row['errors']:g} errors / {total:g} events in {cfg.window_s}s)",
                             {"side": side, **row, "threshold": rule["threshold"]}, topic=row.get("topic")))
    return out


def lag_samples(store: Store, since: dt.timedelta, now: dt.datetime) -> dict[tuple[str, str, int], list[burrow.Sample]]:
    """Lag samples per (group, topic, partition); the pipeline's own sampler wins over client statistics."""
    import pyarrow.compute as pc

    start = now - since
    recent = (pc.field("name") == str(MetricName.LAG)) & (pc.field("ts") >= int(start.timestamp() * 1000))
    table = store.read("metrics", hour_prefixes(start, now), filter=recent,
                       columns=["ts", "group", "topic", "partition", "committed", "end_offset", "value", "count",
                                "source"])
    by_source: dict[tuple[str, str, int], dict[str, list[burrow.Sample]]] = {}
    for row in table.to_pylist():
        if row["group"] is None or row["topic"] is None or row["partition"] is None:
            continue
        alive = None if row["source"] != "sampler" or row["count"] is None else bool(row["count"])
        sample = burrow.Sample(int(row["ts"]), int(row["committed"] if row["committed"] is not None else -1),
                               int(row["end_offset"] or 0), int(row["value"] or 0), alive)
        by_source.setdefault((row["group"], row["topic"], int(row["partition"])), {}).setdefault(
            row["source"] or "stats", []).append(sample)
    return {key: sources.get("sampler") or sources.get("stats") or [] for key, sources in by_source.items()}


def lag_alerts(store: Store, cfg: AlertConfig, now: dt.datetime) -> list[Alert]:
    rule = cfg.lag
    if not rule:
        return []
    name = rule.get("name", "consumer-lag")
    out = []
    samples = lag_samples(store, dt.timedelta(seconds=int(rule.get("lookback_s", 900))), now)
    for (group, topic, partition), window in sorted(samples.items()):
        if not _matches(group, rule.get("groups")) or (
                rule.get("exclude_groups") and _matches(group, rule.get("exclude_groups"))):
            continue
        verdict = burrow.evaluate(window, int(rule.get("window", 5)), int(rule.get("min_samples", 3)))
        if verdict.status == "OK":
            continue
        out.append(Alert(name, verdict.status, verdict.reason, verdict.evidence, topic=topic, group=group,
                         partition=partition))
    return out


# --- de-duplication and sinks ----------------------------------------------------------------------

class AlertManager:
    """Decides which alerts are new (or resolved) and delivers them."""

    def __init__(self, store: Store, cfg: AlertConfig, producer: Any = None, cluster: str = "") -> None:
        self.store = store
        self.cfg = cfg
        self.producer = producer
        meta = cfg.sinks.get("metaserver")
        source = notify.console_source(str(meta), self._token(), cfg.notify) if meta else None
        self.notifier = (notify.Notifier(store, cfg.notify, cluster, source=source)
                         if cfg.notify.get("channels") or source else None)
        state = store.read_json("_state", "alerts.json") or {}
        self.active: dict[str, dict[str, Any]] = dict(state.get("active", {}))
        self.sent: list[dict[str, Any]] = []

    def process(self, current: list[Alert], rules: Iterable[str], now: dt.datetime) -> list[dict[str, Any]]:
        """Compare the current alerts of ``rules`` with what is active; deliver the changes."""
        ts = int(now.timestamp() * 1000)
        judged = set(rules)
        changes: list[Alert] = []
        seen: set[str] = set()
        for alert in current:
            alert.ts = ts
            seen.add(alert.subject)
            previous = self.active.get(alert.subject)
            if previous is None or previous["level"] != alert.level:
                changes.append(alert)
                self.active[alert.subject] = {"level": alert.level, "rule": alert.rule, "since": ts,
                                              "event": alert.as_event()}
        for subject, previous in list(self.active.items()):
            if previous["rule"] in judged and subject not in seen:
                event = dict(previous["event"])
                resolved = Alert(previous["rule"], "OK", f"cleared (was {previous['level']})",
                                 {"was": previous["level"], "since": previous["since"]}, event.get("topic"),
                                 event.get("group"), event.get("partition"), event.get("client_id"),
                                 status="resolved", ts=ts)
                resolved.extra_subject = subject.split("|")[-1]
                changes.append(resolved)
                del self.active[subject]
        delivered = [a.as_event() for a in changes]
        if delivered:
            self.deliver(delivered)
        elif self.notifier is not None:
            self.notifier.flush()  # retries of a channel that was down
        self.store.write_json({"active": self.active}, "_state", "alerts.json")
        return delivered

    def deliver(self, alerts: list[dict[str, Any]]) -> None:
        self.sent.extend(alerts)
        sinks = self.cfg.sinks
        if sinks.get("kafka", True) and self.producer is not None:
            try:
                self.producer.produce(events.ALERTS_TOPIC, events.encode("alert", alerts))
                self.producer.flush(10)
            except Exception as exc:
                log.warning("ykafka.pipeline.alert_kafka_failed", error=str(exc))
        if sinks.get("webhook"):
            self._post(str(sinks["webhook"]), alerts, {})
        if self.notifier is not None:
            self.notifier.notify(alerts)
        if sinks.get("metaserver"):
            self._post(str(sinks["metaserver"]).rstrip("/") + "/v1/admin/alerts", alerts,
                       {"Authorization": f"Bearer {self._token()}", "X-Ykafka-Operator": "ykafka-pipeline"})
        for alert in alerts:
            log.warning("ykafka.pipeline.alert", rule=alert["rule"], level=alert["level"], status=alert["status"],
                        topic=alert["topic"], group=alert["group"], partition=alert["partition"],
                        reason=alert["reason"])

    def _token(self) -> str:
        return str(self.cfg.sinks.get("metaserver_token") or os.environ.get("YKAFKA_ADMIN_TOKEN", ""))

    @staticmethod
    def _post(url: str, alerts: list[dict[str, Any]], headers: dict[str, str]) -> None:
        import requests

        for alert in alerts:
            body = dict(alert)
            body["evidence"] = json.loads(body["evidence"])
            try:
                response = requests.post(url, json=body, headers=headers, timeout=5)
                if response.status_code >= 300:
                    log.warning("ykafka.pipeline.alert_post_refused", url=url, status=response.status_code)
            except requests.RequestException as exc:
                log.warning("ykafka.pipeline.alert_post_failed", url=url, error=str(exc))
