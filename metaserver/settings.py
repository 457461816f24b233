"""MetaServer settings: one dataclass, every field also an env var ``YKAFKA_MS_<FIELD>``.

Settings travel to uvicorn workers through the environment (``to_env`` / ``from_env``), so a worker
process rebuilds exactly what the ``serve`` command resolved.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "YKAFKA_MS_"


def parse_admin_tokens(text: str) -> dict[str, str]:
    """``name:token,token2`` → ``{"name": "token", "admin2": "token2"}`` (names label the audit trail)."""
    tokens: dict[str, str] = {}
    for index, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, token = part.partition(":")
        if not sep:
            name, token = ("admin" if index == 0 else f"admin{index + 1}"), part
        tokens[name.strip()] = token.strip()
    return tokens


@dataclass
class Settings:
    db_url: str = "sqlite:///metaserver.storage.db"
    host: str = "127.0.0.1"
    port: int = 7070
    workers: int = 1
    #: largest request body accepted (413 before parsing beyond it)
    max_body_bytes: int = 1024 * 1024
    #: config service URL (Apollo ``/configs``, ``/notifications/v2``) handed to clients
    configcenter_url: str | None = None
    #: Apollo portal URL for the Open API; defaults to ``configcenter_url`` (the embedded service serves both)
    configcenter_openapi_url: str | None = None
    configcenter_openapi_token: str | None = None
    #: the config service's one shared access-key secret: no longer handed out (issue 37); setting it turns
    #: ``configcenter_app_keys`` on, since a config service that demands signatures needs them
    configcenter_access_key_secret: str | None = None
    #: give each app its own config-center access key in its grant, scoped to the namespaces it may read, and keep
    #: them on the config service (metaserver/domain/configkeys.py; the secured stack turns it on)
    configcenter_app_keys: bool = False
    apollo_env: str = "DEV"
    apollo_app_id: str = "ykafka"
    apollo_cluster: str = "default"
    #: the Apollo user written as operator (a real Apollo checks it exists); the admin's name goes in comments
    apollo_operator: str = "apollo"
    admin_tokens: dict[str, str] = field(default_factory=dict)
    renew_interval: int = 30
    token_ttl: int = 600
    default_cluster: str | None = None
    #: signed requests whose timestamp is further off than this are refused; nonces live this long
    auth_window_s: int = 300
    #: failed authentications per app and per source IP tolerated within ``auth_fail_window_s``
    auth_fail_limit: int = 20
    auth_fail_window_s: int = 60
    #: how long a read of the security switches (``auth.enabled``) from the database is trusted
    auth_switch_ttl_s: float = 2.0
    #: how long the config center's route values (what a grant may reach) are trusted before a re-read
    route_cache_s: float = 30.0
    #: root of the pipeline's Parquet store (path or pyarrow URI) served by ``GET /v1/admin/aggregates``
    pipeline_store: str | None = None
    log_level: str = "info"
    #: the MetaServer's super user on secured clusters (creates each app's SCRAM user and ACL bindings);
    #: give the password through YKAFKA_MS_KAFKA_ADMIN_PASSWORD, never on the command line
    kafka_admin_user: str | None = None
    kafka_admin_password: str | None = None
    #: a folder of per-cluster super-user passwords, ``<registry name>.password`` (0600): each secured cluster its
    #: own super user, so one cluster's password never opens another (issue 37). A cluster without a file falls
    #: back to ``kafka_admin_password``, if given
    kafka_admin_password_dir: str | None = None
    #: comma-separated addresses of reverse proxies whose X-Forwarded-For is believed (the source address failures
    #: are counted against); unset: none, every caller is its own peer address
    forwarded_allow_ips: str | None = None
    #: the key that seals app Kafka passwords and signing keys, kept outside the database (domain/sealing.py):
    #: a file (0600) or YKAFKA_MS_SEALING_KEY; the previous one while rotating. Unset: derived from the database
    sealing_key_file: str | None = None
    sealing_key: str | None = None
    sealing_key_previous_file: str | None = None
    sealing_key_previous: str | None = None
    #: comma-separated SCRAM users of a secured cluster's own nodes (its inter-broker principal) the reconciler
    #: keeps; every other user and binding it did not issue is deleted as foreign (alerted and audited)
    kafka_system_users: str | None = None
    #: seconds between ACL reconciles of every secured cluster (also one after every change); 0: changes only
    acl_reconcile_s: float = 60.0
    #: how long a rotated app credential keeps working, so every client renews onto the new one first
    #: (default: two renew intervals plus a minute)
    credential_grace_s: float | None = None
    #: the client inventory's retention: clients not seen for this long leave the real-time view, history rows
    #: (one per changed report) older than this are deleted; checked every ``client_prune_s`` (0: never)
    client_retention_days: float = 7.0
    client_history_days: float = 7.0
    client_prune_s: float = 3600.0
    #: the console role that sees message values when browsing a topic (lower roles see metadata only)
    console_values_role: str = "operator"
    #: the console role that may export browsed messages as JSON lines
    console_export_role: str = "admin"
    #: YAML file of masking rules: topic name (or prefix ending in ``*``) -> JSON paths masked when browsing
    console_masks: str | None = None
    #: console single sign-on (OpenID Connect, metaserver/console/sso.py): the provider's issuer URL; unset: off
    console_oidc_issuer: str | None = None
    console_oidc_client_id: str | None = None
    #: give it through YKAFKA_MS_CONSOLE_OIDC_CLIENT_SECRET, never on the command line
    console_oidc_client_secret: str | None = None
    #: where the provider sends the browser back: ``https://<console host>/console/sso/callback``
    console_oidc_redirect_uri: str | None = None
    console_oidc_scopes: str = "openid profile email"
    #: the ID token (or userinfo) claim holding the user's groups or roles, a list or one string
    console_oidc_claim: str = "groups"
    #: claim value -> console role, ``ykafka-admins:admin,ykafka-ops:operator``; the highest matching role wins
    console_oidc_roles: str | None = None
    #: the claim the console user is named after (``sso:<value>``); ``sub`` when the token lacks it
    console_oidc_username_claim: str = "preferred_username"

    @property
    def credential_grace(self) -> float:
        return self.credential_grace_s if self.credential_grace_s is not None else 2 * self.renew_interval + 60

    @property
    def kafka_kept_users(self) -> frozenset[str]:
        """SCRAM users the reconciler never deletes: the MetaServer's own and the nodes' (``kafka_system_users``)."""
        kept = {u.strip() for u in (self.kafka_system_users or "").split(",") if u.strip()}
        return frozenset(kept | ({self.kafka_admin_user} if self.kafka_admin_user else set()))

    @property
    def app_keys(self) -> bool:
        """Whether grants carry per-app config-center keys (never the shared secret)."""
        return bool(self.configcenter_app_keys or self.configcenter_access_key_secret)

    @property
    def openapi_url(self) -> str | None:
        return self.configcenter_openapi_url or self.configcenter_url

    def to_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "admin_tokens":
                value = ",".join(f"{name}:{token}" for name, token in value.items())
            env[ENV_PREFIX + f.name.upper()] = str(value)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _coerce(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _coerce(name: str, type_: Any, raw: str) -> Any:
    if name == "admin_tokens":
        return parse_admin_tokens(raw)
    text = str(type_)
    if text == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if text.startswith("int"):
        return int(raw)
    if text.startswith("float"):
        return float(raw)
    return raw or None if "None" in text else raw
