"""Burrow-style lag judgement: each status from a window of samples, with its reason and evidence."""

from __future__ import annotations

from pipeline.burrow import Sample, evaluate


def window(rows: list[tuple[int, int, int]], alive: bool | None = True) -> list[Sample]:
    """(committed, end offset, lag) per sample, 10 s apart."""
    return [Sample(1_000_000 + i * 10_000, c, e, lag, alive) for i, (c, e, lag) in enumerate(rows)]


def test_caught_up_once_in_the_window_is_ok() -> None:
    verdict = evaluate(window([(10, 20, 10), (20, 20, 0), (20, 30, 10)]))
    assert (verdict.status, verdict.reason) == ("OK", "lag reached zero within the window")


def test_commits_frozen_and_lag_growing_is_err_with_the_window_as_evidence() -> None:
    verdict = evaluate(window([(5, 10, 5), (5, 14, 9), (5, 20, 15)]))
    assert verdict.status == "ERR"
    assert verdict.reason == "lag grew from 5 to 15 while the committed offset stayed at 5 for 20s"
    assert [s[1:4] for s in verdict.evidence["window"]] == [[5, 10, 5], [5, 14, 9], [5, 20, 15]]


def test_commits_frozen_with_constant_lag_is_stall() -> None:
    verdict = evaluate(window([(5, 10, 5)] * 4))
    assert (verdict.status, verdict.reason) == ("STALL", "committed offset frozen at 5 for 30s with lag 5")


def test_frozen_without_live_member_is_stop() -> None:
    verdict = evaluate(window([(5, 10, 5), (5, 12, 7), (5, 12, 7)], alive=False))
    assert verdict.status == "STOP"
    assert "no live member" in verdict.reason


def test_no_commit_at_all_is_stop_even_with_few_samples() -> None:
    verdict = evaluate(window([(-1, 8, 8)]))
    assert verdict.status == "STOP"
    assert verdict.reason == "no commits at all: the group never committed an offset while 8 messages are available"


def test_moving_commits_with_lag_growing_every_interval_is_warn() -> None:
    verdict = evaluate(window([(10, 20, 10), (12, 25, 13), (15, 31, 16), (18, 40, 22)]))
    assert verdict.status == "WARN"
    assert verdict.reason == "lag grew in every interval (10 -> 22) while commits moved (10 -> 18)"


def test_moving_commits_with_lag_not_always_growing_is_ok() -> None:
    verdict = evaluate(window([(10, 20, 10), (12, 25, 13), (20, 31, 11)]))
    assert verdict.status == "OK"


def test_too_few_samples_is_not_enough_evidence_and_only_last_window_counts() -> None:
    assert evaluate(window([(5, 10, 5), (5, 12, 7)])).status == "OK"
    # an old stall followed by recovery: only the last `window` samples are judged
    history = window([(5, 10, 5)] * 6 + [(10, 20, 10), (20, 25, 5), (25, 30, 5), (30, 31, 1), (31, 32, 1)])
    assert evaluate(history, window=5).status == "OK"
