"""A config service caps its parked long polls below its open-file limit and refuses the rest with 503 +
Retry-After (metaserver/configcenter/longpoll.py ``default_max_parked``): at the limit uvicorn failed every
accept and the instance answered nobody (docs/deployment.md, "Sizing the control plane").

Real processes: the service runs with a low ``RLIMIT_NOFILE`` (set before it execs), so the cap is the one
derived from its own limit, and more polls than the limit allows are sent at it."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from metaserver.configcenter.__main__ import main
from metaserver.configcenter.longpoll import default_max_parked
from tests.sdk_fixtures import wait_until
from tests.support import ConfigService, ParkedPoll
from ykafka.apollo import ApolloClient, NamespaceConfig
from ykafka.endpoints import Endpoints

NOFILE = 128  # the service's open-file limit: 32 kept back, half of the rest (48) for polls
BEYOND = 100  # polls sent after the cap is reached: with the parked ones, more sockets than the limit


#: run argv[1:] with the open-file limit NOFILE (what ``ulimit -n`` does in a shell)
LIMITED = (f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
           "os.execv(sys.argv[1], sys.argv[1:])")


def _poll(url: str, ns: str, notification_id: int, timeout: float = 30) -> requests.Response:
    return requests.get(f"{url}/notifications/v2", timeout=timeout, params={
        "appId": "ykafka", "cluster": "default",
        "notifications": json.dumps([{"namespaceName": ns, "notificationId": notification_id}])})


def _latest_id(url: str, ns: str) -> int:
    resp = _poll(url, ns, -1, timeout=10)
    assert resp.status_code == 200, resp.text
    return int(resp.json()[0]["notificationId"])


def _refused(url: str) -> int:
    return int(requests.get(f"{url}/stats", timeout=5).json()["longPollsRefused"])


def test_polls_beyond_the_cap_get_503_the_service_keeps_serving_and_misses_no_release(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    full = ConfigService(db, longpoll_timeout=60, token=uuid.uuid4().hex, log_dir=tmp_path)
    full.args = [sys.executable, "-c", LIMITED, *full.args]  # execs the service: the same pid, a lower limit
    (tmp_path / "other").mkdir()
    other = ConfigService(db, longpoll_timeout=60, token=uuid.uuid4().hex, log_dir=tmp_path / "other")
    starting = [threading.Thread(target=svc.start) for svc in (full, other)]  # imports overlap
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join()
    for svc in (full, other):
        requests.get(f"{svc.url}/health", timeout=5).raise_for_status()
    cap = default_max_parked(NOFILE)
    parked: list[ParkedPoll] = []
    got: list[NamespaceConfig] = []
    client = ApolloClient(f"{full.url},{other.url}", "ykafka", "default", "127.0.0.1", None, got.append)
    try:
        ns = f"ykafka.topic.t-{uuid.uuid4().hex[:8]}"
        full.publish(ns, {"k": "1"})
        first = _latest_id(full.url, ns)
        stats = requests.get(f"{full.url}/stats", timeout=5).json()
        assert (stats["maxLongPolls"], cap) == (48, 48)  # derived from the process's own limit

        parked = [ParkedPoll(lambda: _poll(full.url, ns, first)) for _ in range(cap)]
        full.wait_parked(cap, timeout=20)

        refused = []
        for _ in range(BEYOND):  # each answered at once and its connection closed: no descriptor kept
            resp = _poll(full.url, ns, first, timeout=5)
            refused.append((resp.status_code, resp.headers.get("retry-after"), resp.headers.get("connection")))
        assert set(refused) == {(503, "5", "close")}  # --poll-retry-after, default 5 s
        body = _poll(full.url, ns, first, timeout=5).json()
        assert body["status"] == 503 and "poll another instance" in body["message"]
        # a client behind on its id is not refused: it gets the news at once, nothing parked
        behind = _poll(full.url, ns, first - 1, timeout=5)
        assert behind.status_code == 200 and behind.json()[0]["notificationId"] == first

        # the full instance still answers everyone else
        assert requests.get(f"{full.url}/health", timeout=5).status_code == 200
        config = requests.get(f"{full.url}/configs/ykafka/default/{ns}", timeout=5)
        assert config.status_code == 200 and config.json()["configurations"] == {"k": "1"}
        stats = requests.get(f"{full.url}/stats", timeout=5).json()
        assert (stats["longPolls"], stats["longPollsRefused"]) == (cap, BEYOND + 1)
        logged = [line for line in full.log.read_text().splitlines() if "configcenter.longpolls_refused" in line]
        assert 1 <= len(logged) < 20, logged  # one line per 10 s with the count, not one per refusal (101)
        assert "Too many open files" not in full.log.read_text()

        # ykafka's adapter starting on the full instance: refused once, moves to the other at once and parks
        seed = next(s for s in range(100) if random.Random(s).choice([full.url, other.url]) == full.url)
        client.endpoints = Endpoints([full.url, other.url], rng=random.Random(seed))
        client.subscribe(ns)
        client.start()
        wait_until(lambda: bool(got) and got[-1].configurations == {"k": "1"}, timeout=5)
        other.wait_parked(1)
        assert client.url == other.url
        assert _refused(full.url) == BEYOND + 2  # one refusal, no loop against the full instance

        # a release through the full instance reaches every poll parked on it and the client moved away
        full.publish(ns, {"k": "2"})
        second = _latest_id(full.url, ns)
        answers = [p.join(timeout=20) for p in parked]
        answered = [(r.status_code, r.json()[0]["notificationId"] if r.status_code == 200 else None)
                    for r in answers]
        assert second > first and answered == [(200, second)] * cap  # missed 0
        wait_until(lambda: got[-1].configurations == {"k": "2"}, timeout=5, message="the release, via the other")
        full.wait_parked(0)
        assert _refused(full.url) == BEYOND + 2
    finally:
        client.close()
        full.stop()
        other.stop()


def test_max_parked_polls_rejects_a_negative_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--db", "unused.db", "--max-parked-polls", "-5"])
    assert exited.value.code == 2
    assert "--max-parked-polls: expected a whole number >= 0" in capsys.readouterr().err


def test_a_client_of_one_full_instance_polls_again_after_the_retry_after_it_said(tmp_path: Path) -> None:
    """One URL, the instance full: the SDK's client re-polls every Retry-After (1 s here), not 1, 2, 4, 8 s apart
    as before, so a release reaches it within 1.25 x Retry-After plus a poll (docs/deployment.md)."""
    svc = ConfigService(tmp_path / "one.db", longpoll_timeout=60, token=uuid.uuid4().hex,
                        extra=["--max-parked-polls", "1", "--poll-retry-after", "1"]).start()
    got: list[NamespaceConfig] = []
    client = ApolloClient(svc.url, "ykafka", "default", "127.0.0.1", None, got.append)
    held = None
    try:
        ns = f"ykafka.topic.t-{uuid.uuid4().hex[:8]}"
        svc.publish(ns, {"k": "1"})
        held = ParkedPoll(lambda: _poll(svc.url, ns, _latest_id(svc.url, ns)))  # the one parked poll
        svc.wait_parked(1)
        assert requests.get(f"{svc.url}/stats", timeout=5).json()["pollRetryAfter"] == 1
        client.subscribe(ns)
        client.start()
        wait_until(lambda: _refused(svc.url) >= 1, timeout=10)
        first = _refused(svc.url)
        time.sleep(6.0)
        # 1 to 1.25 s apart: 5 or 6 more in 6 s; before, the waits doubled from 1 s (1, 2, 4): 2 more
        assert _refused(svc.url) - first >= 4, _refused(svc.url) - first
        released = time.monotonic()
        svc.publish(ns, {"k": "2"})
        wait_until(lambda: got[-1].configurations == {"k": "2"}, timeout=10)
        assert time.monotonic() - released <= 1.25 + 3.0
    finally:
        client.close()
        svc.stop()
        if held is not None:
            held.join(timeout=5)
