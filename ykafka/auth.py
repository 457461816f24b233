"""Grants from the MetaServer: signed authentication, renewal, an on-disk cache and the ACL cache.

A client may start while the MetaServer is briefly down as long as a grant it obtained earlier has not
expired; the grant is therefore cached on disk (mode 0600: it holds a bearer token and maybe broker
credentials). A rejected secret (401) is never papered over with the cache.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
import structlog
from cachetools import TTLCache

from ykafka import acl as acl_patterns
from ykafka.cachefiles import ID_FILE, bind_server_id, safe_name, server_dir, write_private
from ykafka.endpoints import Endpoints
from ykafka.errors import AclDenied, AuthError, MetaServerUnavailable
from ykafka.grants import ClusterInfo, ConfigCenterInfo, Grant
from ykafka.signing import derive_key, signed_headers

__all__ = ["AclCache", "ClusterInfo", "ConfigCenterInfo", "Grant", "GrantClient", "GrantStore", "Want"]


@functools.lru_cache(maxsize=8)
def signing_key(app_id: str, secret: str) -> bytes:
    """The app's signing key, derived (PBKDF2, 25-45 ms) once per process and secret: a Producer and a
    Consumer of one app, or a client re-created, pay it once. Held in memory only, as the secret is; it is
    never written to the grant cache, because the MetaServer accepts it in place of the secret for as long
    as the secret is valid, where a cached grant expires (docs/benchmarks.md, "Start-up")."""
    return derive_key(app_id, secret)

Want = tuple[str, str]  # (namespace, cluster): a route value in force that names a cluster beyond the grant

log = structlog.get_logger(__name__)

GRANT_PATH = "/v1/auth/grant"
RENEW_PATH = "/v1/auth/renew"
REPORT_PATH = "/v1/clients/report"
PLACEMENT_PATH = "/v1/placements"


class GrantStore:
    """The on-disk grant cache: one JSON file per app in the folder of the MetaServer that issued it."""

    def __init__(self, cache_dir: Path, app_id: str, urls: Iterable[str] = ()) -> None:
        self.folder = server_dir(cache_dir, "grants", urls)
        self.path = self.folder / f"{safe_name(app_id)}.json"

    def save(self, grant: Grant) -> None:
        try:
            bind_server_id(self.folder, grant.issuer)
            write_private(self.path, json.dumps(grant.raw))
        except OSError as exc:
            log.warning("ykafka.grant.cache_write_failed", path=str(self.path), error=str(exc))

    def load(self) -> Grant | None:
        """The cached grant, if it was issued by the server this folder belongs to."""
        try:
            data = json.loads(self.path.read_text())
            known = (self.folder / ID_FILE).read_text().strip()
        except (OSError, ValueError):
            return None
        try:
            grant = Grant.from_json(data)
        except AuthError:
            return None
        if grant.issuer != known:
            log.warning("ykafka.grant.cache_foreign", path=str(self.path), issuer=grant.issuer, expected=known)
            return None
        return grant


class GrantClient:
    """Talks to the MetaServer: authenticate (signed), renew (bearer), post client reports."""

    def __init__(self, metaserver: str, app_id: str, secret: str, client_id: str, ip: str,
                 cache_dir: Path, timeout_s: float = 5.0) -> None:
        self.endpoints = Endpoints(metaserver)  # one URL or a comma-separated list of peer instances
        self.app_id = app_id
        self.client_id = client_id
        self.ip = ip
        self.timeout_s = timeout_s
        self.store = GrantStore(cache_dir, app_id, self.endpoints.urls)
        self._secret = secret
        self._key: bytes | None = None
        self._session = requests.Session()
        self._lock = threading.Lock()

    @property
    def metaserver(self) -> str:
        """The MetaServer instance this client talks to now."""
        return self.endpoints.current

    def _post(self, path: str, **kwargs: Any) -> requests.Response:
        return self._request("POST", path, **kwargs)

    def _request(self, method: str, path: str, fresh_headers: Callable[[], dict[str, str]] | None = None,
                 **kwargs: Any) -> requests.Response:
        """Call the current instance; on a connection error, timeout or 5xx move to the next peer and retry
        (each instance at most once per call). The last failure is raised or returned. ``fresh_headers``:
        the headers, built again for each attempt (a signature's nonce is good for one request)."""
        def send(url: str) -> requests.Response:
            if fresh_headers is not None:
                kwargs["headers"] = fresh_headers()
            with self._lock:
                return self._session.request(method, url + path, timeout=self.timeout_s, **kwargs)

        return self.endpoints.call(send, f"metaserver {path}")

    def _signing_key(self) -> bytes:
        if self._key is None:
            self._key = signing_key(self.app_id, self._secret)
        return self._key

    def authenticate(self, wants: Iterable[Want] = ()) -> Grant:
        """A fresh grant; raises :class:`AuthError` if refused, :class:`MetaServerUnavailable` if unreachable.

        ``wants`` name clusters that route values in force point at; the MetaServer adds each one it can
        confirm in that namespace of the config center (docs/metaserver.md, "What a grant carries")."""
        body = json.dumps({"app_id": self.app_id, "client_id": self.client_id, "ip": self.ip,
                           **_want_body(wants)}).encode()
        key = self._signing_key()
        # signed again for each instance tried: a killed instance may have spent the first nonce already
        grant = self._grant_request(GRANT_PATH, body, lambda: {
            **signed_headers(self.app_id, key, "POST", GRANT_PATH, body), "Content-Type": "application/json"})
        if grant.app_id != self.app_id:
            raise AuthError(f"MetaServer returned a grant for {grant.app_id!r}, expected {self.app_id!r}")
        return grant

    def renew(self, grant: Grant, wants: Iterable[Want] = ()) -> Grant:
        """Renew with the bearer token; re-authenticate when the token is rejected."""
        wants = list(wants)
        headers = {"Authorization": f"Bearer {grant.token}", "Content-Type": "application/json"}
        try:
            return self._grant_request(RENEW_PATH, json.dumps(_want_body(wants)).encode(), lambda: headers)
        except MetaServerUnavailable:
            raise
        except AuthError:
            log.info("ykafka.grant.token_rejected", app_id=self.app_id)
            return self.authenticate(wants)

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

    def _grant_request(self, path: str, body: bytes, headers: Callable[[], dict[str, str]]) -> Grant:
        try:
            resp = self._request("POST", path, data=body, fresh_headers=headers)
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

    def placement(self, grant: Grant, topic: str) -> str | None:
        """The cluster the MetaServer placed ``topic`` on, or None when it has no placement."""
        try:
            resp = self._request("GET", f"{PLACEMENT_PATH}/{quote(topic, safe='')}",
                                 headers={"Authorization": f"Bearer {grant.token}"})
        except requests.RequestException as exc:
            raise MetaServerUnavailable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code in (403, 404):
            return None
        if resp.status_code != 200:
            raise MetaServerUnavailable(f"HTTP {resp.status_code} from {PLACEMENT_PATH}: {_detail(resp)}")
        try:
            return str(resp.json()["cluster"])
        except (ValueError, KeyError, TypeError):
            raise MetaServerUnavailable(f"malformed placement answer for {topic!r}") from None

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


def _want_body(wants: Iterable[Want]) -> dict[str, Any]:
    listed = [{"namespace": ns, "cluster": cluster} for ns, cluster in sorted(set(wants))]
    return {"want": listed} if listed else {}
