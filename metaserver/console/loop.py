"""The closed loop: which live clients a scope reaches, and whether each applied or rejected what is in force.

A client reports, per namespace, the release key it holds (``config_release_keys``) and the values it
refused (``extra.errors`` entries of type ``config_rejected`` carrying that release key); it posts a report
right after every change. The config service joins the keys of the releases it merged with ``+``, so a
client holds a release when its key is one of those parts. Clients on a gray release's IPs are judged
against the branch release, the rest against the main one (docs/architecture.md, "hot config").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ykafka.catalog import Scope, ScopeKind

from ..configcenter.readmodel import INSTANCE_LABEL


@dataclass(frozen=True)
class Target:
    """The release keys in force for one namespace: the main line and, when live, the gray branch."""

    namespace: str
    main_key: str | None
    gray_key: str | None = None
    gray_ips: tuple[str, ...] = ()
    gray_branch: str | None = None
    gray_labels: tuple[str, ...] = ()

    def in_gray(self, client: dict[str, Any]) -> bool:
        """Served the gray release: its IP or its label (``ykafka.client.label``) is in the branch's rules."""
        return bool(self.gray_key) and gray_match(client, list(self.gray_ips), list(self.gray_labels))

    def key_for(self, client: dict[str, Any]) -> str | None:
        return self.gray_key if self.in_gray(client) else self.main_key


def target(current: dict[str, Any], main_release: dict[str, Any] | None,
           gray_release: dict[str, Any] | None) -> Target:
    gray = current.get("gray") or {}
    return Target(current["namespace"], (main_release or {}).get("releaseKey"),
                  (gray_release or {}).get("releaseKey") if gray else None, tuple(gray.get("ips") or ()),
                  gray.get("branch") if gray else None, tuple(gray.get("labels") or ()))


def gray_match(client: dict[str, Any], ips: list[str] | None, labels: list[str] | None) -> bool:
    """Whether a gray release to ``ips`` and / or ``labels`` reaches this client (no gray: everyone)."""
    if ips is None and labels is None:
        return True
    return (client.get("ip") in (ips or ()) or client_label(client) in (labels or ())
            or INSTANCE_LABEL + str(client.get("client_id")) in (labels or ()))  # a rollout step's instances


def client_label(client: dict[str, Any]) -> str | None:
    """The client's ``ykafka.client.label``: picked out in SQL (``label``) or in its report's ``extra``."""
    return client.get("label") or (client.get("extra") or {}).get("label") or None


def reaches(client: dict[str, Any], scope: Scope, ips: list[str] | None = None,
            labels: list[str] | None = None) -> bool:
    """Whether a change at ``scope`` (to ``ips`` / ``labels`` only, for a gray release) applies to this client."""
    if not gray_match(client, ips, labels):
        return False
    if scope.kind is ScopeKind.GLOBAL:
        return True
    if scope.kind is ScopeKind.CLUSTER:
        return bool(client.get("cluster") == scope.name)
    if scope.kind is ScopeKind.GROUP:
        return bool(client.get("group") == scope.name)
    return scope.name in (client.get("topics") or [])


RejectionsOf = Callable[[dict[str, Any]], list[dict[str, Any]]]


def _embedded(client: dict[str, Any]) -> list[dict[str, Any]]:
    return list((client.get("extra") or {}).get("errors") or [])


def status(client: dict[str, Any], tgt: Target, rejections_of: RejectionsOf = _embedded) -> tuple[str, str]:
    """("applied" | "rejected" | "pending" | "none", detail) of one client against the release in force for it.

    ``rejections_of`` reads the client's structured rejections; it is called only when the client holds the
    release and reports errors at all (the ``errors`` strings), so a large panel reads few ``extra`` blobs.
    """
    want = tgt.key_for(client)
    if "held" in client:  # picked out in SQL (console.queries.reached)
        held, has_errors = client["held"] or "", bool(client.get("has_errors"))
    else:
        held, has_errors = ((client.get("config_release_keys") or {}).get(tgt.namespace)) or "", True
    if not want:
        return "none", "no release at this scope yet"
    if want not in held.split("+"):
        return "pending", "waiting for the client's report"
    if not has_errors:
        return "applied", ""
    reasons = [f"{e.get('key')}={e.get('value')}: {e.get('reason')}"
               for e in rejections_of(client)
               if isinstance(e, dict) and e.get("type") == "config_rejected" and e.get("namespace") == tgt.namespace
               and e.get("release_key") == held]
    if reasons:
        return "rejected", "; ".join(reasons)
    return "applied", ""


def panel(clients: list[dict[str, Any]], scope: Scope, tgt: Target,
          rejections_of: RejectionsOf = _embedded) -> list[dict[str, Any]]:
    """The live clients a scope reaches, each with its status against the release in force."""
    rows = []
    for client in clients:
        if not client.get("online") or ("held" not in client and not reaches(client, scope)):
            continue
        state, detail = status(client, tgt, rejections_of)
        rows.append({"client": client, "status": state, "detail": detail,
                     "gray": tgt.in_gray(client)})
    return rows


def _seen(text: Any) -> float | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        return None


def apollo_clients(instances: list[dict[str, Any]], namespace: str, known_ips: set[str],
                   fresh_after: float) -> list[dict[str, Any]]:
    """Clients the config service saw fetch ``namespace`` (its Apollo instance records) that send no ykafka
    report (their IP is in no report), seen after ``fresh_after``: third-party Apollo clients. Each is
    shaped as a panel client with ``held`` (the release key it holds) and ``apollo`` set."""
    out: dict[str, dict[str, Any]] = {}
    for inst in instances:
        ip = str(inst.get("ip") or "")
        if not ip or ip in known_ips:
            continue
        for cfg in inst.get("configs") or []:
            release = cfg.get("release") or {}
            if str(release.get("namespaceName", namespace)).lower() != namespace.lower():
                continue
            seen = _seen(cfg.get("dataChangeLastModifiedTime"))
            if seen is None or seen < fresh_after:
                continue
            key = f"{inst.get('appId')}/{inst.get('clusterName')}/{inst.get('dataCenter') or ''}/{ip}"
            if key in out and out[key]["last_seen"] >= seen:
                continue
            out[key] = {"app_id": str(inst.get("appId") or ""), "client_id": f"apollo:{ip}", "ip": ip,
                        "hostname": str(inst.get("dataCenter") or ""), "role": "Apollo client",
                        "held": str(release.get("releaseKey") or ""), "has_errors": False, "online": True,
                        "apollo": True, "last_seen": seen, "cluster": str(inst.get("clusterName") or "")}
    return sorted(out.values(), key=lambda c: (c["ip"], c["app_id"]))
