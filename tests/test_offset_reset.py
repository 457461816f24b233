"""Consumer-group offset resets (issue 30): the dry run's plan, an empty group reset directly, a live group of
ykafka consumers reset in steps from the console (pause and leave, reset, resume: the consumer re-reads exactly
what the reset put back), any other active group refused; each reset audited.

Real brokers, the real MetaServer and config service, real ykafka consumers, Chromium for the console.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import requests
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer

from tests.console_fixtures import Console
from tests.consumer_fixtures import Recorder, committed
from tests.helpers import create_topic, unique, wait_until
from ykafka.consumer import Consumer

ROOT = Path(__file__).resolve().parent.parent


def _reset(console: Console, group: str, **body: Any) -> requests.Response:
    return requests.post(f"{console.url}/v1/admin/groups/{group}/offsets/reset", json={"cluster": "dc-a", **body},
                         headers={"Authorization": f"Bearer {console.stack.admin_token}"}, timeout=30)


def produce(bootstrap: str, topic: str, count: int, keys: int = 10, start: int = 0) -> dict[int, tuple[int, int]]:
    """Values 0..count-1 (key ``k<i % keys>``), one batch each: Tansu answers a partition's end offset as its
    last batch's base offset + 1, so a batch of many messages would hide all but its first from a reset."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    where: dict[int, tuple[int, int]] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        where[int(msg.value())] = (msg.partition(), msg.offset())

    for i in range(start, start + count):
        producer.produce(topic, str(i).encode(), f"k{i % keys}".encode(), on_delivery=delivered)
        producer.flush(10)
    assert len(where) == count
    return where


def _ends(where: dict[int, tuple[int, int]], partitions: int) -> dict[int, int]:
    counts = Counter(p for p, _ in where.values())
    return {p: counts.get(p, 0) for p in range(partitions)}


def test_dry_run_then_an_empty_group_is_reset_directly_and_audited(console: Console) -> None:
    st, boot = console.stack, console.stack.clusters["dc-a"]
    topic, group = unique("rst"), unique("rst-g")
    create_topic(boot, topic, 2)
    ends = _ends(produce(boot, topic, 100, keys=10), 2)
    assert sum(ends.values()) == 100 and min(ends.values()) > 5

    dry = _reset(console, group, to="offset", value=5, topic=topic, dry_run=True)
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["mode"] == "direct" and plan["refused"] is None and plan["members"] == "0"
    assert [(r["partition"], r["current"], r["new"], r["lag"]) for r in plan["rows"]] == [
        (p, None, 5, ends[p] - 5) for p in (0, 1)]
    assert committed(boot, group, topic, 2) == {0: -1001, 1: -1001}  # a dry run changes nothing

    done = _reset(console, group, to="offset", value=5, topic=topic)
    assert done.status_code == 200 and done.json()["state"] == "done" and done.json()["mode"] == "direct", done.text
    assert committed(boot, group, topic, 2) == {0: 5, 1: 5}

    # shift partition 1 back by 2; the latest and a far-future time go to the end; time 0 to the start
    shifted = _reset(console, group, to="shift", value=-2, topic=topic, partitions=[1]).json()
    assert [(r["partition"], r["current"], r["new"]) for r in shifted["plan"]] == [(1, 5, 3)]
    assert committed(boot, group, topic, 2) == {0: 5, 1: 3}
    latest = _reset(console, group, to="latest", dry_run=True).json()  # every topic the group has offsets for
    assert [(r["partition"], r["new"], r["lag"], r["lag_before"]) for r in latest["rows"]] == [
        (0, ends[0], 0, ends[0] - 5), (1, ends[1], 0, ends[1] - 3)]
    assert [r["new"] for r in _reset(console, group, to="timestamp", value=0, topic=topic, dry_run=True)
            .json()["rows"]] == [0, 0]
    # clamped to what the partition holds; bad input refused without echoing it
    assert [r["new"] for r in _reset(console, group, to="offset", value=10**9, topic=topic, dry_run=True)
            .json()["rows"]] == [ends[0], ends[1]]
    bad = _reset(console, group, to="offset", value=1, topic=topic, partitions=[7], dry_run=True)
    assert bad.status_code == 409 and bad.json()["detail"] == "the topic has no partition 7 (it has 2)"
    assert _reset(console, group, to="sideways", topic=topic).status_code == 422

    # the CLI: a dry run by default, --execute resets
    env = {**os.environ, "YKAFKA_METASERVER": st.metaserver, "YKAFKA_ADMIN_TOKEN": st.admin_token}
    args = [sys.executable, "-m", "ykafka.cli", "admin", "groups", "reset", group, "--to", "earliest", "--topic",
            topic, "--cluster", "dc-a"]
    dry_cli = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert dry_cli.returncode == 0, dry_cli.stderr
    assert f"{topic}\t1\t3\t0\t0\t{ends[1]}\t{ends[1] - 3}\t{ends[1]}" in dry_cli.stdout, dry_cli.stdout
    assert "--execute resets directly (the group has no member)" in dry_cli.stdout
    assert committed(boot, group, topic, 2) == {0: 5, 1: 3}
    run_cli = subprocess.run([*args, "--execute"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run_cli.returncode == 0, run_cli.stderr
    assert f"reset: {topic}[0] 5 → 0, {topic}[1] 3 → 0" in run_cli.stdout and ": done" in run_cli.stdout
    assert committed(boot, group, topic, 2) == {0: 0, 1: 0}

    audit = st.admin("GET", f"/v1/admin/audit?action=group.offsets.reset&target=group:{group}@dc-a").json()
    assert len(audit) == 3
    assert audit[0]["before"] == {f"{topic}[0]": 5, f"{topic}[1]": 3}
    assert audit[0]["after"] == {f"{topic}[0]": 0, f"{topic}[1]": 0, "reset": f"earliest on {topic}"}

    # a time: the first offset at or after it (here: the first message produced after it, on each partition)
    mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(boot, topic, 20, start=100)
    at_mid = _reset(console, group, to="timestamp", value=mid, topic=topic, dry_run=True).json()
    assert [(r["current"], r["new"]) for r in at_mid["rows"]] == [(0, ends[0]), (0, ends[1])]


def test_an_active_group_of_other_consumers_is_refused_with_the_reason(console: Console) -> None:
    boot = console.stack.clusters["dc-a"]
    topic, group = unique("rst"), unique("rst-g")
    create_topic(boot, topic, 1)
    produce(boot, topic, 10)
    raw = RawConsumer({"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                       "session.timeout.ms": 6000})
    try:
        raw.subscribe([topic])
        wait_until(lambda: raw.poll(0.2) is not None and bool(raw.assignment()), timeout=30)
        resp = _reset(console, group, to="earliest", topic=topic)
        assert resp.status_code == 409
        detail = resp.json()["detail"]
        # Apache Kafka lists the member (and its host); Tansu says STABLE and lists none
        assert detail.startswith(("the group is STABLE with 1 member(s), 1 not ykafka consumers reporting it "
                                  "(hosts 127.0.0.1): they would commit over the reset",
                                  "the group is STABLE with some (not listed) member(s), its not ykafka consumers "
                                  "reporting it (hosts not listed): they would commit over the reset")), detail
    finally:
        raw.close()


def test_a_live_ykafka_group_is_paused_reset_and_resumed_from_the_console(console: Console, page: Any,
                                                                         running: Any, tmp_path: Path) -> None:
    st, boot = console.stack, console.stack.clusters["dc-a"]
    topic, group = unique("rst"), unique("rst-g")
    app = st.new_app([topic], [topic], [group])
    create_topic(boot, topic, 2)
    where = produce(boot, topic, 60, keys=6)
    ends = _ends(where, 2)
    recorder = Recorder()
    consumer = Consumer(st.client_config(app, **{
        "group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500, "ykafka.consumer.commit.interval.ms": 200}))
    running(consumer, recorder, [topic])
    wait_until(lambda: recorder.count() == 60, timeout=60)
    wait_until(lambda: committed(boot, group, topic, 2) == ends, timeout=30)

    console.login(page, "operator")
    page.goto(f"{console.url}/console/groups/{group}?cluster=dc-a")
    page.click("#reset-link")
    page.select_option("select[name=to]", "shift")
    page.fill("input[name=value]", "-4")
    page.fill("input[name=topic]", topic)
    page.click("#dry-run")
    rows = page.locator("#plan tbody tr")
    assert rows.count() == 2
    assert [rows.nth(p).locator(".current").inner_text() for p in (0, 1)] == [str(ends[0]), str(ends[1])]
    assert [rows.nth(p).locator(".new").inner_text() for p in (0, 1)] == [str(ends[0] - 4), str(ends[1] - 4)]
    assert "reset in steps" in page.locator("#reset-mode").inner_text()
    console.shot(page, "group-reset-dry-run")
    page.once("dialog", lambda d: d.accept())
    page.click("#reset")
    page.wait_for_url("**/resets/*")
    page.locator("#reset-state", has_text="done").wait_for(timeout=90_000)
    steps = [s.get_attribute("data-step") for s in page.locator("#steps tbody tr").all()]
    assert steps[0] == "pause" and "wait" in steps and steps[-2:] == ["reset", "resume"], steps
    waits = page.locator("#steps tr[data-step=wait]").all_inner_texts()
    assert any("1 of 1 consumer(s) report paused and left; the group is EMPTY with 0 member(s)" in w
               for w in waits), waits
    console.shot(page, "group-reset-done")

    # the consumer rejoined at the new offsets: the last 4 of each partition handled once more, nothing else
    wait_until(lambda: recorder.count() == 68, timeout=60)
    time.sleep(2)
    assert recorder.count() == 68
    seen = Counter(recorder.values)
    expected_again = {v for v, (p, off) in where.items() if off >= ends[p] - 4}
    assert {v for v, n in seen.items() if n == 2} == expected_again and len(expected_again) == 8
    assert set(seen) == set(range(60)) and max(seen.values()) == 2
    wait_until(lambda: committed(boot, group, topic, 2) == ends, timeout=30)
    # hot config as it was: neither key left at the group's scope
    released = st.admin("GET", f"/v1/admin/config?scope=group:{group}").json()["released"]
    assert "consumer.paused" not in released and "consumer.leave" not in released
