"""The other half of tests/test_benchmarks.py's quick runs (its module docstring says why they are split)."""

from __future__ import annotations

import pytest

from tests.test_benchmarks import ODD, check_quick

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ODD)
def test_benchmark_quick_run_reports_its_fields(name: str) -> None:
    check_quick(name)
