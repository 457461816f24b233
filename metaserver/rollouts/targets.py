"""Gray-release targets: which live clients of a scope a change reaches (docs/metaserver.md, "Targets").

A target combines a stable percentage of the clients in scope with labels, IPs, apps, hosts and ykafka /
librdkafka versions: every dimension given must match (AND), any value within one matches (OR). The
percentage is exact and stable: the matching clients are ordered by a hash of the namespace and their instance
id and the first ``percent`` of them are taken (rounded up), so a client stays in as the percentage grows (in at
5 % means in at 25 %; a plan also keeps its earlier canaries) and the same clients lead every change's steps.

Apollo's gray rules match only IPs and labels, so a target with any other dimension is resolved here to the
live client instances it selects and published as a rule listing each instance's own label
(``ykafka-client:<client id>``, sent by the SDK as ``ykafkaInstance``; metaserver/configcenter/readmodel.py).
A target of IPs and labels alone goes to Apollo as before and reaches processes that start later too.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Connection, select

from ykafka.catalog import KEYS, Scope

from ..configcenter.readmodel import INSTANCE_LABEL
from ..storage.models import client_state as cs

_NAME = re.compile(r"^[A-Za-z0-9._:*-]{1,255}$")
BUCKETS = 1_000_000  # percentages to four decimals


class Targets(BaseModel):
    """Who a gray release reaches; every field given must match, any value of a list matches."""

    model_config = ConfigDict(extra="forbid")

    percent: float | None = Field(default=None, gt=0, le=100, description="stable share of the clients in scope")
    labels: list[str] | None = Field(default=None, max_length=100)
    ips: list[str] | None = Field(default=None, max_length=1000)
    apps: list[str] | None = Field(default=None, max_length=100)
    hosts: list[str] | None = Field(default=None, max_length=1000, description="hostnames (or IPs)")
    ykafka: list[str] | None = Field(default=None, max_length=20, description="ykafka versions, '0.1.*' prefixes")
    librdkafka: list[str] | None = Field(default=None, max_length=20, description="librdkafka versions or prefixes")

    @field_validator("labels", "apps", "hosts", "ykafka", "librdkafka")
    @classmethod
    def _names(cls, values: list[str] | None) -> list[str] | None:
        if values is not None and (not values or any(not _NAME.match(v) for v in values)):
            raise ValueError("1-255 characters each: letters, digits, '.', '_', ':', '-', '*' (a prefix)")
        return values

    @field_validator("ips")
    @classmethod
    def _ips(cls, values: list[str] | None) -> list[str] | None:
        if values is not None:
            for value in values:
                try:
                    ipaddress.ip_address(value)
                except ValueError:
                    raise ValueError("invalid client IP") from None
        return values

    def per_instance(self) -> bool:
        """Whether the target must be resolved to client instances (anything beyond IPs and labels)."""
        return any(v is not None for v in (self.percent, self.apps, self.hosts, self.ykafka, self.librdkafka))

    def empty(self) -> bool:
        return not self.per_instance() and self.labels is None and self.ips is None

    def describe(self) -> str:
        parts = [f"{self.percent:g} %" if self.percent is not None else ""]
        for name in ("labels", "ips", "apps", "hosts", "ykafka", "librdkafka"):
            values = getattr(self, name)
            if values is not None:
                parts.append(f"{name} {','.join(values)}")
        return "; ".join(p for p in parts if p) or "every client"


def bucket(namespace: str, client_id: str) -> float:
    """The client's place in [0, 100): ``percent`` selects the clients below it (stable as it grows)."""
    digest = hashlib.sha256(f"{namespace}\0{client_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS * 100 / BUCKETS


def _matches(patterns: list[str] | None, value: str | None) -> bool:
    if patterns is None:
        return True
    text = value or ""
    return any(text.startswith(p[:-1]) if p.endswith("*") else text == p for p in patterns)


def selects(t: Targets, client: dict[str, Any]) -> bool:
    """Whether ``client`` (a row of :func:`in_scope`) matches every dimension but the percentage."""
    if t.labels is not None and client.get("label") not in t.labels:
        return False
    if t.ips is not None and client.get("ip") not in t.ips:
        return False
    if t.hosts is not None and client.get("hostname") not in t.hosts and client.get("ip") not in t.hosts:
        return False
    return (_matches(t.apps, client.get("app_id")) and _matches(t.ykafka, client.get("ykafka_version"))
            and _matches(t.librdkafka, client.get("librdkafka_version")))


def pick(clients: list[dict[str, Any]], t: Targets | None, namespace: str,
         keep: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The clients ``t`` reaches: those matching its dimensions, then of them the ``percent`` whose hash comes
    first (rounded up: the share is exact, not a coin per client), always including ``keep`` (the earlier step's
    canaries still matching), so a client in at 5 % stays in at 25 % even when the population moved."""
    if t is None:
        return list(clients)
    matching = [c for c in clients if selects(t, c)]
    if t.percent is None:
        return matching
    want = math.ceil(len(matching) * t.percent / 100 - 1e-9)
    kept = [c for c in matching if str(c["client_id"]) in keep]
    rest = sorted((c for c in matching if str(c["client_id"]) not in keep),
                  key=lambda c: bucket(namespace, str(c["client_id"])))
    return kept + rest[:max(0, want - len(kept))]


def in_scope(conn: Connection, heartbeat_s: int, scope: Scope, namespace: str) -> list[dict[str, Any]]:
    """Every live client reading ``scope``, with what targeting and the preview need."""
    from ..console import queries  # the console's scope filters (imported late: the console imports the schemas)

    stmt = select(cs.c.app_id, cs.c.client_id, cs.c.ip, cs.c.hostname, cs.c.role, cs.c.cluster,
                  cs.c.ykafka_version, cs.c.librdkafka_version, queries._held(namespace).label("held"),
                  queries._has_errors().label("has_errors"), cs.c.extra["label"].as_string().label("label")
                  ).where(cs.c.last_seen >= queries.online_after(heartbeat_s))
    stmt = queries._scope_filter(stmt, scope.kind.value, scope.name).order_by(cs.c.app_id, cs.c.client_id)
    return [{**row, "has_errors": bool(row["has_errors"]), "online": True} for row in conn.execute(stmt).mappings()]


def instance_labels(client_ids: list[str]) -> list[str]:
    return [INSTANCE_LABEL + cid for cid in client_ids]


def ids_of(labels: list[str] | tuple[str, ...]) -> set[str]:
    """The client ids a gray rule's instance labels name."""
    return {x[len(INSTANCE_LABEL):] for x in labels if x.startswith(INSTANCE_LABEL)}


# --- what a client can honour --------------------------------------------------------------------------

#: the librdkafka version that introduced the property a catalog key sets (older ones ignore or refuse it)
RDKAFKA_SINCE: dict[str, tuple[int, ...]] = {
    "enable.idempotence": (1, 0, 0),
    "batch.size": (1, 5, 0),
    "sticky.partitioning.linger.ms": (1, 5, 0),
}
#: the ykafka version from which a client sends its instance id (per-instance targets reach it)
INSTANCE_SINCE = (0, 1, 0)


def _version(text: str | None) -> tuple[int, ...] | None:
    found = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in found.groups()) if found else None


def cannot_honour(client: dict[str, Any], keys: list[str], per_instance: bool) -> list[str]:
    """Why this client cannot honour the change (empty: it can)."""
    reasons = []
    ykafka = _version(client.get("ykafka_version"))
    if per_instance and (ykafka is None or ykafka < INSTANCE_SINCE):
        shown = client.get("ykafka_version") or "unknown"
        reasons.append(f"ykafka {shown} sends no instance id: per-instance targets cannot reach it")
    rdkafka = _version(client.get("librdkafka_version"))
    for key in keys:
        prop = KEYS[key].rdkafka if key in KEYS else None
        since = RDKAFKA_SINCE.get(prop or "")
        if since and rdkafka is not None and rdkafka < since:
            reasons.append(f"{key}: librdkafka {client.get('librdkafka_version')} lacks {prop} "
                           f"(since {'.'.join(map(str, since))})")
    return reasons


def preview(clients: list[dict[str, Any]], t: Targets | None, namespace: str, keys: list[str],
            keep: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The clients a target reaches, split by app, cluster, host and version, and those that cannot honour it."""
    reached = pick(clients, t, namespace, keep)
    per_instance = t is not None and t.per_instance()
    unable = []
    for c in reached:
        why = cannot_honour(c, keys, per_instance)
        if why:
            unable.append({"client": c, "reasons": why})

    def split(field: str) -> list[tuple[str, int]]:
        return sorted(Counter(str(c.get(field) or "-") for c in reached).items())

    return {"reached": reached, "in_scope": len(clients), "unable": unable,
            "by": {"app": split("app_id"), "cluster": split("cluster"), "host": split("hostname"),
                   "ykafka": split("ykafka_version"), "librdkafka": split("librdkafka_version")}}
