"""Clients and fork() (issue 40, item 2): what a client made before a fork does in the child, in the process
models services run: ``multiprocessing`` (fork and forkserver), a gunicorn prefork app with ``--preload``, a Celery
prefork worker; and asyncio clients in a FastAPI lifespan.

A plain Producer made before the fork rebuilds itself in the child on first use (its own handles, threads and
spill slot: the parent's slot stays the parent's); a Consumer raises ForkedClientError naming the fix and its
close() there does nothing. Counts are strict: every message acknowledged in its process is on the topic once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from tests.fork_child import CHILDREN, PER_CHILD
from tests.helpers import create_topic, unique, wait_until
from tests.sdk_fixtures import read_topic
from tests.support import ROOT
from ykafka.devstack.procs import free_port

#: the process-model samples this module runs (tests/test_samples.py checks every sample is run by some test)
PROCESS_SAMPLES = ("gunicorn_prefork.py", "fastapi_lifespan.py", "celery_tasks.py")


def test_the_process_model_samples_are_these() -> None:
    assert all((ROOT / "samples" / name).is_file() for name in PROCESS_SAMPLES)



def _scenario(method: str, bootstrap: str, topic: str, cache: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "tests.fork_child", method, bootstrap, topic,
                           str(cache)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_a_producer_made_before_fork_rebuilds_itself_in_each_child(brokers: dict[str, str], tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("fork")
    create_topic(bootstrap, topic, 1)
    report = _scenario("fork", bootstrap, topic, tmp_path)
    children = report["children"]
    assert report["exitcodes"] == [0] * CHILDREN
    assert [(c["left"], c["acked"]) for c in children] == [(0, PER_CHILD)] * CHILDREN
    for child in children:
        assert child["client_id"].split("-")[-2] == str(child["pid"])  # built in the child, not the parent's
        assert child["refused"].startswith("this Consumer was created in process ") and \
            "create the Consumer in the child process, after the fork" in child["refused"], child["refused"]
        assert child["consumer_close"] == 0
    parent_slot = report["parent_slots"]
    own = [sorted(set(c["slots"]) - set(parent_slot)) for c in children]
    assert all(len(slots) == 1 for slots in own) and len({s[0] for s in own}) == CHILDREN, own  # never shared
    assert report["parent_left"] == 0
    values = [r.value for r in read_topic(bootstrap, topic, 1 + CHILDREN * PER_CHILD + PER_CHILD)]
    assert len(values) == len(set(values)) == 1 + CHILDREN * PER_CHILD + PER_CHILD


def test_forkserver_children_make_their_own_and_a_client_is_never_pickled(brokers: dict[str, str],
                                                                          tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("forkserver")
    create_topic(bootstrap, topic, 1)
    report = _scenario("forkserver", bootstrap, topic, tmp_path)
    assert report["pickle"] == ("a Producer cannot be pickled or sent to another process (its librdkafka handles "
                                "and threads belong to this one): create one in that process")
    assert report["exitcodes"] == [0] * CHILDREN
    assert [(c["left"], c["acked"]) for c in report["children"]] == [(0, PER_CHILD)] * CHILDREN
    assert [len(c["slots"]) for c in report["children"]] == [1] * CHILDREN  # its own; nothing of the parent's
    values = [r.value for r in read_topic(bootstrap, topic, CHILDREN * PER_CHILD)]
    assert len(values) == len(set(values)) == CHILDREN * PER_CHILD


def test_gunicorn_preload_workers_send_through_the_module_level_producer(brokers: dict[str, str],
                                                                          tmp_path: Path) -> None:
    bootstrap = brokers["dc-a"]
    topic = unique("gunicorn")
    create_topic(bootstrap, topic, 1)
    port = free_port()
    env = {**os.environ, "SAMPLE_BOOTSTRAP": bootstrap, "SAMPLE_TOPIC": topic, "YKAFKA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    master = subprocess.Popen([sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-b", f"127.0.0.1:{port}",
                               "--graceful-timeout", "10", "samples.gunicorn_prefork:app"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    answers: list[dict[str, Any]] = []
    try:
        def up() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 404
            except requests.RequestException:
                return False

        wait_until(up, 60, message="gunicorn serving")
        for _ in range(10):
            reply = requests.post(f"http://127.0.0.1:{port}/send", params={"count": 20}, timeout=60)
            assert reply.status_code == 200, reply.text
            answers.append(reply.json())
        bad = requests.post(f"http://127.0.0.1:{port}/send", params={"count": "x"}, timeout=10)
        assert (bad.status_code, bad.text) == (400, "count must be an integer\n")
    finally:
        master.send_signal(signal.SIGTERM)
        try:
            output, _ = master.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            master.kill()
            output, _ = master.communicate()
    assert master.returncode == 0, output[-3000:]
    assert [(a["sent"], a["left"]) for a in answers] == [(20, 0)] * 10
    for answer in answers:  # each worker's own producer, rebuilt after the fork (not the master's)
        assert answer["pid"] != master.pid and answer["client_id"].split("-")[-2] == str(answer["pid"]), answer
    started = time.monotonic()
    values = [r.value for r in read_topic(bootstrap, topic, 200)]
    assert len(values) == len(set(values)) == 200, time.monotonic() - started


def test_fastapi_lifespan_clients_live_and_close_with_the_app(brokers: dict[str, str], tmp_path: Path) -> None:
    """samples/fastapi_lifespan.py under uvicorn: its asyncio clients are made in the lifespan and closed when
    SIGTERM shuts the server down, every message sent acknowledged and read back."""
    bootstrap = brokers["dc-a"]
    topic = unique("fastapi")
    create_topic(bootstrap, topic, 1)
    port = free_port()
    env = {**os.environ, "SAMPLE_BOOTSTRAP": bootstrap, "SAMPLE_TOPIC": topic, "YKAFKA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "samples.fastapi_lifespan:app", "--port", str(port),
                               "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        def up() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/stats", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(up, 60, message="uvicorn serving")
        for _ in range(5):
            reply = requests.post(f"http://127.0.0.1:{port}/send", params={"count": 20}, timeout=60)
            assert reply.json() == {"sent": 20}, reply.text
        assert requests.post(f"http://127.0.0.1:{port}/send", params={"count": 0}, timeout=10).status_code == 422
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()["consumed"] >= 100, 30,
                   message="100 read back")
        assert requests.get(f"http://127.0.0.1:{port}/stats", timeout=5).json() == {"sent": 100, "consumed": 100}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            output, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            output, _ = server.communicate()
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit by SIGTERM, as a supervisor expects)
    assert server.returncode in (0, -signal.SIGTERM), output[-3000:]
    assert "closed: sent 100, consumed 100, undelivered 0" in output, output[-3000:]
    assert len(read_topic(bootstrap, topic, 100)) == 100


def test_celery_prefork_tasks_send_through_the_module_level_producer(brokers: dict[str, str], tmp_path: Path) -> None:
    """samples/celery_tasks.py under a real Celery prefork worker (2 pool processes, a directory as its broker):
    the Producer made at import in Celery's main process rebuilds itself in each pool process."""
    bootstrap = brokers["dc-a"]
    topic = unique("celery")
    create_topic(bootstrap, topic, 1)
    env = {**os.environ, "SAMPLE_BOOTSTRAP": bootstrap, "SAMPLE_TOPIC": topic, "SAMPLE_CELERY_DIR": str(tmp_path),
           "YKAFKA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "samples.celery_tasks", "worker",
                               "--pool=prefork", "-c", "2", "--loglevel=warning", "--without-mingle",
                               "--without-gossip"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        sent = subprocess.run([sys.executable, "-c", "from samples.celery_tasks import send\n"
                               "for _ in range(6): send.delay(20)\n"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr[-3000:]
        values = [r.value for r in read_topic(bootstrap, topic, 120, timeout=90)]
    finally:
        worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown
        try:
            output, _ = worker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            output, _ = worker.communicate()
    assert worker.returncode == 0, output[-3000:]
    assert len(values) == len(set(values)) == 120
    done = [line.split("task sent ", 1)[1] for line in output.splitlines() if "task sent " in line]
    assert len(done) == 6 and all(d.startswith("20 of 20 from pid ") for d in done), output[-3000:]
    for line in done:  # each pool process's own producer (client id of its pid), not the main process's
        pid, client_id = line.split("from pid ", 1)[1].split(" as ")
        assert pid != str(worker.pid) and client_id.split("-")[-2] == pid, line
