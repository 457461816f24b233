"""Fixtures for confluent-kafka-python's own tests ported here (tests/upstream/README.md): their
``kafka_cluster`` on this suite's broker (:class:`~tests.upstream.cluster_fixture.YkafkaFixture`), their
``load_file``, and their ``async def`` tests run on a fresh event loop each (upstream runs them with
pytest-asyncio, which this suite does not need otherwise)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.cluster_fixture import YkafkaFixture
from ykafka.transport import warm_coordinators

DATA = Path(__file__).parent / "integration" / "schema_registry" / "data"
ASYNC_TEST_BOUND_S = 120  # an upstream async test that takes longer has hung


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: an upstream coroutine test (run by tests/upstream/conftest.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), ASYNC_TEST_BOUND_S))
    return True


@pytest.fixture(scope="module")
def kafka_cluster(kafka_brokers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[YkafkaFixture]:
    """Apache Kafka, as upstream's own fixture runs: their consumers keep librdkafka's default session timeout,
    and on Tansu each group join waits it out (about 23 s a test)."""
    # a fresh cluster answers group lookups only once __consumer_offsets has leaders (NOT_COORDINATOR before)
    assert warm_coordinators({"bootstrap.servers": kafka_brokers["dc-a"]}), "dc-a never answered a group lookup"
    cluster = YkafkaFixture(kafka_brokers["dc-a"], tmp_path_factory.mktemp("upstream-cache"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _close_upstream_clients(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close every client the test had from ``kafka_cluster`` (YkafkaFixture.close_clients)."""
    yield
    if "kafka_cluster" in request.fixturenames:
        request.getfixturevalue("kafka_cluster").close_clients()


@pytest.fixture()
def load_file() -> Any:
    def get_handle(name: str) -> str:
        return (DATA / name).read_text()

    return get_handle
