"""SIGTERM to a producing service (issue 40, item 3): its ``close()`` flushes everything to the broker, or, with
the cluster down, leaves everything journaled in the spill for the app's next producer. Counted on the topic.

SIGTERM in the second or so before the health monitor declares a dead cluster down lost every held message
silently (acknowledged 0, failed 0, close() returned 0): the link went down during close(), its purged messages
came back to be re-routed to the spill, and flush() counted them as done once librdkafka held none, so close()
shut the spill while the re-route still wrote to it. Covered at several moments around the link going down.

(SIGTERM to ``Consumer.run`` and ``AIOConsumer.run``, committing exactly what was handled and leaving the group
within a bound: tests/test_consumer_kill.py and tests/test_aio.py.)
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import create_topic, unique, wait_until
from tests.sdk_fixtures import read_topic
from tests.support import ROOT
from ykafka import Producer
from ykafka.devstack.procs import free_port

CLOSE_BOUND_S = 35  # close(30) and the process's exit


def _run_until_term(bootstrap: str, topic: str, tmp_path: Path, spilling: bool = False,
                    after_s: float = 1.5) -> dict[str, Any]:
    out = tmp_path / "out.json"
    child = subprocess.Popen([sys.executable, "-W", "ignore", "-m", "tests.producer_term_child", bootstrap, topic,
                              str(tmp_path / "cache"), str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: Path(str(out) + ".ready").exists(), 60, message="the producer running")
        time.sleep(after_s)  # sending
        if spilling:  # the cluster declared down: what was sent is being journaled
            wait_until(lambda: Path(str(out) + ".spilling").exists(), 30, message="the producer spilling")
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=CLOSE_BOUND_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    print(report)
    return report


def _exactly(bootstrap: str, topic: str, sent: int) -> None:
    values = [r.value for r in read_topic(bootstrap, topic, sent, timeout=60)]
    assert len(values) == sent and set(values) == {f"n:{i}" for i in range(sent)}, (len(values), len(set(values)))


def test_sigterm_then_close_delivers_every_message(brokers: dict[str, str], tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("term-up")
    create_topic(bootstrap, topic, 1)
    report = _run_until_term(bootstrap, topic, tmp_path)
    assert report["sent"] > 1000
    assert (report["acked"], report["failed"], report["left"]) == (report["sent"], 0, 0)
    _exactly(bootstrap, topic, report["sent"])


def test_sigterm_then_close_with_the_cluster_down_journals_every_message(brokers: dict[str, str],
                                                                         tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("term-down")
    create_topic(bootstrap, topic, 1)
    report = _run_until_term(f"127.0.0.1:{free_port()}", topic, tmp_path, spilling=True)  # no broker there
    assert report["sent"] > 1000 and report["acked"] == report["failed"] == 0
    # the app's next producer (same cache directory: the slot the first one released; cluster "default" now on a
    # live broker) replays the journal
    with Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "cache"), "log_level": 0}):
        _exactly(bootstrap, topic, report["sent"])


def test_sigterm_while_the_link_goes_down_journals_every_message(brokers: dict[str, str], tmp_path: Path) -> None:
    """SIGTERM 0.7-1.3 s after the producer started sending to a cluster that is not there: around the moment
    the health monitor declares it down (about 1 s), so the link goes down before or during close(). Every sent
    message is journaled and replayed exactly once by the app's next producer, whichever side of it SIGTERM
    fell. Failed before the fix (one run of three lost all: 18,400 held, 0 journaled)."""
    bootstrap = brokers["dc-a"]
    for i, after_s in enumerate((0.7, 1.0, 1.3)):
        topic = unique(f"term-racing-{i}")
        create_topic(bootstrap, topic, 1)
        run = tmp_path / f"run{i}"
        report = _run_until_term(f"127.0.0.1:{free_port()}", topic, run, after_s=after_s)
        assert report["sent"] > 100 and report["acked"] == report["failed"] == 0, report
        with Producer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(run / "cache"), "log_level": 0}):
            _exactly(bootstrap, topic, report["sent"])
