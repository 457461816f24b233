"""Benchmarks also run on Apache Kafka (``--broker kafka``): the live swaps and the dual-DC failover proofs, at
``--quick`` (split from tests/test_benchmarks.py so xdist can run them beside its other runs)."""

from __future__ import annotations

import pytest

from tests.test_benchmarks import ON_KAFKA, check_quick

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ON_KAFKA)
def test_benchmark_quick_run_on_kafka_reports_its_fields(name: str) -> None:
    check_quick(name, "--broker", "kafka")
