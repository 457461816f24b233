"""Apollo Open API adapter: the only way the MetaServer writes hot config.

It speaks the documented portal Open API (token in the ``Authorization`` header), so it works against
a real Apollo and against the embedded config service alike. Where Apollo versions differ (branch
merge is POST in Apollo's controllers, PATCH in some descriptions; branch items are edited through the
branch's own cluster in Apollo) the adapter tries the real Apollo form first and falls back.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
import structlog

from ykafka.endpoints import Endpoints

log = structlog.get_logger("metaserver.domain.apollo")


class ApolloError(Exception):
    """The config center refused or failed a call; ``status`` is 0 when it could not be reached."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.message = message
        super().__init__(f"config center {method} {path}: {status} {message}".strip())


def _q(part: str) -> str:
    return quote(part, safe="")


class ApolloOpenApi:
    def __init__(self, base_url: str, token: str | None, env: str = "DEV", app_id: str = "ykafka",
                 cluster: str = "default", operator: str = "apollo", timeout_s: float = 10.0) -> None:
        self.endpoints = Endpoints(base_url)  # one config service, or several comma-separated (failover)
        self.env = env
        self.app_id = app_id
        self.cluster = cluster
        self.operator = operator
        self.timeout = timeout_s
        self._session = requests.Session()
        self._session.headers["Content-Type"] = "application/json;charset=UTF-8"
        if token:
            self._session.headers["Authorization"] = token

    # --- transport ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
              ok_missing: bool = False, timeout_s: float | None = None) -> Any:
        timeout = timeout_s or self.timeout
        try:
            response = self.endpoints.call(lambda url: self._session.request(
                method, url + path, params=params, json=body, timeout=timeout), f"openapi {method} {path}")
        except requests.RequestException as exc:
            raise ApolloError(0, f"unreachable: {exc}", method, path) from exc
        if ok_missing and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ApolloError(response.status_code, _message(response), method, path)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _ns_path(self, namespace: str, cluster: str | None = None) -> str:
        return (f"/openapi/v1/envs/{_q(self.env)}/apps/{_q(self.app_id)}/clusters/{_q(cluster or self.cluster)}"
                f"/namespaces/{_q(namespace)}")

    # --- app and namespace -------------------------------------------------------------------

    def ensure_app(self) -> None:
        body = {"assignAppRoleToSelf": True, "admins": [self.operator],
                "app": {"appId": self.app_id, "name": self.app_id, "orgId": "ykafka", "orgName": "ykafka",
                        "ownerName": self.operator, "ownerEmail": f"{self.operator}@localhost"}}
        try:
            self._call("POST", "/openapi/v1/apps", body=body)
        except ApolloError as exc:
            if not _already_exists(exc):
                raise

    def ensure_namespace(self, namespace: str) -> None:
        body = {"name": namespace, "appId": self.app_id, "format": "properties", "isPublic": False,
                "dataChangeCreatedBy": self.operator, "comment": "ykafka hot config"}
        try:
            self._call("POST", f"/openapi/v1/apps/{_q(self.app_id)}/appnamespaces", body=body)
        except ApolloError as exc:
            if not _already_exists(exc):
                raise

    # --- per-app access keys (the embedded config service only: metaserver/configcenter/keyscope.py) ----------

    def put_app_key(self, owner: str, secret: str, scope: dict[str, Any]) -> None:
        """Set ykafka app ``owner``'s own access key and the namespaces it opens (replaces any earlier one)."""
        self._call("PUT", f"/openapi/v1/apps/{_q(self.app_id)}/appkeys/{_q(owner)}",
                   params={"operator": self.operator}, body={"secret": secret, "scope": scope})

    def delete_app_key(self, owner: str) -> None:
        self._call("DELETE", f"/openapi/v1/apps/{_q(self.app_id)}/appkeys/{_q(owner)}",
                   params={"operator": self.operator}, ok_missing=True)

    def app_keys(self) -> dict[str, Any]:
        """Owner -> scope of every per-app key the config service holds for our Apollo app (no secrets)."""
        return dict(self._call("GET", f"/openapi/v1/apps/{_q(self.app_id)}/appkeys", ok_missing=True) or {})

    # --- items and releases ------------------------------------------------------------------

    def namespaces(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Every namespace of our (app, cluster) with its items, in one call."""
        path = f"/openapi/v1/envs/{_q(self.env)}/apps/{_q(self.app_id)}/clusters/{_q(self.cluster)}/namespaces"
        return list(self._call("GET", path, ok_missing=True, timeout_s=timeout_s) or [])

    def items(self, namespace: str, cluster: str | None = None) -> dict[str, str]:
        """All items, following Apollo's pages (50 a page by default) when the server pages them."""
        items: dict[str, str] = {}
        page, size = 0, 500
        while True:
            data = self._call("GET", self._ns_path(namespace, cluster) + "/items", ok_missing=True,
                              params={"page": page, "size": size})
            rows = (data.get("content") if isinstance(data, dict) else data) or []
            items.update({str(row["key"]): str(row.get("value", "")) for row in rows if row.get("key")})
            total = data.get("total") if isinstance(data, dict) else None
            if not isinstance(data, dict) or not rows or total is None or len(items) >= int(total):
                return items
            page += 1

    def set_item(self, namespace: str, key: str, value: str, cluster: str | None = None) -> None:
        body = {"key": key, "value": value, "dataChangeLastModifiedBy": self.operator,
                "dataChangeCreatedBy": self.operator}
        self._call("PUT", f"{self._ns_path(namespace, cluster)}/items/{_q(key)}",
                   params={"createIfNotExists": "true"}, body=body)

    def delete_item(self, namespace: str, key: str, cluster: str | None = None) -> None:
        try:
            self._call("DELETE", f"{self._ns_path(namespace, cluster)}/items/{_q(key)}",
                       params={"operator": self.operator})
        except ApolloError as exc:
            if exc.status != 404:
                raise

    def release(self, namespace: str, title: str, comment: str) -> dict[str, Any]:
        body = {"releaseTitle": title[:64], "releaseComment": comment[:256], "releasedBy": self.operator}
        return dict(self._call("POST", self._ns_path(namespace) + "/releases", body=body) or {})

    def latest_release(self, namespace: str) -> dict[str, Any] | None:
        data = self._call("GET", self._ns_path(namespace) + "/releases/latest", ok_missing=True)
        return dict(data) if data else None

    def rollback(self, release_id: int) -> None:
        self._call("PUT", f"/openapi/v1/envs/{_q(self.env)}/releases/{int(release_id)}/rollback",
                   params={"operator": self.operator})

    # --- who holds which release (Apollo's instance view) ---------------------------------------

    def instances(self, namespace: str, cluster: str | None = None, page_size: int = 500,
                  max_pages: int = 4) -> list[dict[str, Any]]:
        """The clients that fetched a release of the namespace at ``cluster`` (a gray branch's name for its
        holders), as Apollo's ``instances/by-namespace`` lists them (InstanceDTO with its configs), at most
        ``page_size * max_pages``; [] when the config center has no instance view (404)."""
        out: list[dict[str, Any]] = []
        for page in range(max_pages):
            data = self._call("GET", f"/openapi/v1/envs/{_q(self.env)}/instances/by-namespace", ok_missing=True,
                              params={"appId": self.app_id, "clusterName": cluster or self.cluster,
                                      "namespaceName": namespace, "page": page, "size": page_size})
            if not isinstance(data, dict):
                break
            rows = data.get("content") or []
            out.extend(r for r in rows if isinstance(r, dict))
            if len(rows) < page_size or len(out) >= int(data.get("total") or 0):
                break
        return out

    # --- gray release (branches) -------------------------------------------------------------

    def find_branch(self, namespace: str) -> str | None:
        data = self._call("GET", self._ns_path(namespace) + "/branches", ok_missing=True)
        if not data:
            return None
        if isinstance(data, list):
            data = data[0] if data else None
        if not isinstance(data, dict):
            return None
        name = data.get("clusterName") or data.get("branchName") or data.get("name")
        return str(name) if name else None

    def create_branch(self, namespace: str) -> str:
        data = self._call("POST", self._ns_path(namespace) + "/branches", params={"operator": self.operator})
        name = (data or {}).get("clusterName") or (data or {}).get("branchName")
        if not name:
            found = self.find_branch(namespace)
            if not found:
                raise ApolloError(500, "branch created but not found", "POST", "branches")
            return found
        return str(name)

    def branch_rules(self, namespace: str, branch: str) -> tuple[list[str], list[str]]:
        """The (client IPs, client labels) a gray branch is served to."""
        data = self._call("GET", f"{self._ns_path(namespace)}/branches/{_q(branch)}/rules", ok_missing=True)
        ips: list[str] = []
        labels: list[str] = []
        for rule in (data or {}).get("ruleItems") or []:
            ips.extend(str(ip) for ip in rule.get("clientIpList") or [])
            labels.extend(str(label) for label in rule.get("clientLabelList") or [])
        return ips, labels

    def set_branch_rules(self, namespace: str, branch: str, ips: list[str], labels: list[str] | None = None) -> None:
        body = {"appId": self.app_id, "clusterName": self.cluster, "namespaceName": namespace,
                "branchName": branch,
                "ruleItems": [{"clientAppId": self.app_id, "clientIpList": list(ips),
                               "clientLabelList": list(labels or [])}]}
        self._call("PUT", f"{self._ns_path(namespace)}/branches/{_q(branch)}/rules",
                   params={"operator": self.operator}, body=body)

    def set_branch_item(self, namespace: str, branch: str, key: str, value: str) -> None:
        try:  # Apollo: a branch is a child cluster of the namespace
            self.set_item(namespace, key, value, cluster=branch)
        except ApolloError as exc:
            if exc.status not in (404, 405):
                raise
            body = {"key": key, "value": value, "dataChangeLastModifiedBy": self.operator,
                    "dataChangeCreatedBy": self.operator}
            self._call("PUT", f"{self._ns_path(namespace)}/branches/{_q(branch)}/items/{_q(key)}",
                       params={"createIfNotExists": "true"}, body=body)

    def delete_branch_item(self, namespace: str, branch: str, key: str) -> None:
        try:
            self._call("DELETE", f"{self._ns_path(namespace, branch)}/items/{_q(key)}",
                       params={"operator": self.operator})
        except ApolloError as exc:
            if exc.status not in (404, 405):
                raise
            try:
                self._call("DELETE", f"{self._ns_path(namespace)}/branches/{_q(branch)}/items/{_q(key)}",
                           params={"operator": self.operator})
            except ApolloError as inner:
                if inner.status != 404:
                    raise

    def branch_release(self, namespace: str, branch: str, title: str, comment: str) -> dict[str, Any]:
        body = {"releaseTitle": title[:64], "releaseComment": comment[:256], "releasedBy": self.operator}
        return dict(self._call("POST", f"{self._ns_path(namespace)}/branches/{_q(branch)}/releases",
                               params={"operator": self.operator}, body=body) or {})

    def branch_latest_release(self, namespace: str, branch: str) -> dict[str, Any] | None:
        data = self._call("GET", self._ns_path(namespace, branch) + "/releases/latest", ok_missing=True)
        return dict(data) if data else None

    def merge_branch(self, namespace: str, branch: str, title: str, comment: str) -> dict[str, Any]:
        body = {"releaseTitle": title[:64], "releaseComment": comment[:256], "releasedBy": self.operator}
        path = f"{self._ns_path(namespace)}/branches/{_q(branch)}/merge"
        params = {"deleteBranch": "true", "operator": self.operator}
        try:
            return dict(self._call("POST", path, params=params, body=body) or {})
        except ApolloError as exc:
            if exc.status != 405:
                raise
            return dict(self._call("PATCH", path, params=params, body=body) or {})

    def delete_branch(self, namespace: str, branch: str) -> None:
        self._call("DELETE", f"{self._ns_path(namespace)}/branches/{_q(branch)}",
                   params={"operator": self.operator})


def _message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        return str(data.get("message") or data.get("detail") or data.get("error") or data)[:300]
    return str(data)[:300]


def _already_exists(exc: ApolloError) -> bool:
    return exc.status in (400, 409) and ("exist" in exc.message.lower() or exc.status == 409)
