"""Session fixtures: the same local stack `ykafka dev up` runs, on free ports, stopped by pid at the end.

``YKAFKA_TEST_BOOTSTRAP`` points the Kafka tests at an external cluster instead of local brokers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# fixture modules import one another; register them all so their asserts are rewritten wherever first imported
pytest.register_assert_rewrite("tests.helpers", "tests.cc_fixtures", "tests.ms_fixtures", "tests.sdk_fixtures",
                                "tests.consumer_fixtures", "tests.dr_fixtures", "tests.pipeline_fixtures",
                                "tests.console_fixtures")

from tests.helpers import unique as unique  # noqa: E402
from ykafka.devstack import Stack, ephemeral_config  # noqa: E402

EXTERNAL_BOOTSTRAP = os.environ.get("YKAFKA_TEST_BOOTSTRAP") or None


@dataclass
class StackInfo:
    """What a test needs to reach the running stack."""

    stack: Stack
    clusters: dict[str, str]
    configcenter: str
    metaserver: str
    admin_token: str
    openapi_token: str
    app_id: str = ""
    app_secret: str = ""

    @property
    def home(self) -> Path:
        return self.stack.home

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """ykafka client config for the demo app, with a private cache dir per call."""
        conf: dict[str, Any] = {
            "ykafka.app.id": self.app_id,
            "ykafka.app.secret": self.app_secret,
            "ykafka.metaserver": self.metaserver,
            "ykafka.cache.dir": str(self.home / "clients" / uuid.uuid4().hex),
        }
        conf.update(extra)
        return conf


@pytest.fixture(scope="session")
def _session_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = ephemeral_config(tmp_path_factory.mktemp("stack"), external_bootstrap=EXTERNAL_BOOTSTRAP)
    stack = Stack(cfg)
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def brokers(_session_stack: Stack) -> dict[str, str]:
    """Cluster name -> bootstrap servers, with only the brokers started."""
    _session_stack.up([name for name in _session_stack.cfg.clusters if not EXTERNAL_BOOTSTRAP], seed=False)
    return {name: _session_stack.cfg.bootstrap(name) for name in _session_stack.cfg.clusters}


@pytest.fixture(scope="session")
def stack(_session_stack: Stack, brokers: dict[str, str]) -> StackInfo:
    """The whole stack: brokers, config service and MetaServer, with the demo app seeded."""
    _session_stack.up()
    env = _session_stack.read_env()
    cfg = _session_stack.cfg
    return StackInfo(_session_stack, brokers, cfg.configcenter_url, cfg.metaserver_url, cfg.admin_token,
                     cfg.openapi_token, env["YKAFKA_APP_ID"], env["YKAFKA_APP_SECRET"])


def consumer_config(bootstrap: str, group: str | None = None, **extra: Any) -> dict[str, Any]:
    """Plain librdkafka consumer settings for tests (short session timeout: Tansu joins in ~3 s)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"test-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "enable.auto.commit": False,
    }
    conf.update(extra)
    return conf


@pytest.fixture
def topic() -> str:
    return unique("t")
