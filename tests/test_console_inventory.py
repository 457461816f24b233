"""The client inventory: every Producer / Consumer instance reports under its own id and names its process, so
the console and ``ykafka admin clients`` list each client of a process that holds several (issue 30).

A child process holds two Producers and a Consumer; the test reads the clients, client, topic, topics and group
pages in Chromium and the CLI's table, as a user sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console_fixtures import Console, admin_clients
from tests.helpers import create_topic, unique, wait_until
from ykafka import Producer

ROOT = Path(__file__).resolve().parent.parent
COUNT = 50


@pytest.fixture
def mixed_process(console: Console) -> Iterator[dict[str, Any]]:
    st = console.stack
    topic, group = unique("inv"), unique("inv-g")
    app = st.new_app([topic], [topic], [group])
    create_topic(st.clusters["dc-a"], topic, 2)
    env = {**os.environ, "YKAFKA_TEST_CONF": json.dumps(st.client_config(app))}
    child = subprocess.Popen([sys.executable, "-m", "tests.inventory_child", topic, group, str(COUNT)], cwd=ROOT,
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = ""
        while not line.startswith('{"ids"'):  # the SDK's log lines come first
            line = child.stdout.readline()
            assert line, f"the child exited with {child.wait(30)}"
        out = json.loads(line)
        yield {**out, "app": app[0], "topic": topic, "group": group}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


def test_one_process_two_producers_and_a_consumer_are_three_clients(console: Console, page: Any,
                                                                    mixed_process: dict[str, Any]) -> None:
    m, st = mixed_process, console.stack
    # every message of both producers read exactly once by the consumer
    assert m["consumed"] == 2 * COUNT
    ids = m["ids"]
    assert len(set(ids)) == 3 and all(i.startswith(f"{m['app']}-") for i in ids), ids

    def reported() -> bool:
        seen = admin_clients(st, m["app"])
        return all(seen.get(i, {}).get("online") and m["topic"] in (seen[i].get("topics") or []) for i in ids)

    wait_until(reported, timeout=30)
    seen = admin_clients(st, m["app"])
    assert set(seen) == set(ids)
    assert {seen[i]["pid"] for i in ids} == {m["pid"]}
    assert len({seen[i]["process_started"] for i in ids}) == 1 and seen[ids[0]]["process_started"] > 0
    assert [seen[i]["role"] for i in ids] == ["producer", "producer", "consumer"]

    # the CLI: three rows, one process
    env = {**os.environ, "COLUMNS": "250", "YKAFKA_METASERVER": st.metaserver, "YKAFKA_ADMIN_TOKEN": st.admin_token}
    cli = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", "clients", "--app", m["app"]], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    lines = [ln for ln in cli.stdout.splitlines() if m["app"] in ln]
    assert len(lines) == 3, cli.stdout
    assert all(f"pid {m['pid']} started" in ln for ln in lines), cli.stdout
    assert sorted(ln.split("\t")[4].strip() for ln in lines) == ["consumer", "producer", "producer"], cli.stdout

    console.login(page, "viewer")
    page.goto(f"{console.url}/console/clients?app={m['app']}")
    procs = page.locator("#clients tbody.process")
    assert procs.count() == 1
    assert procs.first.get_attribute("data-pid") == str(m["pid"])
    assert procs.first.get_attribute("data-clients") == "3"
    assert "3 clients: 1 consumer, 2 producers" in procs.first.locator("tr.process-row").inner_text()
    assert sorted(r.get_attribute("data-client") or "" for r in procs.first.locator("tr.client").all()) == sorted(ids)
    assert "in 1 process." in page.locator("#client-count").inner_text()
    console.shot(page, "clients-process")

    # the consumer's page names its process and both producers beside it
    page.click(f"#clients tr[data-client='{ids[2]}'] a")
    assert f"pid {m['pid']}" in page.locator("#process").inner_text()
    assert sorted(li.get_attribute("data-client") or "" for li in page.locator("#siblings li").all()) == sorted(ids)

    # the topic's page and the Topics list count both producers; the group page lists its consumer
    page.goto(f"{console.url}/console/topics/{m['topic']}")
    roles = sorted(r.get_attribute("data-role") or "" for r in page.locator("#topic-clients tbody tr").all())
    assert roles == ["consumer", "producer", "producer"]
    page.goto(f"{console.url}/console/topics?q={m['topic']}")
    row = page.locator("#topics tbody tr", has_text=m["topic"]).first
    assert row.locator("td.producers").inner_text().strip() == "2", row.inner_text()
    page.goto(f"{console.url}/console/groups/{m['group']}?cluster=dc-a")
    members = page.locator("#members tr.client")
    assert members.count() == 1 and members.first.get_attribute("data-client") == ids[2]
    assert page.locator("#members tbody.process").first.get_attribute("data-pid") == str(m["pid"])


def test_a_producer_is_listed_at_the_cluster_its_topic_is_routed_to(console: Console) -> None:
    """The app's default cluster is dc-a; its one topic is routed to dc-b: the inventory's Cluster (and its
    ``cluster`` filter) says dc-b, where every message went, not the app's default."""
    st = console.stack
    topic = unique("inv-routed")
    app = st.new_app([topic])
    create_topic(st.clusters["dc-b"], topic, 1)
    st.push(f"topic:{topic}", {"route.cluster": "dc-b"})
    with Producer(st.client_config(app)) as producer:
        for i in range(10):
            producer.produce(topic, value=f"m{i}")
        assert producer.flush(30) == 0
        client_id = producer.runtime.client_id
    assert st.clusters["dc-b"] != st.clusters["dc-a"]
    seen = wait_until(lambda: admin_clients(st, app[0]).get(client_id, {}).get("state") == "closed"
                      and admin_clients(st, app[0])[client_id], timeout=30, message="the closed producer's report")
    assert seen["cluster"] == "dc-b" and seen["topics"] == [topic]
