"""The ``auth.enabled`` hot switch, read from the config center's ``ykafka.global`` namespace.

A read is trusted for a couple of seconds (cachetools TTL). When the config center cannot be reached
the last value seen stays in force; before any value was ever seen the catalog default (true) holds.
Refreshes happen on a background thread once a first value is known, so a slow config center never
stalls a grant.
"""

from __future__ import annotations

import threading
from typing import Any

import requests
import structlog
from cachetools import TTLCache

from ykafka import catalog
from ykafka.errors import InvalidConfigValue

log = structlog.get_logger("metaserver.authswitch")
KEY = "auth.enabled"


class AuthSwitch:
    def __init__(self, configcenter_url: str | None, apollo_app_id: str, cluster: str = "default",
                 ttl_s: float = 2.0, timeout_s: float = 1.0) -> None:
        self._url = (f"{configcenter_url.rstrip('/')}/configs/{apollo_app_id}/{cluster}/"
                     f"{catalog.GLOBAL.namespace()}") if configcenter_url else None
        self._timeout = timeout_s
        self._cache: TTLCache[str, bool] = TTLCache(maxsize=1, ttl=ttl_s)
        self._last: bool = bool(catalog.KEYS[KEY].default)
        self._known = False
        self._lock = threading.Lock()
        self._refreshing = False
        self._session = requests.Session()

    def enabled(self) -> bool:
        if self._url is None:
            return self._last
        with self._lock:
            cached = self._cache.get(KEY)
            if cached is not None:
                return cached
            if self._known:
                if not self._refreshing:
                    self._refreshing = True
                    threading.Thread(target=self._refresh, name="auth-switch-refresh", daemon=True).start()
                return self._last
        self._refresh()  # first read: wait (bounded by the timeout) so a switched-off center is honoured
        return self._last

    def _refresh(self) -> None:
        value = self._fetch()
        with self._lock:
            if value is not None:
                if value != self._last:
                    log.warning("auth switch changed", enabled=value)
                self._last = value
                self._known = True
            # cache even a failed read so a down center costs one timeout per TTL, not one per request
            self._cache[KEY] = self._last
            self._refreshing = False

    def _fetch(self) -> bool | None:
        assert self._url is not None
        try:
            response = self._session.get(self._url, timeout=self._timeout)
        except requests.RequestException as exc:
            log.warning("config center unreachable; keeping last auth switch", error=str(exc), enabled=self._last)
            return None
        if response.status_code == 404:
            return bool(catalog.KEYS[KEY].default)  # namespace never released: the default holds
        if response.status_code != 200:
            log.warning("config center answered an error; keeping last auth switch",
                        status=response.status_code, enabled=self._last)
            return None
        try:
            configurations: dict[str, Any] = response.json().get("configurations") or {}
        except ValueError:
            return None
        if KEY not in configurations:
            return bool(catalog.KEYS[KEY].default)
        try:
            return bool(catalog.parse(KEY, configurations[KEY], catalog.GLOBAL))
        except InvalidConfigValue as exc:
            log.warning("invalid auth switch in config center; keeping last", error=str(exc))
            return None
