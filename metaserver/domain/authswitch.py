"""The ``auth.enabled`` hot switch, read from the config center's ``ykafka.global`` namespace.

The value is re-read every ``ttl_s`` seconds (default 2) by a daemon thread, so a grant never waits on
the config center; the first read waits (bounded by the timeout) so a switch already off is honoured
from the first request. When the config center cannot be reached the last value seen stays in force;
before any value was ever seen the catalog default (true) holds.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import requests
import structlog

from ykafka import catalog
from ykafka.endpoints import Endpoints
from ykafka.errors import InvalidConfigValue

log = structlog.get_logger("metaserver.domain.authswitch")
KEY = "auth.enabled"


class AuthSwitch:
    def __init__(self, configcenter_url: str | None, apollo_app_id: str, cluster: str = "default",
                 ttl_s: float = 2.0, timeout_s: float = 1.0) -> None:
        # one config service or several comma-separated (a read moves to the next on failure)
        self._endpoints = Endpoints(configcenter_url) if configcenter_url else None
        self._path = f"/configs/{apollo_app_id}/{cluster}/{catalog.GLOBAL.namespace()}"
        self._ttl = ttl_s
        self._timeout = timeout_s
        self._value: bool = bool(catalog.KEYS[KEY].default)
        self._lock = threading.Lock()
        self._started = False
        self._session = requests.Session()

    def enabled(self) -> bool:
        if self._endpoints is not None and not self._started:
            self._start()
        return self._value

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self.refresh()
            threading.Thread(target=self._poll, name="auth-switch", daemon=True).start()
            self._started = True

    def _poll(self) -> None:
        while True:
            time.sleep(self._ttl)
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the poller must survive anything
                log.warning("auth switch refresh failed", error=str(exc))

    def refresh(self) -> bool:
        value = self._fetch()
        if value is not None and value != self._value:
            log.warning("auth switch changed", enabled=value)
            self._value = value
        return self._value

    def _fetch(self) -> bool | None:
        assert self._endpoints is not None
        try:
            response = self._endpoints.call(lambda url: self._session.get(url + self._path, timeout=self._timeout),
                                            "auth switch")
        except requests.RequestException as exc:
            log.warning("config center unreachable; keeping last auth switch", error=str(exc), enabled=self._value)
            return None
        if response.status_code == 404:
            return bool(catalog.KEYS[KEY].default)  # namespace never released: the default holds
        if response.status_code != 200:
            log.warning("config center answered an error; keeping last auth switch",
                        status=response.status_code, enabled=self._value)
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
