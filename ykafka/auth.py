"""Grants from the MetaServer: signed authentication, renewal, an on-disk cache and the ACL cache.

A client may start while the MetaServer is briefly down as long as a grant it obtained earlier has not
expired; the grant is therefore cached on disk (mode 0600: it holds a bearer token and maybe broker
credentials). A rejected secret (401) is never papered over with the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
import structlog
from cachetools import TTLCache

from ykafka import acl as acl_patterns
from ykafka.endpoints import Endpoints
from ykafka.errors import AclDenied, AuthError, MetaServerUnavailable
from ykafka.signing import derive_key, signed_headers

log = structlog.get_logger(__name__)

GRANT_PATH = "/v1/auth/grant"
RENEW_PATH = "/v1/auth/renew"
REPORT_PATH = "/v1/clients/report"


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
        sasl = data.get("sasl")
        return cls(name=str(data.get("name") or name), bootstrap_servers=str(data["bootstrap_servers"]),
                   dc=str(data.get("dc") or ""), standby=data.get("standby") or None,
                   status=str(data.get("status") or "active"), sasl=dict(sasl) if sasl else None)

    def rdkafka(self) -> dict[str, Any]:
        """librdkafka connection properties for this cluster."""
        props: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.sasl:
            props.update({
                "security.protocol": self.sasl.get("security_protocol", "SASL_PLAINTEXT"),
                "sasl.mechanism": self.sasl.get("mechanism", "PLAIN"),
                "sasl.username": self.sasl.get("username", ""),
                "sasl.password": self.sasl.get("password", ""),
            })
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


class GrantStore:
    """The on-disk grant cache: one JSON file per app, written atomically with mode 0600."""

    def __init__(self, cache_dir: Path, app_id: str) -> None:
        self.path = cache_dir / "grants" / f"{_safe(app_id)}.json"

    def save(self, grant: Grant) -> None:
        try:
            _write_private(self.path, json.dumps(grant.raw))
        except OSError as exc:
            log.warning("ykafka.grant.cache_write_failed", path=str(self.path), error=str(exc))

    def load(self) -> Grant | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        try:
            return Grant.from_json(data)
        except AuthError:
            return None


class GrantClient:
    """Talks to the MetaServer: authenticate (signed), renew (bearer), post client reports."""

    def __init__(self, metaserver: str, app_id: str, secret: str, client_id: str, ip: str,
                 cache_dir: Path, timeout_s: float = 5.0) -> None:
        self.endpoints = Endpoints(metaserver)  # one URL or a comma-separated list of peer instances
        self.app_id = app_id
        self.client_id = client_id
        self.ip = ip
        self.timeout_s = timeout_s
        self.store = GrantStore(cache_dir, app_id)
        self._secret = secret
        self._key: bytes | None = None
        self._session = requests.Session()
        self._lock = threading.Lock()

    @property
    def metaserver(self) -> str:
        """The MetaServer instance this client talks to now."""
        return self.endpoints.current

    def _post(self, path: str, **kwargs: Any) -> requests.Response:
        """POST to the current instance; on a connection error, timeout or 5xx move to the next peer and retry
        (each instance at most once per call). The last failure is raised or returned."""
        for attempt in range(len(self.endpoints.urls)):
            url = self.endpoints.current
            try:
                with self._lock:
                    resp = self._session.post(url + path, timeout=self.timeout_s, **kwargs)
            except requests.RequestException:
                if attempt == len(self.endpoints.urls) - 1:
                    raise
                log.warning("ykafka.metaserver.instance_failed", url=url, path=path, attempt=attempt)
            else:
                if resp.status_code < 500 or attempt == len(self.endpoints.urls) - 1:
                    if resp.status_code < 500:
                        self.endpoints.succeeded()
                    return resp
                log.warning("ykafka.metaserver.instance_failed", url=url, path=path, status=resp.status_code)
            self.endpoints.failed(url)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _signing_key(self) -> bytes:
        if self._key is None:
            self._key = derive_key(self.app_id, self._secret)
        return self._key

    def authenticate(self) -> Grant:
        """A fresh grant; raises :class:`AuthError` if refused, :class:`MetaServerUnavailable` if unreachable."""
        body = json.dumps({"app_id": self.app_id, "client_id": self.client_id, "ip": self.ip}).encode()
        headers = signed_headers(self.app_id, self._signing_key(), "POST", GRANT_PATH, body)
        headers["Content-Type"] = "application/json"
        grant = self._grant_request(GRANT_PATH, body, headers)
        if grant.app_id != self.app_id:
            raise AuthError(f"MetaServer returned a grant for {grant.app_id!r}, expected {self.app_id!r}")
        return grant

    def renew(self, grant: Grant) -> Grant:
        """Renew with the bearer token; re-authenticate when the token is rejected."""
        headers = {"Authorization": f"Bearer {grant.token}", "Content-Type": "application/json"}
        try:
            return self._grant_request(RENEW_PATH, b"{}", headers)
        except MetaServerUnavailable:
            raise
        except AuthError:
            log.info("ykafka.grant.token_rejected", app_id=self.app_id)
            return self.authenticate()

    def obtain(self) -> Grant:
        """Start-up: authenticate, else fall back to an unexpired cached grant while the MetaServer is down."""
        try:
            return self.authenticate()
        except MetaServerUnavailable as exc:
            cached = self.store.load()
            if cached is not None and cached.app_id == self.app_id and not cached.expired():
                log.warning("ykafka.grant.using_cache", app_id=self.app_id, reason=str(exc),
                            expires_in_s=round(cached.expires_at - time.time(), 1))
                return cached
            raise MetaServerUnavailable(
                f"MetaServer {self.metaserver} unreachable ({exc}) and no unexpired cached grant in "
                f"{self.store.path}") from None

    def _grant_request(self, path: str, body: bytes, headers: dict[str, str]) -> Grant:
        try:
            resp = self._post(path, data=body, headers=headers)
        except requests.RequestException as exc:
            raise MetaServerUnavailable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code in (401, 403):
            raise AuthError(f"MetaServer refused app {self.app_id!r}: {_detail(resp)}")
        if resp.status_code == 429 or resp.status_code >= 500:
            raise MetaServerUnavailable(f"HTTP {resp.status_code} from {path}: {_detail(resp)}")
        if resp.status_code != 200:
            raise AuthError(f"HTTP {resp.status_code} from {path}: {_detail(resp)}")
        try:
            data = resp.json()
        except ValueError:
            raise AuthError(f"MetaServer answered {path} with non-JSON") from None
        grant = Grant.from_json(data)
        self.store.save(grant)
        return grant

    def report(self, grant: Grant, body: Mapping[str, Any]) -> bool:
        """Post a client report; best-effort (False on any failure)."""
        try:
            resp = self._post(REPORT_PATH, json=dict(body), headers={"Authorization": f"Bearer {grant.token}"})
        except requests.RequestException as exc:
            log.debug("ykafka.report.failed", error=str(exc))
            return False
        if resp.status_code >= 300:
            log.debug("ykafka.report.rejected", status=resp.status_code, detail=_detail(resp))
            return False
        return True

    def close(self) -> None:
        self._session.close()


class AclCache:
    """ACL decisions from the current grant, cached per (operation, name) for a TTL.

    ``grant=None`` means local mode: everything is allowed (no MetaServer, nothing to enforce).
    """

    def __init__(self, ttl_s: float, maxsize: int = 10_000) -> None:
        self._ttl = max(ttl_s, 0.001)
        self._cache: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=maxsize, ttl=self._ttl)
        self._grant: Grant | None = None
        self._lock = threading.Lock()

    def reset(self, grant: Grant | None) -> None:
        with self._lock:
            self._grant = grant
            self._cache.clear()

    def allowed(self, operation: acl_patterns.Operation, name: str) -> bool:
        grant = self._grant
        if grant is None:
            return True
        with self._lock:
            decision = self._cache.get((operation, name))
            if decision is None:
                decision = acl_patterns.check(grant.acl, operation, name)
                self._cache[(operation, name)] = decision
        return decision

    def check(self, operation: acl_patterns.Operation, name: str) -> None:
        if not self.allowed(operation, name):
            app = self._grant.app_id if self._grant else "?"
            raise AclDenied(app, operation, name)


def _detail(resp: requests.Response) -> str:
    with contextlib.suppress(ValueError):
        data = resp.json()
        if isinstance(data, dict) and "detail" in data:
            return str(data["detail"])
    return resp.text[:200]


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    if cleaned != name:
        cleaned += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return cleaned


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
