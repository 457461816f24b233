"""Alert notification channels, routes and silences as admins edit them in the console (docs/observability.md,
"Alert notifications"): the ``notify`` section of ``configs/alerts.yaml`` until an admin saves one, then the
database's (``ms_notify_config``), which the pipeline reads through ``GET /v1/admin/notify?reveal=true``.

Every save is checked with the pipeline's own check (:func:`pipeline.notify.check`, what loading the file
runs), so a bad edit is refused with the reason and nothing is stored. Secrets (a channel's ``password``, the
path and query of a webhook URL, where Slack, DingTalk and Feishu put their tokens) are masked whenever the
configuration is shown; a masked value sent back unchanged keeps the stored secret, so an admin edits a
channel without retyping it, and a secret is never echoed.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml
from sqlalchemy import Column, Engine, Float, Integer, String, Table, Text

from .. import pipeline_module
from ..storage.models import metadata
from . import edited_docs

#: imported with the MetaServer, not on a page's first request (the file's loader and the pipeline's own check)
_alerts, _notify = pipeline_module("alerts"), pipeline_module("notify")
MASK = "****"
SECRET_FIELDS = ("url", "password")

#: the notify section in force: one row (id 1) once an admin saved it; absent, the file's section is read
notify_config = Table(
    "ms_notify_config", metadata,
    Column("id", Integer, primary_key=True),
    Column("body", Text, nullable=False),  # YAML of the notify section, secrets in clear (never shown)
    Column("version", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(255), nullable=False),
)


class NotifyInvalid(Exception):
    """The section does not parse or fails the pipeline's check; the message is the reason (never a value)."""


@dataclass(frozen=True)
class InForce:
    config: dict[str, Any]
    source: str
    version: int
    updated_by: str | None = None
    updated_at: float | None = None

    def masked(self) -> dict[str, Any]:
        return mask(self.config)

    def masked_yaml(self) -> str:
        return dump(self.masked())


def _file() -> Path:
    return Path(_alerts.DEFAULT_RULES)


def _seed() -> str:
    path = _file()
    return _seed_of(str(path), path.stat().st_mtime)


@functools.lru_cache(maxsize=4)
def _seed_of(path: str, _mtime: float) -> str:
    """The file's section as YAML, read again only when the file changes (pages show it on every request)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return dump(dict(raw.get("notify") or {}))


def dump(cfg: Mapping[str, Any]) -> str:
    full = {"channels": {}, "routes": [], "silences": [], **cfg}
    return yaml.safe_dump(full, sort_keys=False, allow_unicode=True, default_flow_style=False)


def parse(text: str) -> dict[str, Any]:
    """The section of a YAML text, checked as the pipeline checks its file (NotifyInvalid with the reason)."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise NotifyInvalid(f"line {mark.line + 1}: not valid YAML" if mark is not None else "not valid YAML") from None
    data = {} if data is None else data
    _check(data)
    return dict(data)


def _check(cfg: Any) -> None:
    try:
        _notify.check(cfg)
    except ValueError as exc:
        raise NotifyInvalid(str(exc)) from None


#: a path segment shown as it is: a word naming the kind of endpoint (``hooks``, ``robot``, ``oncall``); anything
#: with a digit, or longer, may be a token (a generic webhook's whole secret can be its only segment)
_WORD = re.compile(r"[A-Za-z][A-Za-z_.-]{0,23}")


def mask_url(url: str) -> str:
    """``scheme://host[:port]/first-segment/****?key=****``: the host and the kind of endpoint, no token (the
    first segment too is masked unless it is a plain word)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    netloc = (f"{parts.username}:{MASK}@" if parts.password else f"{MASK}@" if parts.username else "") + host
    netloc += f":{port}" if port else ""
    segments = [s for s in parts.path.split("/") if s]
    shown = segments[:1] if segments and _WORD.fullmatch(segments[0]) else [MASK] if segments else []
    path = "/" + "/".join(shown + ([MASK] if len(segments) > 1 else [])) if segments else ""
    query = "&".join(f"{k}={MASK}" for k, _v in parse_qsl(parts.query, keep_blank_values=True))
    return f"{parts.scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def _masked(field: str, value: Any) -> Any:
    if value is None or value == "":
        return value
    return mask_url(value) if field == "url" and isinstance(value, str) else MASK


def mask(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the section with every channel's secrets masked (what pages and the default API show); a
    malformed channel (a refused edit shown again) is masked whole."""
    channels = cfg.get("channels") or {}
    if not isinstance(channels, Mapping):
        return {**cfg, "channels": MASK}
    return {**cfg, "channels": {name: {k: _masked(k, v) if k in SECRET_FIELDS else v for k, v in ch.items()}
                                if isinstance(ch, Mapping) else MASK for name, ch in channels.items()}}


def unmask(new: dict[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` with each secret sent back masked replaced by the stored one of the same channel; a mask left
    where there is nothing to restore is refused (the secret must be typed in full)."""
    olds = old.get("channels") or {}
    for name, ch in (new.get("channels") or {}).items():
        for field in SECRET_FIELDS:
            value = ch.get(field)
            if not isinstance(value, str) or MASK not in value:
                continue
            stored = (olds.get(name) or {}).get(field)
            if stored is not None and value == _masked(field, stored):
                ch[field] = stored
            else:
                raise NotifyInvalid(f"channel {name}: {field} is masked; type it in full (secrets are not shown)")
    return new


def summary(cfg: Mapping[str, Any]) -> dict[str, str]:
    """One line per channel, route and silence, secrets masked: the audit log's form of the section."""
    out: dict[str, str] = {}
    for name, ch in mask(cfg)["channels"].items():
        out[f"channel {name}"] = f"{ch.get('type')} {ch.get('url') or ch.get('smtp')}"

    def where(match: Any) -> str:
        return " ".join(f"{k}={v}" for k, v in (match or {}).items()) or "every alert"

    for i, route in enumerate(cfg.get("routes") or []):
        out[f"route {i + 1}"] = f"{where(route.get('match'))} -> {', '.join(route['channels'])}"
    for i, s in enumerate(cfg.get("silences") or []):
        out[f"silence {i + 1}"] = f"{where(s.get('match'))} until {s.get('until')}: {s.get('comment') or ''}"
    return out


def in_force(engine: Engine) -> InForce:
    """The section saved in the console, else the file's."""
    doc = edited_docs.current(engine, notify_config, _seed, dump({}))
    try:
        cfg = parse(doc.body)
    except NotifyInvalid:
        cfg = {}  # a file the pipeline would refuse too: shown empty until an admin saves a good one
    return InForce(cfg, doc.source, doc.version, doc.updated_by, doc.updated_at)


def save(engine: Engine, text: str, who: str) -> InForce:
    """Store a new section (masked secrets restored, then checked: nothing stored when bad); audited."""
    before = in_force(engine)
    cfg = unmask(parse(text), before.config)
    _check(cfg)
    edited_docs.store(engine, notify_config, dump(cfg), who, edited_docs.Stored("", before.source, before.version),
                      "notify.config", "notifications", summary(before.config), summary(cfg))
    return in_force(engine)


def add_silence(engine: Engine, match: dict[str, list[str]], hours: float, comment: str, who: str) -> InForce:
    """Append a silence of ``match`` that expires ``hours`` from now."""
    if not match:
        raise NotifyInvalid("silence: give at least one of level, rule, app, topic, group, cluster")
    if not 0 < hours <= 24 * 90:
        raise NotifyInvalid("silence: hours between 0 and 2160 (90 days)")
    before = in_force(engine)
    until = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=hours)).replace(microsecond=0)
    silence = {"match": match, "until": until.isoformat().replace("+00:00", "Z"), "comment": comment[:300]}
    cfg = {**before.config, "silences": [*(before.config.get("silences") or []), silence]}
    _check(cfg)
    edited_docs.store(engine, notify_config, dump(cfg), who, edited_docs.Stored("", before.source, before.version),
                      "notify.silence", "notifications", summary(before.config), summary(cfg))
    return in_force(engine)


def silences(cfg: Mapping[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """The silences with ``active`` (not yet expired) set, for display."""
    now = dt.datetime.now(dt.UTC).timestamp() if now is None else now
    out = []
    for s in cfg.get("silences") or []:
        when = dt.datetime.fromisoformat(str(s.get("until")).replace("Z", "+00:00"))
        until = (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
        out.append({**s, "active": until > now})
    return out
