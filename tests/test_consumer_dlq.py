"""``ykafka admin dlq replay`` on a real broker: re-publishes with headers, resumes, never skips."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.consumer_fixtures import (
    Recorder,
    committed,
    consumer_config,
    create_topic,
    produce,
    read_all,
    unique,
    wait_until,
)
from ykafka import headers as H
from ykafka.admin.dlq import dlq, parse_since, replay_group
from ykafka.consumer import Consumer, dlq_topic


def _replay(bootstrap: str, *args: str) -> str:
    result = CliRunner().invoke(dlq, ["replay", *args, "--bootstrap", bootstrap, "--idle-timeout", "1"])
    assert result.exit_code == 0, result.output
    return result.output


def test_replay_republishes_dead_letters_with_headers_and_tracks_progress(bootstrap: str, running,
                                                                          tmp_path: Path) -> None:
    topic, group = unique("dlqsrc"), unique("g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 8, keys=8)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{"consumer.retry.max.attempts": 0}))
    job = running(consumer, Recorder(fail=lambda m: int(m.value()) < 5), [topic])
    wait_until(lambda: consumer.engine.router is not None and consumer.engine.router.sent_dlq >= 5, 60,
               message="5 dead-lettered")
    job.stop()
    dead = dlq_topic(group, topic)

    assert "re-published 0 message(s)" in _replay(bootstrap, group, topic, "--since", "2999-01-01T00:00")
    assert "re-published 2 message(s)" in _replay(bootstrap, group, topic, "--limit", "2")
    assert "re-published 3 message(s)" in _replay(bootstrap, group, topic)
    assert "re-published 0 message(s)" in _replay(bootstrap, group, topic)  # progress was committed

    messages = read_all(bootstrap, topic, 13)
    replayed = [m for m in messages if H.get(m.headers(), H.REPLAYED_FROM) is not None]
    assert sorted(int(m.value()) for m in messages) == sorted([*range(8), *range(5)])
    assert sorted(int(m.value()) for m in replayed) == [0, 1, 2, 3, 4]
    for m in replayed:
        value = int(m.value())
        assert m.key() == f"k{value}".encode()
        assert H.get_str(m.headers(), H.MESSAGE_ID) == f"id-{value}"
        assert H.get_str(m.headers(), H.REPLAYED_FROM).startswith(f"{dead}:")
        assert all(H.get(m.headers(), name) is None for name in H.FAILURE_HEADERS)
    ends = {p: 0 for p in range(2)}
    for m in read_all(bootstrap, dead, 5):
        ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
    found = committed(bootstrap, replay_group(group), dead, 2)
    assert {p: found[p] for p in ends if ends[p]} == {p: e for p, e in ends.items() if e}


def test_since_parsing() -> None:
    assert parse_since("2h", now=10_000.0) == (10_000 - 7200) * 1000
    assert parse_since("1970-01-01T00:01:00") == 60_000
    assert parse_since("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(Exception, match="ISO-8601"):
        parse_since("yesterday")
