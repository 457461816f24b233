"""Every console page has its own <title>, and no request a page makes answers an error (the favicon answered
404 before; issue 30)."""

from __future__ import annotations

from typing import Any

import requests

from tests.console_fixtures import Console, Load, wait_reported_topic
from tests.helpers import create_topic, unique

PAGES = ["/console/", "/console/clients", "/console/topics", "/console/groups?cluster=dc-a", "/console/config",
         "/console/apps", "/console/requests", "/console/clusters", "/console/trace", "/console/dlq",
         "/console/alerts", "/console/audit", "/console/users"]


def test_each_page_has_its_own_title_and_nothing_answers_an_error(console: Console, page: Any) -> None:
    st = console.stack
    topic, group = unique("titles"), unique("titles-g")
    app = st.new_app([topic], [topic], [group])
    create_topic(st.clusters["dc-a"], topic, 1)
    load = Load(st.client_config(app), topic).start()
    try:
        wait_reported_topic(st, app[0], [load.client_id], topic)
        failed: list[str] = []
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.goto(console.url + "/console/login")
        titles = {"login": page.title()}
        console.login(page, "admin")
        subjects = [f"/console/clients/{app[0]}/{load.client_id}", f"/console/topics/{topic}?cluster=dc-a",
                    f"/console/groups/{group}?cluster=dc-a", f"/console/apps/{app[0]}"]
        for path in PAGES + subjects:
            page.goto(console.url + path)
            page.wait_for_load_state("networkidle")
            titles[path] = page.title()
        assert failed == [], failed
        assert len(set(titles.values())) == len(titles), titles
        assert all(t.endswith(" · ykafka console") for t in titles.values()), titles
        assert titles[subjects[0]] == f"Client {load.client_id} · ykafka console"
        assert titles[subjects[1]] == f"Topic {topic} · ykafka console"
        assert titles[subjects[2]] == f"Group {group} · ykafka console"
        assert titles["/console/clients"] == "Clients · ykafka console"
        icon = requests.get(console.url + "/favicon.ico", timeout=10)
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        assert b"<svg" in icon.content
    finally:
        load.stop()
