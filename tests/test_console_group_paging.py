"""The console's groups page is paged: with 1,000 consumer groups on a real Apache Kafka broker a request
describes one page of groups (200, by name, a **Next** link), not every group of the cluster, and the name
filter narrows the list before the page is cut (docs/deployment.md, "Sizing the control plane").

The real MetaServer app in process on SQLite, served over HTTP by uvicorn so Chromium (Playwright) reads it
too; the groups are real: each committed an offset on the session's Kafka broker, deleted again at the end."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.console_fixtures import SCREENSHOTS
from tests.helpers import create_topic
from tests.support import free_port

pytestmark = pytest.mark.broker("kafka")

N = 1_000  # 5 pages (a run with 2,000 walked 10 the same way; the suite's time is short)
PASSWORD = "group-paging-1"


class Served:
    def __init__(self, app: Any, url: str, prefix: str) -> None:
        self.app, self.url, self.prefix = app, url, prefix

    def described(self) -> int:
        """Groups the app's lag samplers have described so far (each one broker request for its offsets)."""
        from metaserver.console import group_views

        return sum(s.described for s in group_views._SAMPLERS.values())


@pytest.fixture(scope="module")
def served(kafka_brokers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import uvicorn
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from fastapi.testclient import TestClient

    from metaserver.app import create_app
    from metaserver.console import users
    from metaserver.settings import Settings

    bootstrap = kafka_brokers["dc-a"]
    tag = uuid.uuid4().hex[:6]
    prefix, topic = f"gp{tag}-", f"gp{tag}-orders"
    create_topic(bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"{prefix}{i:04d}" for i in range(N)]
    for start in range(0, N, 500):  # one request per group, 500 in flight
        futures = [admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(g, [TopicPartition(topic, 0, 1)])],
                                                      request_timeout=30) for g in names[start:start + 500]]
        for asked in futures:
            for future in asked.values():
                future.result(30)
    app = create_app(Settings(db_url=f"sqlite:///{Path(tmp_path_factory.mktemp('gpaging')) / 'ms.db'}",
                              admin_tokens={"ops": "token-1"}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        with TestClient(app) as client:  # the lifespan runs here; uvicorn below serves the same app object
            resp = client.put("/v1/admin/clusters/dc-a", headers={"Authorization": "Bearer token-1"},
                              json={"bootstrap_servers": bootstrap, "dc": "a"})
            assert resp.status_code == 200, resp.text
            users.create(app.state.services.engine, "viewer-g", PASSWORD, "viewer")
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield Served(app, f"http://127.0.0.1:{port}", prefix)
    finally:
        server.should_exit = True
        thread.join(10)
        for start in range(0, N, 500):  # the session's broker is shared: other modules list its groups too
            for future in admin.delete_consumer_groups(names[start:start + 500], request_timeout=30).values():
                future.exception(30)


def _session(served: Served) -> requests.Session:
    sess = requests.Session()
    resp = sess.post(served.url + "/console/login", data={"username": "viewer-g", "password": PASSWORD}, timeout=30)
    assert resp.status_code == 200 and "/console/login" not in resp.url, resp.text[:300]
    return sess


def _groups(html: str) -> list[str]:
    """The names in the "groups" table, in page order."""
    table = re.search(r'<table id="groups">.*?</table>', html, re.S)
    assert table is not None, html[:500]
    return re.findall(r'<tr data-group="([^"]+)">', table.group(0))


def _next(html: str) -> str | None:
    found = re.search(r'<a id="next" href="([^"]+)"', html)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_groups_page_describes_one_page_and_links_the_next(served: Served) -> None:
    sess = _session(served)
    names = [f"{served.prefix}{i:04d}" for i in range(N)]
    before = served.described()
    first = sess.get(f"{served.url}/console/groups", params={"cluster": "dc-a", "name": served.prefix}, timeout=60)
    assert first.status_code == 200
    # one page described on the broker; before, every group of the cluster twice (list + candidates): >= 2,000
    assert served.described() - before == 200
    assert _groups(first.text) == names[:200]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", first.text))
    assert f"1,000 groups named like {served.prefix} on dc-a; 1–200 shown, by name." in text
    assert 'id="first"' not in first.text

    url, seen, pages = _next(first.text), list(_groups(first.text)), 1
    while url is not None:
        before = served.described()
        html = sess.get(served.url + url, timeout=60).text
        assert served.described() - before <= 200
        seen += _groups(html)
        pages += 1
        assert 'id="first"' in html
        url = _next(html)
    assert pages == 5 and seen == names  # every group once, in name order

    narrow = sess.get(f"{served.url}/console/groups", params={"cluster": "dc-a", "name": f"{served.prefix}09"},
                      timeout=60).text
    assert _groups(narrow) == names[900:] and _next(narrow) is None  # the filter before the page is cut


@pytest.mark.parametrize("after", ["", "x" * 1001])
def test_a_hand_edited_groups_page_link_is_a_clear_400(served: Served, after: str) -> None:
    resp = _session(served).get(f"{served.url}/console/groups", params={"cluster": "dc-a", "after": after},
                                timeout=30)
    assert resp.status_code == 400 and "This page link is not valid" in resp.text
    assert "x" * 50 not in resp.text  # not echoed


def test_a_browser_pages_through_the_groups(served: Served, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(served.url + "/console/login")
        page.fill("input[name=username]", "viewer-g")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(served.url + "/console/")
        page.goto(f"{served.url}/console/groups?cluster=dc-a")
        page.fill("input[name=name]", served.prefix)
        page.click("#groups-form button[type=submit]")
        rows = page.locator("#groups tr[data-group]")
        assert rows.count() == 200 and rows.first.get_attribute("data-group") == f"{served.prefix}0000"
        page.click("#next")
        page.wait_for_url(re.compile(r"after="))
        assert rows.count() == 200 and rows.first.get_attribute("data-group") == f"{served.prefix}0200"
        assert "201–400 shown" in page.locator("#group-count").inner_text()
        assert page.locator("input[name=name]").input_value() == served.prefix  # the filter kept
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "console-groups-paged.png"), full_page=False)
    finally:
        page.close()


def test_the_candidates_of_a_page_read_only_its_groups_commit_history(tmp_path: Path) -> None:
    """The idle judgement of a page's groups reads the pipeline's lag samples of those groups only; an empty
    page (a cluster whose last group was just deleted) reads nothing (an empty filter failed with a type error)."""
    from pipeline.groups import candidates
    from pipeline.lag_sampler import GroupInfo
    from pipeline.store import Store
    from tests.console_fixtures import write_lag_samples

    now = int(time.time() * 1000)
    rows = []
    for group, committed in (("g-moved", (4, 10)), ("g-still", (2, 2)), ("g-elsewhere", (1, 9))):
        for age, value in ((3600, committed[0]), (600, committed[1])):
            rows.append({"ts": now - age * 1000, "cluster": "dc-a", "topic": "t", "group": group, "partition": 0,
                         "committed": value, "end_offset": 10, "value": 0.0, "count": 0})
    write_lag_samples(tmp_path, rows)
    store = Store(str(tmp_path))
    page = [GroupInfo("g-moved", "EMPTY", 0, {("t", 0): 10}), GroupInfo("g-still", "EMPTY", 0, {("t", 0): 2})]
    found = {c["group"]: c for c in candidates(None, store, dt.timedelta(minutes=5), infos=page)}  # type: ignore[arg-type]
    assert set(found) == {"g-moved", "g-still"}  # g-elsewhere is not on the page: not judged, not read
    assert found["g-moved"]["basis"] == "offsets last moved" and 590 <= found["g-moved"]["idle_s"] <= 700
    assert found["g-still"]["basis"] == "offsets unchanged since first sample"
    assert candidates(None, store, dt.timedelta(minutes=5), infos=[]) == []  # type: ignore[arg-type]


def test_admin_groups_list_pages_like_the_console(served: Served, kafka_brokers: dict[str, str],
                                                   tmp_path: Path) -> None:
    """``ykafka admin groups list`` describes one page of groups (by name, ``--limit``, a name filter) and names
    the next page's cursor (``--after``), as the console's groups page does; before, it described every group
    of the cluster on every call (and had no such options)."""
    from click.testing import CliRunner

    from ykafka.cli import main

    names = [f"{served.prefix}{i:04d}" for i in range(N)]
    base = ["admin", "groups", "list", "--bootstrap", kafka_brokers["dc-a"], "--store", str(tmp_path / "no-store"),
            "--idle", "0s"]  # no store and idle 0: every group without a member is a candidate

    def listed(*args: str) -> tuple[list[str], dict[str, Any]]:
        result = CliRunner().invoke(main, [*base, "--json", *args])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        return [r["candidate"] for r in rows[:-1]], rows[-1]["page"]

    seen, pages, after, firsts = [], 0, None, []
    while True:
        found, page = listed("--name", served.prefix, "--limit", "300", *(("--after", after) if after else ()))
        assert page["total"] == N and page["described"] == len(found) <= 300
        seen += found
        firsts.append(page["first"])
        pages += 1
        after = page["next"]
        if after is None:
            break
        assert after == found[-1]
    assert seen == names and pages == 4 and firsts == [1, 301, 601, 901]  # every group once, in name order

    narrow, page = listed("--name", f"{served.prefix}09")
    assert narrow == names[900:] and page == {"total": 100, "first": 1, "described": 100, "next": None}

    human = CliRunner().invoke(main, [*base, "--name", served.prefix])
    assert human.exit_code == 0, human.output
    assert (f"200 candidate(s) among groups 1-200 of 1,000 matching {served.prefix}; next page: --after "
            f"{served.prefix}0199") in " ".join(human.stdout.split())

    for bad, error in ((["--limit", "0"], "'--limit': 0 is not in the range x>=1"),
                       (["--limit", "5001"], "at most 5000 groups a page"),
                       (["--after", "x" * 1001], "a group name of 1 to 1000 characters")):
        result = CliRunner().invoke(main, [*base, *bad])
        assert result.exit_code == 2 and error in result.output, result.output
        assert "x" * 50 not in result.output  # not echoed
