"""The grant: what the MetaServer allows an app, and where things are. One module owns its wire form.

The MetaServer builds it with :func:`grant_json` and the SDK reads it with :meth:`Grant.from_json`, so the
shape is written down once (``metaserver/schemas.py`` only documents it for the OpenAPI schema). Pure data:
importing this loads no client code (docs/architecture.md, "Contracts").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ykafka import acl as acl_patterns
from ykafka.errors import AuthError


@dataclass(frozen=True)
class ClusterInfo:
    """One Kafka cluster the app may use, as the grant describes it."""

    name: str
    bootstrap_servers: str
    dc: str = ""
    standby: str | None = None
    status: str = "active"
    sasl: dict[str, str] | None = None

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> ClusterInfo:
        sasl = data.get("sasl")  # the app's own principal on this cluster (only on a secured one)
        return cls(name=str(data.get("name") or name), bootstrap_servers=str(data["bootstrap_servers"]),
                   dc=str(data.get("dc") or ""), standby=data.get("standby") or None,
                   status=str(data.get("status") or "active"), sasl=dict(sasl) if sasl else None)

    def rdkafka(self) -> dict[str, Any]:
        """librdkafka connection properties for this cluster: on a secured one, the app's own principal (a
        rotation changes them, so a Producer's next send builds a new client and drains the old one)."""
        props: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.sasl:
            props.update({
                "security.protocol": self.sasl.get("security_protocol") or "SASL_PLAINTEXT",
                "sasl.mechanism": self.sasl.get("mechanism") or "SCRAM-SHA-512",
                "sasl.username": self.sasl.get("username") or "",
                "sasl.password": self.sasl.get("password") or "",
            })
            if self.sasl.get("ca_pem"):
                props["ssl.ca.pem"] = self.sasl["ca_pem"]
        return props


@dataclass(frozen=True)
class ConfigCenterInfo:
    """Where the hot-config namespaces live (Apollo coordinates)."""

    url: str | None
    app_id: str = "ykafka"
    cluster: str = "default"
    namespace_prefix: str = "ykafka"
    access_key_secret: str | None = None


@dataclass(frozen=True)
class Grant:
    """What the MetaServer allows this app, and where things are."""

    app_id: str
    token: str
    expires_at: float
    renew_interval_s: float
    acl: dict[str, list[str]]
    clusters: dict[str, ClusterInfo]
    default_cluster: str
    configcenter: ConfigCenterInfo
    issuer: str = ""  # the issuing deployment's id (every peer of one MetaServer reports the same)
    placements: bool = False  # the MetaServer places topics: ask it where an unseen topic lives
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Grant:
        try:
            clusters = {name: ClusterInfo.from_json(name, spec) for name, spec in (data.get("clusters") or {}).items()}
            cc = data.get("configcenter") or {}
            return cls(
                app_id=str(data["app_id"]),
                token=str(data["token"]),
                expires_at=float(data["expires_at"]),
                renew_interval_s=max(1.0, float(data.get("renew_interval_s") or 60)),
                acl={op: list((data.get("acl") or {}).get(op) or []) for op in acl_patterns.OPERATIONS},
                clusters=clusters,
                default_cluster=str(data.get("default_cluster") or next(iter(clusters), "")),
                configcenter=ConfigCenterInfo(
                    url=(cc.get("url") or None), app_id=str(cc.get("app_id") or "ykafka"),
                    cluster=str(cc.get("cluster") or "default"),
                    namespace_prefix=str(cc.get("namespace_prefix") or "ykafka"),
                    access_key_secret=cc.get("access_key_secret") or None),
                issuer=str(data.get("issuer") or ""),
                placements=bool(data.get("placements")),
                raw=dict(data),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AuthError(f"malformed grant from the MetaServer: {exc!r}") from None

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires_at

    def summary(self) -> dict[str, Any]:
        """Loggable view (no token, no credentials)."""
        return {"app_id": self.app_id, "expires_at": self.expires_at, "clusters": sorted(self.clusters),
                "default_cluster": self.default_cluster, "acl": self.acl,
                "configcenter": asdict(self.configcenter) | {"access_key_secret": None}}


def grant_json(*, app_id: str, token: str, expires_at: float, renew_interval_s: float,
               acl: Mapping[str, Iterable[str]], clusters: Mapping[str, Mapping[str, Any]],
               default_cluster: str | None, configcenter: Mapping[str, Any], issuer: str,
               placements: bool = False) -> dict[str, Any]:
    """The grant as the MetaServer sends it (a plain dict: built on every grant, so no model validation)."""
    return {
        "app_id": app_id,
        "token": token,
        "expires_at": expires_at,
        "renew_interval_s": renew_interval_s,
        "acl": {op: list(acl.get(op, [])) for op in acl_patterns.OPERATIONS},
        "clusters": {name: dict(spec) for name, spec in clusters.items()},
        "default_cluster": default_cluster,
        "configcenter": {key: configcenter.get(key) for key in CONFIGCENTER_FIELDS},
        "issuer": issuer,
        "placements": placements,
    }


CONFIGCENTER_FIELDS = ("url", "app_id", "cluster", "namespace_prefix", "access_key_secret")
