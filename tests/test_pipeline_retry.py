"""Pipeline.process_available: a query whose Python worker did not connect back in time runs once more, only
that query; any other failure, or the same one twice, is raised (pure logic over stand-in query handles)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.runner import WORKER_TIMEOUT, Pipeline


class Query:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.isActive = False

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise self.error


def pipeline(failures: dict[str, list[Exception | None]]) -> tuple[Pipeline, list[str]]:
    started: list[str] = []
    runner = Pipeline.__new__(Pipeline)

    def start(name: str, topic: str, once: bool) -> Any:
        started.append(name)
        return Query(failures.get(name, [None]).pop(0) if failures.get(name) else None)

    runner._start = start  # type: ignore[method-assign]
    return runner, started


def test_worker_timeout_reruns_only_the_failed_query() -> None:
    runner, started = pipeline({"metrics": [RuntimeError(f"[STREAM_FAILED] ... {WORKER_TIMEOUT}. SQLSTATE")]})
    runner.process_available()
    assert started == ["trace", "metrics", "clients", "metrics"]


def test_worker_timeout_twice_is_raised() -> None:
    error = RuntimeError(WORKER_TIMEOUT)
    runner, started = pipeline({"trace": [error, RuntimeError(WORKER_TIMEOUT + " again")]})
    with pytest.raises(RuntimeError, match="again"):
        runner.process_available()
    assert started == ["trace", "metrics", "clients", "trace"]


def test_other_failures_are_raised_at_once() -> None:
    runner, started = pipeline({"clients": [ValueError("bad record")]})
    with pytest.raises(ValueError, match="bad record"):
        runner.process_available()
    assert started == ["trace", "metrics", "clients"]
