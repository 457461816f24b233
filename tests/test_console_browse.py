"""Browsing a topic's messages in the console (issue 30): a partition from an offset, a key in a time window,
headers, values as text / JSON / hex; viewers see metadata only, operators values; the topic's masking rules
apply to what is shown and exported; export is the admin's right; every browse and export is audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests
from confluent_kafka import Producer

from tests.console_fixtures import Console
from tests.helpers import create_topic, unique

ROOT = Path(__file__).resolve().parent.parent


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(12):
        value = json.dumps({"order": i, "card": {"number": f"4111-{i:04d}", "cvv": "123"}, "email": f"u{i}@x.io"})
        producer.produce(topic, value.encode(), f"k{i % 3}".encode(), partition=i % 2,
                         headers=[("trace", f"t-{i}".encode())])
        producer.flush(10)  # one batch each (Tansu's end offsets)


def test_browse_with_and_without_the_right_masked_exported_and_audited(console: Console, page: Any) -> None:
    st, boot = console.stack, console.stack.clusters["dc-a"]
    topic = unique("browse")
    create_topic(boot, topic, 2)
    (st.home / "masks.yaml").write_text(f"{topic}: ['$.card.number', '$.email']\n")
    _produce(boot, topic)

    # a viewer: offsets, keys, headers and sizes, no value
    console.login(page, "viewer")
    page.goto(f"{console.url}/console/topics/{topic}?cluster=dc-a")
    page.click("#browse-link")
    page.fill("input[name=cluster]", "dc-a")
    page.fill("input[name=offset]", "2")
    page.click("#read")
    rows = page.locator("#messages tbody tr")
    assert rows.count() == 4  # partition 0 holds 6 messages: offsets 2..5
    assert [r.get_attribute("data-offset") for r in rows.all()] == ["0:2", "0:3", "0:4", "0:5"]
    assert rows.first.locator(".key").inner_text() == "k1" and "trace=t-4" in rows.first.inner_text()
    assert page.locator("#messages .value").count() == 0 and "4111" not in page.content()
    assert page.locator("#export").count() == 0
    assert "metadata only" in page.locator("main").inner_text()
    forged = page.request.get(f"{console.url}/console/topics/{topic}/export?cluster=dc-a&partition=0&offset=0")
    assert forged.status == 403

    # an operator sees values, masked by the topic's rules, as JSON
    page.context.clear_cookies()
    console.login(page, "operator")
    page.goto(f"{console.url}/console/topics/{topic}/messages?cluster=dc-a&partition=1&offset=0&format=json")
    values = page.locator("#messages .value").all_inner_texts()
    assert len(values) == 6
    first = json.loads(values[0])
    assert first == {"order": 1, "card": {"number": "***", "cvv": "123"}, "email": "***"}
    assert "4111" not in page.content() and "@x.io" not in page.content()
    assert "masked: $.card.number, $.email" in page.locator("#masked").inner_text()
    console.shot(page, "topic-messages")
    page.goto(f"{console.url}/console/topics/{topic}/messages?cluster=dc-a&partition=1&offset=5&format=hex")
    assert page.locator("#messages .value").inner_text().startswith("7b 22 6f 72 64 65 72 22")  # {"order"

    # a key within a time window, every partition, oldest first
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 600))
    page.goto(f"{console.url}/console/topics/{topic}/messages?cluster=dc-a&key=k2&since={since}")
    found = page.locator("#messages tbody tr").all()
    assert {r.get_attribute("data-offset") for r in found} == {"0:1", "1:2", "0:4", "1:5"}  # orders 2, 5, 8, 11
    stamps = [int(r.get_attribute("data-ts") or 0) for r in found]
    assert stamps == sorted(stamps)  # oldest first (messages of one millisecond by partition, then offset)
    # bad input: a clear error, never echoed
    page.goto(f"{console.url}/console/topics/{topic}/messages?cluster=dc-a&partition=0&offset=<b>x</b>")
    assert page.locator("#browse-error").inner_text() == "offset must be a whole number"
    assert "<b>x</b>" not in page.content()

    # the admin exports the selection as JSON lines, masked as shown
    page.context.clear_cookies()
    console.login(page, "admin")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    export = requests.get(f"{console.url}/console/topics/{topic}/export",
                          params={"cluster": "dc-a", "partition": "0", "offset": "0"}, cookies=cookies, timeout=30)
    assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert [m["offset"] for m in lines] == [0, 1, 2, 3, 4, 5]
    assert all(json.loads(m["value"])["card"]["number"] == "***" for m in lines) and "4111" not in export.text

    # ykafka admin messages: the same read through the admin API, masked, one JSON object a line
    env = {**os.environ, "YKAFKA_METASERVER": st.metaserver, "YKAFKA_ADMIN_TOKEN": st.admin_token}
    cli = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", "messages", topic, "--partition", "1",
                          "--offset", "4", "--cluster", "dc-a", "--jsonl"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    got = [json.loads(line) for line in cli.stdout.splitlines()]
    assert [(m["offset"], m["key"], json.loads(m["value"])["order"]) for m in got] == [(4, "k0", 9), (5, "k2", 11)]
    assert "4111" not in cli.stdout and got[0]["headers"] == [["trace", "t-9"]]

    audit = st.admin("GET", f"/v1/admin/audit?target=topic:{topic}@dc-a&limit=50").json()
    actions = sorted(a["action"] for a in audit)
    assert actions.count("topic.export") == 1 and actions.count("topic.browse") == 6, actions
    viewer = [a for a in audit if a["operator"] == f"console:{console.users['viewer']}"]
    assert viewer and viewer[0]["after"]["values"] is False and viewer[0]["after"]["messages"] == 4
