"""Lists over the whole client inventory are paged: the console's clients page (keyset on last_seen, a capped
count) and the admin API's ``/clients`` and ``/clients/history`` (``Link: rel="next"``). With 20,000 clients a
request reads one page, not the table (docs/deployment.md, "Sizing the control plane").

The real MetaServer app on a real SQLite database, seeded as ``bench/control_plane_scale.py`` seeds it, in
process (a request at a time through Starlette's TestClient)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

N = 20_000
APPS = 50  # app-00 .. app-49: 400 clients each
PASSWORD = "paging-pass-1"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from fastapi.testclient import TestClient

    from metaserver.app import create_app
    from metaserver.console import users
    from metaserver.settings import Settings
    from metaserver.storage import db
    from metaserver.storage.models import client_reports, client_state

    app = create_app(Settings(db_url=f"sqlite:///{Path(tmp_path_factory.mktemp('paging')) / 'ms.db'}",
                              admin_tokens={"ops": "token-1"}))
    now = time.time()
    base = {"hostname": "h", "pid": 1, "language": "python", "cluster": "dc-a", "state": "running", "errors": [],
            "extra": {}, "config_release_keys": {}, "first_seen": now - 3600, "role": "producer",
            "topics": ["orders"], "group_id": None, "ykafka_version": "0.1.0", "librdkafka_version": "2.16.0"}
    # last_seen: every tenth client shares its second with nine others, so ties are paged through too
    rows = [{**base, "app_id": f"app-{i % APPS:02d}", "client_id": f"client-{i:06d}",
             "ip": f"10.0.{i // 250}.{i % 250}",
             "last_seen": now - (i // 10)} for i in range(N)]
    history = [{k: v for k, v in row.items() if k not in ("first_seen", "last_seen")} | {"at": row["last_seen"]}
               for row in rows[:2_500]]
    with db.write(app.state.services.engine) as conn:
        conn.execute(client_state.insert(), rows)
        conn.execute(client_reports.insert(), history)
    users.create(app.state.services.engine, "viewer-1", PASSWORD, "viewer")
    with TestClient(app) as client:
        assert client.post("/console/login", data={"username": "viewer-1", "password": PASSWORD}).status_code in (
            200, 303)
        yield client


def _clients(html: str) -> list[str]:
    return re.findall(r'<tr class="client" data-client="([^"]+)"', html)


def _next(html: str) -> str | None:
    found = re.search(r'<a id="next" href="([^"]+)"', html)
    return found.group(1).replace("&amp;", "&").replace("&#34;", '"') if found else None


def test_the_clients_page_shows_one_page_and_links_the_next(http: Any) -> None:
    first = http.get("/console/clients").text
    shown = _clients(first)
    assert len(shown) == 200 and shown[0] == "client-000009" and shown[:10] == [
        f"client-{i:06d}" for i in range(9, -1, -1)]  # newest first, ties in key order (descending)
    assert "more than 10,000 clients match; 200 shown, seen last" in re.sub(r"\s+", " ", first)
    assert 'id="first"' not in first
    second_url = _next(first)
    assert second_url is not None
    second = http.get(second_url).text
    assert _clients(second) == [f"client-{i:06d}" for b in range(20, 40) for i in range(10 * b + 9, 10 * b - 1, -1)]
    assert 'id="first"' in second

    # one app's 400 clients: two full pages, then no next link; every client exactly once
    url: str | None = "/console/clients?app=app-07"
    seen: list[str] = []
    pages = 0
    while url is not None:
        html = http.get(url).text
        seen += _clients(html)
        pages += 1
        assert "400 clients match" in html
        url = _next(html)
    assert pages == 2 and len(seen) == 400 and set(seen) == {f"client-{i:06d}" for i in range(7, N, APPS)}


@pytest.mark.parametrize("after", ["[1, 2]", "not json", '[true, "a", "b"]', '[1, "a", 3]', "[" * 5000])
def test_a_hand_edited_page_link_is_a_clear_400(http: Any, after: str) -> None:
    resp = http.get("/console/clients", params={"after": after})
    assert resp.status_code == 400 and "This page link is not valid" in resp.text
    assert len(after) < 8 or after[:20] not in resp.text  # not echoed


def test_the_admin_api_pages_clients_and_history_with_link_headers(http: Any) -> None:
    auth = {"Authorization": "Bearer token-1"}
    resp = http.get("/v1/admin/clients", params={"app": "app-03", "limit": 150}, headers=auth)
    got = [r["client_id"] for r in resp.json()]
    pages = 1
    while "link" in resp.headers:
        link = re.fullmatch(r'<([^>]+)>; rel="next"', resp.headers["link"])
        assert link is not None
        assert parse_qs(urlsplit(link.group(1)).query)["limit"] == ["150"]  # the filters and limit carried on
        resp = http.get(link.group(1), headers=auth)
        got += [r["client_id"] for r in resp.json()]
        pages += 1
    assert pages == 3 and got == sorted(f"client-{i:06d}" for i in range(3, N, APPS))  # 150 + 150 + 100

    resp = http.get("/v1/admin/clients/history", params={"limit": 1000}, headers=auth)
    ids = [r["id"] for r in resp.json()]
    while "link" in resp.headers:
        resp = http.get(re.fullmatch(r'<([^>]+)>; rel="next"', resp.headers["link"]).group(1),  # type: ignore[union-attr]
                        headers=auth)
        ids += [r["id"] for r in resp.json()]
    assert len(ids) == 2_500 and ids == sorted(set(ids), reverse=True)

    bad = http.get("/v1/admin/clients", params={"after_app": "app-03"}, headers=auth)
    assert bad.status_code == 400 and "after_app and after_client go together" in bad.text


def test_ephemeral_groups_on_sqlite(http: Any) -> None:
    from metaserver.console import queries
    from metaserver.storage import db
    from metaserver.storage.models import client_state

    engine = http.app.state.services.engine
    base = {"app_id": "app-eph", "ip": "10.9.0.1", "hostname": "h", "pid": 1, "language": "python",
            "role": "consumer", "topics": ["orders"], "state": "running", "errors": [], "config_release_keys": {},
            "first_seen": 1.0, "last_seen": 1.0}
    with db.write(engine) as conn:
        conn.execute(client_state.insert(), [
            {**base, "client_id": "e1", "group_id": "g-eph", "extra": {"ephemeral": True}},
            {**base, "client_id": "e2", "group_id": "g-eph", "extra": {}},
            {**base, "client_id": "k1", "group_id": "g-kept", "extra": {"ephemeral": False}}])
    with engine.connect() as conn:
        assert queries.ephemeral_groups(conn, ["g-eph", "g-kept", "g-none"]) == {"g-eph"}


def test_whole_fleet_counts_are_reused_only_when_slow_and_large(http: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overview's counts per role and a config panel's counts per status look at every live client; at
    100,000 clients each scan took 50-190 ms per page view. Once a scan is slow (here: any, the threshold set
    to 0) and the fleet large (here: any, the bar set to 0; 10,000 live clients by default), its result is
    reused for a few seconds; below the bar it is read on every view. Before, every page view ran every scan."""
    from sqlalchemy import event

    from metaserver.console import queries
    from metaserver.storage import db

    engine = http.app.state.services.engine
    scans: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        flat = " ".join(statement.split()).lower()
        if "from ms_client_state" in flat and "group by" in flat and "count(" in flat:
            scans.append(flat)

    monkeypatch.setattr(queries, "SUMMARY_SLOW_S", 0.0)
    monkeypatch.setattr(queries, "SUMMARY_MIN_CLIENTS", 0)
    queries._reused.clear()
    event.listen(engine, "before_cursor_execute", seen)
    try:
        shown = set()
        for _ in range(3):
            page = http.get("/console/")
            assert page.status_code == 200
            shown.add(re.search(r'<b id="live-count">([^<]+)</b>', page.text).group(1))  # type: ignore[union-attr]
        assert len(scans) == 1 and len(shown) == 1, scans  # the roles' count read once, reused by the next two
        with db.read(engine) as conn:
            first = queries.reached_summary(conn, 30, "global", "", "ykafka.global", ())
            assert queries.reached_summary(conn, 30, "global", "", "ykafka.global", ()) == first
            queries.reached_summary(conn, 30, "global", "", "ykafka.other", ())  # another panel: its own count
        assert len(scans) == 3

        scans.clear()  # a fleet below the bar: read on every view, however slow
        monkeypatch.setattr(queries, "SUMMARY_MIN_CLIENTS", N + 1)
        queries._reused.clear()
        for _ in range(3):
            assert http.get("/console/").status_code == 200
        assert len(scans) == 3
    finally:
        event.remove(engine, "before_cursor_execute", seen)
        queries._reused.clear()
