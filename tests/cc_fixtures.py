"""Fixtures for the config-center tests: the real service (``tests.support.ConfigService``) on a free port, over
real HTTP, and a thin Open API client.

`cc` is one server per test module (tests isolate themselves with their own app ids); `cc_factory` starts
extra servers for tests that restart one or need their own. Servers are stopped by their own pid.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from tests.support import CC_TOKEN, ConfigService

TOKEN = CC_TOKEN
ENV = "DEV"


class OpenApi:
    """A thin Open API client, as an Apollo script would call it (paths and bodies from Apollo's docs)."""

    def __init__(self, url: str, token: str = TOKEN) -> None:
        self.url = url
        self.http = requests.Session()
        self.http.headers.update({"Authorization": token, "Content-Type": "application/json;charset=UTF-8"})

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> requests.Response:
        data = json.dumps(body) if body is not None else None
        return self.http.request(method, self.url + "/openapi/v1" + path, data=data, params=params or None,
                                 timeout=10)

    @staticmethod
    def new_app_id(prefix: str = "app") -> str:
        """A fresh app id, so tests sharing one server never see each other's data."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def ns_path(self, app: str, ns: str, cluster: str = "default") -> str:
        return f"/envs/{ENV}/apps/{app}/clusters/{cluster}/namespaces/{ns}"

    def ok(self, resp: requests.Response) -> Any:
        assert resp.status_code == 200, (resp.status_code, resp.text)
        return resp.json() if resp.content else None

    def create_app(self, app: str) -> None:
        self.ok(self.call("POST", "/apps", {"app": {"appId": app, "name": app, "orgId": "infra", "orgName": "Infra",
                                                    "ownerName": "ops"}, "admins": ["ops"]}))

    def create_namespace(self, app: str, ns: str, fmt: str = "properties", public: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.ok(self.call("POST", f"/apps/{app}/appnamespaces", {
            "name": ns, "appId": app, "format": fmt, "isPublic": public, "dataChangeCreatedBy": "ops",
            "comment": "test"}))
        return result

    def set_item(self, app: str, ns: str, key: str, value: str, cluster: str = "default") -> None:
        self.ok(self.call("PUT", f"{self.ns_path(app, ns, cluster)}/items/{quote(key, safe='')}",
                          {"key": key, "value": value, "dataChangeLastModifiedBy": "ops",
                           "dataChangeCreatedBy": "ops"}, createIfNotExists="true"))

    def publish(self, app: str, ns: str, cluster: str = "default", title: str = "release") -> dict[str, Any]:
        result: dict[str, Any] = self.ok(self.call("POST", f"{self.ns_path(app, ns, cluster)}/releases",
                                                   {"releaseTitle": title, "releaseComment": "by test",
                                                    "releasedBy": "ops"}))
        return result

    def setup(self, app: str, ns: str, items: dict[str, str], publish: bool = True) -> dict[str, Any] | None:
        """App (created if needed) + namespace + items (+ a release)."""
        if self.call("GET", f"/apps/{app}").status_code != 200:
            self.create_app(app)
        if ns != "application":
            self.create_namespace(app, ns)
        for k, v in items.items():
            self.set_item(app, ns, k, v)
        return self.publish(app, ns) if publish else None


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfigService]:
    server = ConfigService(tmp_path_factory.mktemp("cc") / "configcenter.db").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api(cc: ConfigService) -> OpenApi:
    return OpenApi(cc.url)


@pytest.fixture
def cc_factory(tmp_path: Path) -> Iterator[Callable[..., ConfigService]]:
    """Starts servers on demand (default: a fresh DB under tmp_path); stops every one at the end."""
    started: list[ConfigService] = []

    def start(db: Path | None = None, longpoll_timeout: float = 2.0) -> ConfigService:
        server = ConfigService(db or tmp_path / f"cc-{len(started)}.db", longpoll_timeout).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
