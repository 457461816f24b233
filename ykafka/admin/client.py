"""Typed HTTP client of the MetaServer admin API (what the ``ykafka admin`` CLI and the dev stack use).

Every method maps to one endpoint; a refused call raises :class:`AdminError` carrying the server's
status and message (for hot-config rejections, the per-key reasons).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import requests

from ykafka.endpoints import Endpoints
from ykafka.errors import YKafkaError


class AdminError(YKafkaError):
    """The MetaServer refused an admin call (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.message = message
        self.errors = dict(errors or {})
        detail = "; ".join(f"{key}: {reason}" for key, reason in self.errors.items())
        super().__init__(f"MetaServer answered {status}: {message}" + (f" ({detail})" if detail else ""))


def _message(response: requests.Response) -> tuple[str, dict[str, str]]:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500] or response.reason, {}
    if not isinstance(data, dict):
        return str(data)[:500], {}
    detail = data.get("detail")
    errors = data.get("errors") or {}
    if isinstance(detail, list):  # FastAPI field errors
        errors = {".".join(str(p) for p in item.get("loc", []) if p != "body"): item.get("msg", "")
                  for item in detail if isinstance(item, dict)}
        detail = "invalid request"
    return str(detail), {str(k): str(v) for k, v in errors.items()}


class AdminClient:
    """The MetaServer's admin API. ``url`` may list several peer MetaServers, comma-separated: a call moves to
    the next on a connection error, timeout or 5xx (``ykafka.endpoints``)."""

    def __init__(self, url: str, token: str, operator: str | None = None, timeout_s: float = 30.0) -> None:
        try:
            self.endpoints = Endpoints(url)
        except ValueError as exc:
            raise AdminError(0, f"bad MetaServer URL (--url / YKAFKA_METASERVER): {exc}") from None
        self.timeout = timeout_s
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        if operator:
            self._session.headers["X-Ykafka-Operator"] = operator

    def _call(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self.endpoints.call(lambda url: self._session.request(
                method, url + path, json=json, params=clean, timeout=self.timeout), f"admin {method} {path}")
        except requests.RequestException as exc:
            raise AdminError(0, f"cannot reach the MetaServer at {self.url}: {exc}") from exc
        if response.status_code >= 400:
            message, errors = _message(response)
            raise AdminError(response.status_code, message, errors)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @property
    def url(self) -> str:
        """The MetaServer instance this client talks to now."""
        return self.endpoints.current

    # --- apps ----------------------------------------------------------------------------------

    def list_users(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/admin/users"))

    def create_user(self, username: str, password: str, role: str, replace: bool = False) -> dict[str, Any]:
        """A console user (viewer / operator / admin); the MetaServer keeps only an argon2 hash."""
        return dict(self._call("POST", "/v1/admin/users",
                               json={"username": username, "password": password, "role": role, "replace": replace}))

    def list_apps(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/admin/apps"))

    def get_app(self, app_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/admin/apps/{app_id}"))

    def create_app(self, app_id: str, description: str = "", default_cluster: str | None = None,
                   acl: Mapping[str, Iterable[str]] | None = None) -> dict[str, Any]:
        """Create an app; the answer's ``secret`` is shown this once and never again."""
        body: dict[str, Any] = {"app_id": app_id, "description": description, "default_cluster": default_cluster}
        if acl is not None:
            body["acl"] = {k: list(v) for k, v in acl.items()}
        return dict(self._call("POST", "/v1/admin/apps", json=body))

    def update_app(self, app_id: str, *, description: str | None = None, default_cluster: str | None = None,
                   enabled: bool | None = None) -> dict[str, Any]:
        body = {k: v for k, v in {"description": description, "default_cluster": default_cluster,
                                  "enabled": enabled}.items() if v is not None}
        return dict(self._call("PATCH", f"/v1/admin/apps/{app_id}", json=body))

    def delete_app(self, app_id: str) -> None:
        self._call("DELETE", f"/v1/admin/apps/{app_id}")

    def rotate_secret(self, app_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/admin/apps/{app_id}/rotate-secret"))

    # --- ACL -----------------------------------------------------------------------------------

    def get_acl(self, app_id: str) -> dict[str, list[str]]:
        return dict(self._call("GET", f"/v1/admin/apps/{app_id}/acl"))

    def set_acl(self, app_id: str, produce: Iterable[str] = (), consume: Iterable[str] = (),
                group: Iterable[str] = ()) -> dict[str, list[str]]:
        body = {"produce": list(produce), "consume": list(consume), "group": list(group)}
        return dict(self._call("PUT", f"/v1/admin/apps/{app_id}/acl", json=body))

    # --- topics --------------------------------------------------------------------------------

    def create_topic(self, name: str, app_id: str, cluster: str | None = None, partitions: int = 3,
                     retention_hours: float = 168.0) -> dict[str, Any]:
        """Create ``name`` on ``cluster`` (absent: the least loaded), grant ``app_id`` produce + consume on it
        and set its route: the request and approval of the console in one call."""
        body = {"name": name, "app_id": app_id, "cluster": cluster, "partitions": partitions,
                "retention_hours": retention_hours}
        return dict(self._call("POST", "/v1/admin/topics", json=body))

    # --- clusters ------------------------------------------------------------------------------

    def list_clusters(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/admin/clusters"))

    def get_cluster(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/admin/clusters/{name}"))

    def set_cluster(self, name: str, bootstrap_servers: str, dc: str = "", standby: str | None = None,
                    status: str = "active", security: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``security``: ``{"protocol": "SASL_PLAINTEXT"|"SASL_SSL", "mechanism"?, "ca_pem"?}`` for a cluster
        whose brokers authenticate clients (the MetaServer then issues each app its own principal there)."""
        body = {"bootstrap_servers": bootstrap_servers, "dc": dc, "standby": standby, "status": status,
                "security": dict(security) if security else None}
        return dict(self._call("PUT", f"/v1/admin/clusters/{name}", json=body))

    def rotate_credentials(self, app_id: str) -> dict[str, Any]:
        """New Kafka credentials for the app on every cluster where it has a principal."""
        return dict(self._call("POST", f"/v1/admin/apps/{app_id}/rotate-credentials"))

    def app_kafka(self, app_id: str) -> dict[str, Any]:
        """The app's principals per cluster, desired bindings against those in force, last reconcile."""
        return dict(self._call("GET", f"/v1/admin/apps/{app_id}/kafka"))

    def delete_cluster(self, name: str) -> None:
        self._call("DELETE", f"/v1/admin/clusters/{name}")

    # --- topic placements ------------------------------------------------------------------------

    def place(self, placements: Mapping[str, str]) -> int:
        """Place topics on clusters (at most 10,000 per call; all or nothing)."""
        return int(self._call("PUT", "/v1/admin/placements", json={"placements": dict(placements)})["written"])

    def placements(self, prefix: str = "", cluster: str | None = None, after: str = "",
                   limit: int = 100) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/admin/placements",
                               params={"prefix": prefix, "cluster": cluster, "after": after, "limit": limit}))

    def unplace(self, topic: str) -> None:
        self._call("DELETE", f"/v1/admin/placements/{quote(topic, safe='')}")

    # --- hot config ----------------------------------------------------------------------------

    def push_config(self, scope: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] = (),
                    ips: Iterable[str] | None = None, dry_run: bool = False, comment: str = "",
                    labels: Iterable[str] | None = None, targets: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Validate, write and release hot config at ``scope`` (gray to ``ips`` and / or ``labels`` when given, or
        to the clients ``targets`` selects: percent, labels, ips, apps, hosts, ykafka, librdkafka)."""
        body: dict[str, Any] = {"scope": scope, "set": dict(set or {}), "delete": list(delete), "dry_run": dry_run,
                                "comment": comment}
        if targets is not None:
            body["targets"] = dict(targets)
        if ips is not None:
            body["ips"] = list(ips)
        if labels is not None:
            body["labels"] = list(labels)
        return dict(self._call("POST", "/v1/admin/config", json=body))

    def start_rollout(self, scope: str, set: Mapping[str, Any], steps: Iterable[float] = (5, 25, 100),
                      bake_s: float = 300.0, **more: Any) -> dict[str, Any]:
        """Start a rollout plan (docs/metaserver.md, "Rollout plans"); ``more``: delete, targets, thresholds."""
        body = {"scope": scope, "set": {k: str(v) for k, v in set.items()}, "steps": list(steps), "bake_s": bake_s,
                **more}
        return dict(self._call("POST", "/v1/admin/rollouts", json=body))

    def rollout(self, plan_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/admin/rollouts/{int(plan_id)}"))

    def rollout_action(self, plan_id: int, action: str) -> dict[str, Any]:
        """``pause``, ``resume``, ``abort`` or ``force`` a plan."""
        return dict(self._call("POST", f"/v1/admin/rollouts/{int(plan_id)}/action", json={"action": action}))

    def guard_rules(self) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/admin/guards"))

    def set_guard_rules(self, body: str) -> dict[str, Any]:
        """Replace the guard rules with a YAML text (``rules: [...]``); audited."""
        return dict(self._call("PUT", "/v1/admin/guards", json={"body": body}))

    def get_config(self, scope: str) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/admin/config", params={"scope": scope}))

    def rollback_config(self, scope: str) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/admin/config/rollback", json={"scope": scope}))

    def merge_gray(self, scope: str) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/admin/config/gray/merge", json={"scope": scope}))

    def abandon_gray(self, scope: str) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/admin/config/gray/abandon", json={"scope": scope}))

    # --- clients and audit ---------------------------------------------------------------------

    def clients(self, app: str | None = None, cluster: str | None = None, librdkafka: str | None = None,
                group: str | None = None, online: bool | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        params = {"app": app, "cluster": cluster, "librdkafka": librdkafka, "group": group, "limit": limit,
                  "online": None if online is None else str(online).lower()}
        return list(self._call("GET", "/v1/admin/clients", params=params))

    def client_history(self, app: str | None = None, cluster: str | None = None, librdkafka: str | None = None,
                       group: str | None = None, client_id: str | None = None, since: float | None = None,
                       limit: int = 1000) -> list[dict[str, Any]]:
        params = {"app": app, "cluster": cluster, "librdkafka": librdkafka, "group": group, "client_id": client_id,
                  "since": since, "limit": limit}
        return list(self._call("GET", "/v1/admin/clients/history", params=params))

    def security(self) -> dict[str, Any]:
        """The MetaServer's security switches in force (``{"auth.enabled": true}``)."""
        return dict(self._call("GET", "/v1/admin/security"))

    def set_security(self, **switches: bool) -> dict[str, Any]:
        """Change security switches, the only way there is (audited): ``set_security(auth_enabled=False)``. A config
        namespace never sets them: the config service refuses to store them and the SDK refuses them from one."""
        body = {name.replace("_", "."): value for name, value in switches.items()}
        return dict(self._call("PUT", "/v1/admin/security", json=body))

    def audit(self, operator: str | None = None, action: str | None = None, target: str | None = None,
              since: float | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params = {"operator": operator, "action": action, "target": target, "since": since, "limit": limit}
        return list(self._call("GET", "/v1/admin/audit", params=params))

    # --- observability -------------------------------------------------------------------------

    def post_alert(self, alert: Mapping[str, Any]) -> dict[str, Any]:
        """Store one alert (the pipeline's event shape); a known ``id`` updates the stored alert."""
        return dict(self._call("POST", "/v1/admin/alerts", json=dict(alert)))

    def alerts(self, level: str | Iterable[str] | None = None, rule: str | None = None, status: str | None = None,
               topic: str | None = None, group: str | None = None, client: str | None = None,
               since: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Stored alerts, most recently seen first; ``since`` is a look-back such as ``15m`` or ``2d``."""
        levels = [level] if isinstance(level, str) else list(level) if level is not None else None
        params = {"level": levels or None, "rule": rule, "status": status, "topic": topic, "group": group,
                  "client": client, "since": since, "limit": limit}
        return list(self._call("GET", "/v1/admin/alerts", params=params))

    def aggregates(self, since: str = "15m", topic: str | None = None, group: str | None = None,
                   client: str | None = None, names: Iterable[str] | None = None,
                   by: Iterable[str] | None = None, whole_range: bool = False) -> list[dict[str, Any]]:
        """The pipeline's aggregates per window (``pipeline.aggregates.read_aggregates`` rows)."""
        params = {"since": since, "topic": topic, "group": group, "client": client,
                  "name": list(names) if names is not None else None,
                  "by": ",".join(by) if by is not None else None, "whole_range": "true" if whole_range else None}
        return list(self._call("GET", "/v1/admin/aggregates", params=params))

    def error_rates(self, since: str = "15m", side: str = "send", topic: str | None = None,
                    whole_range: bool = False) -> list[dict[str, Any]]:
        """Errors / (errors + messages) per topic and window."""
        params = {"since": since, "side": side, "topic": topic, "whole_range": "true" if whole_range else None}
        return list(self._call("GET", "/v1/admin/aggregates/errors", params=params))

    def health(self) -> bool:
        try:
            return self._session.get(self.url + "/health", timeout=self.timeout).status_code == 200
        except requests.RequestException:
            return False

    # --- consumer-group offset resets ---------------------------------------------------------------

    def reset_offsets(self, group: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A dry run (``dry_run: true``: the plan) or a reset (the job, ``GET offset_reset`` follows it)."""
        return dict(self._call("POST", f"/v1/admin/groups/{quote(group, safe='')}/offsets/reset", json=dict(body)))

    def offset_reset(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/admin/offset-resets/{quote(job_id, safe='')}"))

    def messages(self, topic: str, **params: Any) -> dict[str, Any]:
        """A bounded read of ``topic`` (partition + offset / since, or key + since; limit, format, cluster)."""
        return dict(self._call("GET", f"/v1/admin/topics/{quote(topic, safe='')}/messages", params=params))
