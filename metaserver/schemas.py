"""Request and response shapes of the MetaServer HTTP API (pydantic, unknown fields refused)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ykafka import acl as acl_patterns

from .kafka import acls as kafka_acls
from .rollouts.targets import Targets

ClusterStatus = Literal["active", "draining", "down"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _name(value: str) -> str:
    problem = acl_patterns.name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# --- SDK-facing ------------------------------------------------------------------------------


class Want(Strict):
    """A cluster a route value in force names, and the namespace it is in (see metaserver/domain/reach.py)."""

    namespace: str = Field(min_length=1, max_length=255)
    cluster: str = Field(min_length=1, max_length=255)


class GrantRequest(Strict):
    app_id: str = Field(min_length=1, max_length=128)
    client_id: str = Field(min_length=1, max_length=255)
    ip: str = Field(max_length=64)
    want: list[Want] = Field(default_factory=list, max_length=100)


class RenewRequest(Strict):
    want: list[Want] = Field(default_factory=list, max_length=100)


class Versions(Strict):
    ykafka: str | None = Field(default=None, max_length=64)
    confluent_kafka: str | None = Field(default=None, max_length=64)
    librdkafka: str | None = Field(default=None, max_length=64)


class ClientReport(Strict):
    client_id: str = Field(min_length=1, max_length=255)
    app_id: str = Field(min_length=1, max_length=128)
    ip: str | None = Field(default=None, max_length=64)
    hostname: str | None = Field(default=None, max_length=255)
    pid: int | None = None
    #: when the client's process started (epoch s): with hostname and pid, the process holding the client
    process_started: float | None = None
    language: str | None = Field(default=None, max_length=32)
    versions: Versions = Field(default_factory=Versions)
    role: Literal["producer", "consumer"]
    topics: list[str] = Field(default_factory=list, max_length=10_000)
    group: str | None = Field(default=None, max_length=255)
    cluster: str | None = Field(default=None, max_length=200)
    config_release_keys: dict[str, str] = Field(default_factory=dict)
    state: str | None = Field(default=None, max_length=64)
    errors: list[str] = Field(default_factory=list, max_length=1000)
    extra: dict[str, Any] = Field(default_factory=dict)


class ClusterSecurity(Strict):
    """How a cluster's brokers authenticate clients; the credentials themselves are issued per app."""

    protocol: Literal["SASL_PLAINTEXT", "SASL_SSL"]
    mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = "SCRAM-SHA-512"
    ca_pem: str | None = Field(default=None, max_length=65536,
                               description="PEM of the CA that signed the brokers' certificates (SASL_SSL)")


class SaslGrant(BaseModel):
    """The app's own principal on one cluster (never shared with another app)."""

    mechanism: str
    username: str
    password: str
    security_protocol: str
    ca_pem: str | None = None


class ClusterOut(BaseModel):
    name: str
    bootstrap_servers: str
    dc: str
    standby: str | None
    status: ClusterStatus
    security: ClusterSecurity | None
    sasl: SaslGrant | None = Field(default=None, description="in a grant only: this app's credentials")


class Acl(Strict):
    produce: list[str] = Field(default_factory=list)
    consume: list[str] = Field(default_factory=list)
    group: list[str] = Field(default_factory=list)

    @field_validator("produce", "consume", "group")
    @classmethod
    def _patterns(cls, values: list[str], info: ValidationInfo) -> list[str]:
        topics = info.field_name in ("produce", "consume")  # no topic pattern reaches into the retry namespace
        for index, value in enumerate(values):
            problem = kafka_acls.topic_pattern_problem(value) if topics else kafka_acls.pattern_problem(value)
            if problem is not None:  # the reason, never the input back
                raise ValueError(f"pattern {index + 1}: {problem}")
        return sorted(set(values))


class ConfigCenterInfo(BaseModel):
    url: str | None
    app_id: str
    cluster: str
    namespace_prefix: str
    access_key_secret: str | None


class Grant(BaseModel):
    """Documents the grant; the server builds it as a plain dict for speed."""

    app_id: str
    token: str
    expires_at: float
    renew_interval_s: int
    acl: Acl
    clusters: dict[str, ClusterOut]
    default_cluster: str | None
    configcenter: ConfigCenterInfo
    issuer: str = Field(description="the issuing deployment's id; every peer on one database reports the same")
    placements: bool = Field(description="the MetaServer places topics: ask GET /v1/placements/{topic}")


# --- admin -----------------------------------------------------------------------------------


class AppCreate(Strict):
    app_id: str
    description: str = Field(default="", max_length=2000)
    default_cluster: str | None = None
    acl: Acl | None = None

    @field_validator("app_id")
    @classmethod
    def _app_id(cls, value: str) -> str:
        return _name(value)


class AppUpdate(Strict):
    description: str | None = Field(default=None, max_length=2000)
    default_cluster: str | None = None
    enabled: bool | None = None


class ClusterPut(Strict):
    bootstrap_servers: str = Field(min_length=1, max_length=4096)
    dc: str = Field(default="", max_length=100)
    standby: str | None = None
    status: ClusterStatus = "active"
    security: ClusterSecurity | None = Field(
        default=None, description="broker-side authentication; the MetaServer issues each app its own principal")


class ConfigPush(Strict):
    scope: str
    set: dict[str, str | int | float | bool | list[int]] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)
    ips: list[str] | None = Field(default=None, max_length=1000)
    labels: list[str] | None = Field(default=None, max_length=100,
                                     description="gray release to clients carrying one of these labels")
    targets: Targets | None = Field(default=None, description="a gray release to the clients these select "
                                    "(percentage, labels, IPs, apps, hosts, versions); instead of ips / labels")
    dry_run: bool = False
    comment: str = Field(default="", max_length=200)


class ScopeBody(Strict):
    scope: str


# --- observability ---------------------------------------------------------------------------

ALERT_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
LEVEL_RE = re.compile(r"^[A-Za-z_]{1,16}$")
MAX_EVIDENCE_BYTES = 1_000_000


class AlertIn(Strict):
    """One alert as ``pipeline.alerts.AlertManager`` posts it (its ``__ykafka_alerts`` event).

    ``evidence`` is a JSON object; the Kafka event's JSON-encoded string form is accepted too, so an
    alert read off ``__ykafka_alerts`` can be posted as it is.
    """

    ts: int = Field(ge=0, description="when the pipeline judged it, epoch ms")
    id: str = Field(description="stable per (rule, subject, level): re-posting it updates the stored alert")
    rule: str = Field(min_length=1, max_length=128)
    level: str = Field(description="WARN / ERR / STALL / STOP / LOSS / OK or a rule's own level")
    status: Literal["firing", "resolved"] = "firing"
    topic: str | None = Field(default=None, max_length=255)
    group: str | None = Field(default=None, max_length=255)
    partition: int | None = Field(default=None, ge=0)
    client_id: str | None = Field(default=None, max_length=255)
    reason: str = Field(min_length=1, max_length=10_000)
    evidence: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ALERT_ID_RE.match(value):
            raise ValueError("1-64 characters of letters, digits, '.', '_', ':', '-'")
        return value

    @field_validator("level")
    @classmethod
    def _level(cls, value: str) -> str:
        if not LEVEL_RE.match(value):
            raise ValueError("1-16 letters, e.g. WARN, ERR, STALL, STOP, LOSS, OK")
        return value.upper()

    @field_validator("evidence", mode="before")
    @classmethod
    def _evidence(cls, value: Any) -> Any:
        if isinstance(value, str | bytes):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("must be a JSON object")
        if len(json.dumps(value, default=str)) > MAX_EVIDENCE_BYTES:
            raise ValueError(f"larger than {MAX_EVIDENCE_BYTES} bytes of JSON")
        return value


class SecuritySwitches(Strict):
    """``PUT /v1/admin/security``: the security switches (``ykafka.catalog.LOCKED``); an absent one is unchanged."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    auth_enabled: bool | None = Field(default=None, alias="auth.enabled",
                                      description="MetaServer enforcement of app secrets (false: unsigned grants)")


class TopicCreate(Strict):
    """``POST /v1/admin/topics``: an admin's topic request, approved at once (what the console's request and
    approval do in two steps: create on the cluster, grant the app produce + consume, set the route)."""

    name: str = Field(min_length=1, max_length=249, description="the topic; the app and the route use this name")
    app_id: str = Field(min_length=1, max_length=100, description="the app granted produce and consume on it")
    cluster: str | None = Field(default=None, max_length=100,
                                description="where it lives; absent: the least loaded active cluster")
    partitions: int = Field(default=3, ge=1, le=1000)
    retention_hours: float = Field(default=168.0, ge=0.01, le=24 * 366)

    _names = field_validator("name", "app_id")(_name)
