"""Both servers fuzzed from their own OpenAPI schemas (schemathesis, a fixed seed, a few hundred cases).

Every operation of the MetaServer (with the admin token, so the authenticated routes are reached) and of the
config service (with its Open API token) gets generated valid and invalid requests; every answer must be
free of server errors and must match the schema the server publishes. The config service's long poll
(``/notifications/v2``) is left to the property tests in tests/test_parsers.py: each case would park.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.cc_fixtures import TOKEN
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer
from tests.support import ConfigService

CHECKS = [not_a_server_error, response_schema_conformance]
FUZZ = settings(max_examples=6, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzzed_metaserver(ms_factory: Callable[..., MetaServer], tmp_path_factory: pytest.TempPathFactory) -> MetaServer:
    # a high failure limit: the fuzzer's bad signatures must not turn every later case into a 429; a pipeline
    # store that exists, so the aggregate routes run their code instead of the 503 "not configured"
    return ms_factory(auth_fail_limit=1_000_000, pipeline_store=str(tmp_path_factory.mktemp("store")))


@pytest.fixture(scope="module")
def metaserver_schema(fuzzed_metaserver: MetaServer) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(fuzzed_metaserver.url + "/openapi.json")


@pytest.fixture(scope="module")
def configservice_schema(cc: ConfigService) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(cc.url + "/openapi.json").exclude(path="/notifications/v2")


def fuzz(schema: schemathesis.BaseSchema, headers: dict[str, str]) -> Counter[int]:
    """Run every operation's generated cases; returns the statuses answered, raises with every failure found.

    (schemathesis' own pytest plugin does this too, but its fixture loader does not run on pytest 9.)"""
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = [GenerationMode.POSITIVE]
        if len(operation.body) or len(operation.query):  # only these can be made invalid (any path string is valid)
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:  # valid requests, then invalid ones

            @FUZZ
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: schemathesis.Case) -> None:
                response = case.call_and_validate(headers=headers, checks=CHECKS, timeout=15)
                statuses[response.status_code] += 1

            try:
                check()
            except Unsatisfiable:
                continue  # no invalid form of this operation's inputs exists
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collected, every operation is tried
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
    return statuses


def test_metaserver_answers_every_generated_request_without_a_server_error(
        metaserver_schema: schemathesis.BaseSchema) -> None:
    statuses = fuzz(metaserver_schema, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert sum(statuses.values()) >= 200 and statuses[200] and statuses[422], statuses


def test_config_service_answers_every_generated_request_without_a_server_error(
        configservice_schema: schemathesis.BaseSchema) -> None:
    statuses = fuzz(configservice_schema, {"Authorization": TOKEN})
    assert sum(statuses.values()) >= 200 and statuses[200] and statuses[400], statuses
