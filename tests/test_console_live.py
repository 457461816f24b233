"""Which clients the console calls live, and the config panel's reads at a large fleet's size (issue 41).

A client's last report (``close()``) says ``closed``; it is still within its 3 heartbeats for a while, and the
overview counted it live while the clients page showed it closed. On the real MetaServer (SQLite and
PostgreSQL): the overview, the clients page's "live only" filter and a config panel agree that it is not.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy import event

from metaserver.console import queries
from metaserver.domain import clients
from metaserver.schemas import ClientReport
from metaserver.storage import db
from metaserver.storage.models import client_release_keys, client_state
from tests.helpers import unique
from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, new_app, require_pg

PASSWORD = "live-pass-123"


def _every_summary_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every summary's scan counts as slow and large (the thresholds at 0, as at 100,000 clients), and none is
    left from an earlier test."""
    monkeypatch.setattr(queries, "SUMMARY_SLOW_S", 0.0)
    monkeypatch.setattr(queries, "SUMMARY_MIN_CLIENTS", 0)
    monkeypatch.setattr(queries, "SUMMARY_MIN_TOPICS", 0)
    queries._reused.clear()


def _console(server: MetaServer) -> requests.Session:
    name = unique("live")
    made = requests.post(server.url + "/v1/admin/users", json={"username": name, "password": PASSWORD,
                                                                "role": "viewer"},
                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    assert made.status_code in (200, 201), made.text
    sess = requests.Session()
    assert sess.post(server.url + "/console/login", data={"username": name, "password": PASSWORD},
                     allow_redirects=False, timeout=10).status_code == 303
    return sess


@pytest.fixture(scope="module")
def ms(ms_backend: str, ms_factory: Callable[..., MetaServer], request: pytest.FixtureRequest) -> MetaServer:
    """A MetaServer (SQLite, PostgreSQL) with a 30 s heartbeat: a running client stays live however slow the
    machine is between its report and the page (the suite's default of 1 s makes that 3 s)."""
    db_url = request.getfixturevalue("pg_schema_factory")() if ms_backend == "postgres" else None
    return ms_factory(db_url=db_url, renew_interval=30)


@contextlib.contextmanager
def recorded(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement (and its parameters) the engine sends while the block runs."""
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_client_that_reported_close_is_not_live_on_the_overview_nor_on_the_clients_page(ms: MetaServer) -> None:
    app = new_app(ms)
    sdk = ms.sdk(app.app_id, app.secret)
    token = sdk.grant("open-1").json()["token"]
    console = _console(ms)
    before = console.get(ms.url + "/console/", timeout=10)
    live_before = int(re.search(r'<b id="live-count">(\d+)</b>', before.text).group(1))  # type: ignore[union-attr]
    # two running producers, then one closes (its last report, within its 3 heartbeats)
    for client_id in ("open-1", "closing-1"):
        assert sdk.report(token, client_id=client_id, role="producer").status_code == 204
    assert sdk.report(token, client_id="closing-1", role="producer", state="closed").status_code == 204
    overview = console.get(ms.url + "/console/", timeout=10)
    clients = console.get(ms.url + f"/console/clients?app={app.app_id}", timeout=10)
    live_only = console.get(ms.url + f"/console/clients?app={app.app_id}&online=1", timeout=10)
    assert overview.status_code == clients.status_code == live_only.status_code == 200
    # before the fix: live_before + 2 (the closed one counted for up to 3 heartbeats)
    assert re.search(r'<b id="live-count">(\d+)</b>', overview.text).group(1) == str(  # type: ignore[union-attr]
        live_before + 1)
    row = re.search(r'data-client="closing-1".*?<span class="pill (\w+)">(\w+)</span>', clients.text, re.S)
    assert row is not None and row.groups() == ("off", "closed")
    assert re.findall(r'<tr class="client" data-client="([^"]+)"', live_only.text) == ["open-1"]


# --- a config panel's unsettled rows: the held keys' table and the errored clients' partial index --------------

@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    if request.param == "postgres":
        require_pg()
        url = request.getfixturevalue("pg_schema_factory")()
    else:
        url = f"sqlite:///{tmp_path_factory.mktemp('panel') / 'ms.db'}"
    eng = db.make_engine(url)
    db.migrate(eng)
    yield eng
    eng.dispose()


def _report(client_id: str, held: dict[str, str], **fields: Any) -> ClientReport:
    return ClientReport.model_validate({"client_id": client_id, "app_id": "panel-app", "role": "producer",
                                        "topics": ["orders"], "config_release_keys": held, **fields})


def _held_rows(engine: sa.Engine, client_id: str) -> set[tuple[str, str]]:
    with engine.connect() as conn:
        return {(str(n), str(k)) for n, k in conn.execute(
            sa.select(client_release_keys.c.namespace, client_release_keys.c.release_key)
            .where(client_release_keys.c.client_id == client_id))}


def test_a_reports_release_keys_are_one_row_per_namespace_and_part_rewritten_on_change_and_pruned(
        engine: sa.Engine) -> None:
    now = time.time()
    clients.store(engine, _report("k-1", {"ykafka.global": "rk-1+rk-c", "ykafka.topic.orders": "t9"}), now=now)
    assert _held_rows(engine, "k-1") == {("ykafka.global", "rk-1"), ("ykafka.global", "rk-c"),
                                         ("ykafka.topic.orders", "t9")}
    clients.store(engine, _report("k-1", {"ykafka.global": "rk-2"}), now=now + 1)  # a new release applied
    assert _held_rows(engine, "k-1") == {("ykafka.global", "rk-2")}
    clients.store(engine, _report("k-1", {"ykafka.global": "rk-2"}, state="degraded"), now=now + 2)
    assert _held_rows(engine, "k-1") == {("ykafka.global", "rk-2")}
    assert clients.prune(engine, now + 10 * 86400, 86400, 86400)["clients"] >= 1  # gone with the client
    assert _held_rows(engine, "k-1") == set()


def test_the_panels_pending_and_errored_rows_are_exact(engine: sa.Engine) -> None:
    """rk-10 is pending for rk-1 (the JSON filter's LIKE '%rk-1%' took it for a holder: never listed, though
    counted pending); a merged rk-1+rk-c holds rk-1; a client with no key is pending; a closed one is not live."""
    now = time.time()
    fleet = {"h-1": "rk-1", "h-2": "rk-1", "h-merged": "rk-1+rk-c", "p-old": "rk-0", "p-10": "rk-10",
             "h-err": "rk-1", "p-err": "rk-0", "h-closed": "rk-0"}
    for client_id, key in fleet.items():
        clients.store(engine, _report(client_id, {"ykafka.global": key},
                                      errors=["config rejected"] if client_id.endswith("err") else [],
                                      state="closed" if client_id.endswith("closed") else "running"), now=now)
    clients.store(engine, _report("p-none", {}), now=now)
    ns, keys = "ykafka.global", ["rk-1"]
    with db.read(engine) as conn:
        held = {r["client_id"] for r in queries.errored_holders(conn, 30, "global", "", ns, keys)}
        assert held == {"h-err"}
        few = queries.pending_page(conn, 30, "global", "", ns, keys, pending_n=4, total=9, limit=100)
        walked = queries.pending_page(conn, 30, "global", "", ns, keys, pending_n=4, total=9, limit=2)
        rk10 = queries.pending_page(conn, 30, "global", "", ns, ["rk-1"], pending_n=1, total=1000, limit=100)
    assert {r["client_id"] for r in few} == {"p-old", "p-10", "p-err", "p-none"}  # index path, then the walk
    assert [r["client_id"] for r in walked] == ["p-10", "p-err"]  # key order, two rows
    assert {"p-10", "p-old", "p-err"} <= {r["client_id"] for r in rk10}  # from the held keys' index


def test_the_panels_reads_walk_the_indexes_on_postgresql(engine: sa.Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the plans are PostgreSQL's (SQLite's fleets are small)")
    with recorded(engine) as seen, db.read(engine) as conn:
        queries.errored_holders(conn, 30, "global", "", "ykafka.global", ["rk-1"])
        queries.pending_page(conn, 30, "global", "", "ykafka.global", ["rk-1"], 1, 1000, 100)
    plans = []
    now = time.time()
    with engine.begin() as conn:  # 5,000 live clients without errors, each holding rk-1: the planner's view of a
        # fleet (on a handful of rows any plan is as cheap)
        conn.execute(client_state.insert(), [
            {"app_id": "plan-app", "client_id": f"plan-{i:05d}", "role": "producer", "state": "running",
             "errors": [], "config_release_keys": {"ykafka.global": "rk-1"}, "first_seen": now, "last_seen": now}
            for i in range(5000)])
        conn.execute(client_release_keys.insert(), [
            {"app_id": "plan-app", "client_id": f"plan-{i:05d}", "namespace": "ykafka.global", "release_key": "rk-1"}
            for i in range(5000)])
        conn.execute(sa.text("ANALYZE ms_client_state"))
        conn.execute(sa.text("ANALYZE ms_client_release_keys"))
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        cur = raw.cursor()  # type: ignore[union-attr]
        for statement, params in seen:
            cur.execute("EXPLAIN " + statement, params)
            plans.append("\n".join(str(r[0]) for r in cur.fetchall()))
    errored = next(p for s, p in zip(seen, plans, strict=True) if "NOT IN ('[]', 'null')" in s[0] and
                   "ms_client_release_keys" not in s[0])
    assert "ix_ms_client_state_errored" in errored, errored  # the erring clients: a partial index, not a scan
    ranges = [p for s, p in zip(seen, plans, strict=True) if s[0].lstrip().startswith(
        "SELECT ms_client_release_keys.app_id")]
    assert len(ranges) == 2 and all("ix_ms_client_release_keys_held" in p for p in ranges), ranges


def test_the_ip_and_host_filter_is_a_prefix_read_from_an_index_on_postgresql(engine: sa.Engine) -> None:
    """The clients page's IP / host name filter matches the start of either (10.0.7. finds 10.0.7.x, not
    10.10.0.7); on PostgreSQL an index range (migration 0017), where a substring read every live row."""
    now = time.time()
    with engine.begin() as conn:
        conn.execute(client_state.insert(), [
            {"app_id": "ip-app", "client_id": f"ip-{i:05d}", "role": "producer", "state": "running",
             "ip": f"10.{i // 250 % 250}.{i % 250}.{i // 62500}", "hostname": f"node-{i:05d}.dc-a", "errors": [],
             "first_seen": now, "last_seen": now} for i in range(5000)])
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("ANALYZE ms_client_state"))
    with recorded(engine) as seen, db.read(engine) as conn:
        by_ip = queries.client_list(conn, 30, {"ip": "10.7.1"}, True, 200)
        by_host = queries.client_list(conn, 30, {"ip": "node-0012"}, True, 200)
        by_middle = queries.client_list(conn, 30, {"ip": "dc-a"}, True, 200)
        quoted = queries.client_list(conn, 30, {"ip": "x' OR '1'='1"}, True, 200)
    assert sorted(r["ip"] for r in by_ip[0]) == sorted(f"10.7.{k}.0" for k in (1, *range(10, 20), *range(100, 200)))
    assert by_ip[1] == 111 and sorted(r["client_id"] for r in by_host[0]) == [f"ip-0012{d}" for d in range(10)]
    assert by_middle[1] == 0 and quoted[1] == 0  # no substring match; a quote is a character, not SQL
    if engine.dialect.name != "postgresql":
        return
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        cur = raw.cursor()  # type: ignore[union-attr]
        plans = []
        for statement, params in seen[:2]:  # the capped count and the page of the IP filter
            cur.execute("EXPLAIN " + statement, params)
            plans.append("\n".join(str(r[0]) for r in cur.fetchall()))
    assert all("ix_ms_client_state_ip_prefix" in p and "ix_ms_client_state_host_prefix" in p for p in plans), plans


# --- summaries over every live client: answered while they are read again off the request ---------------------

def test_an_expired_summary_is_answered_while_a_thread_of_its_own_reads_it_again(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config panel's counts per status are a scan of every live client (100-300 ms of PostgreSQL at 100,000
    clients). Reused for a few seconds, the view that found them expired still ran the scan itself: that view
    was the panel's p95 (290 ms, bench/control_plane_scale.py). Now the expired counts are answered and read
    again on a thread of their own; only a view after STALE_MAX_S of nobody looking reads them itself. Here
    every scan counts as slow and large (the thresholds set to 0), the TTL is 0.3 s."""
    _every_summary_kept(monkeypatch)
    monkeypatch.setattr(queries, "PANEL_TTL_S", 0.3)
    monkeypatch.setattr(queries, "STALE_MAX_S", 3.0)
    cluster, ns, now = unique("dc-swr"), "ykafka.global", time.time()
    for i in range(3):
        clients.store(engine, _report(f"swr-a-{i}-{cluster}", {ns: "rk-1"}, cluster=cluster), now=now)
    scans: list[str] = []  # the thread each scan of ms_client_state ran on

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "ms_client_state" in statement and "count(" in statement.lower():
            scans.append(threading.current_thread().name)

    def counts() -> list[tuple[Any, ...]]:
        with db.read(engine) as conn:
            return sorted(queries.reached_summary(conn, 30, "cluster", cluster, ns, ()))

    event.listen(engine, "before_cursor_execute", record)
    try:
        main = threading.current_thread().name
        assert counts() == [("rk-1", False, False, 3)] and scans == [main]  # the first view reads them itself
        for i in range(2):  # two more clients, on another release
            clients.store(engine, _report(f"swr-b-{i}-{cluster}", {ns: "rk-2"}, cluster=cluster), now=time.time())
        assert counts() == [("rk-1", False, False, 3)] and scans == [main]  # within the TTL: reused
        time.sleep(0.4)
        assert counts() == [("rk-1", False, False, 3)]  # expired: answered at once, the old counts ...
        assert queries.settle(10.0)
        assert scans[:1] == [main] and len(scans) == 2 and scans[1].startswith("console-summary"), scans
        # ... and read again on its own thread (before: on the view's, which waited for it)
        assert counts() == [("rk-1", False, False, 3), ("rk-2", False, False, 2)] and len(scans) == 2
        time.sleep(3.2)  # nobody looked for longer than STALE_MAX_S: the view reads them itself
        clients.store(engine, _report(f"swr-c-{cluster}", {ns: "rk-2"}, cluster=cluster), now=time.time())
        assert counts() == [("rk-1", False, False, 3), ("rk-2", False, False, 3)] and scans[2:] == [main]
    finally:
        event.remove(engine, "before_cursor_execute", record)
        assert queries.settle(10.0)
        queries._reused.clear()


def test_the_topics_pages_clients_per_cluster_count_live_clients_and_are_reused(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topics page's move form (an admin's) counts live clients per cluster: a scan of every live client,
    80 ms of PostgreSQL per view at 100,000 clients, read on every view (the slowest statement of the page,
    bench/control_plane_scale.py). Now a summary like the overview's; and a closed client is not counted."""
    from metaserver.console import provision

    _every_summary_kept(monkeypatch)
    cluster, now = unique("dc-load"), time.time()
    for i in range(3):
        clients.store(engine, _report(f"load-{i}-{cluster}", {}, cluster=cluster,
                                      state="closed" if i == 2 else "running"), now=now)
    scans: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "ms_client_state" in statement and "count(" in statement.lower():
            scans.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        with db.read(engine) as conn:
            assert dict(provision.live_per_cluster(conn, 30))[cluster] == 2  # before: 3 (the closed one too)
            scans.clear()
            provision.cluster_loads(conn, 30)
            provision.cluster_loads(conn, 30)
        assert len(scans) == 1, scans  # before: one scan per view
    finally:
        event.remove(engine, "before_cursor_execute", record)
        queries._reused.clear()


# --- the clients page's process rows, and a config panel's questions to the config service --------------------

def test_the_clients_page_writes_each_process_row_as_the_template_macro_did(ms: MetaServer) -> None:
    """The process row's name and roles are written by ``queries.by_process`` now, not by two template macros
    per process (200 clients on a filtered page are usually 200 processes: a third of the page's rendering).
    The page must say what the macros said: host, pid and start time, and the roles counted."""
    from metaserver.console.views import fmt_time

    app = new_app(ms)
    sdk = ms.sdk(app.app_id, app.secret)
    token = sdk.grant("proc-a").json()["token"]
    started = 1_700_000_123.0
    for client_id, role in (("proc-a", "producer"), ("proc-b", "consumer"), ("proc-c", "producer")):
        assert sdk.report(token, client_id=client_id, role=role, hostname="host-p1", pid=4242,
                          process_started=started).status_code == 204
    assert sdk.report(token, client_id="proc-d", role="producer", hostname="", pid=None).status_code == 204
    page = _console(ms).get(ms.url + f"/console/clients?app={app.app_id}", timeout=10)
    assert page.status_code == 200
    heads = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", h)).strip()
             for h in re.findall(r'<tr class="process-row">(.*?)</tr>', page.text, re.S)]
    assert sorted(heads) == sorted([
        f"Process host-p1 · pid 4242 · started {fmt_time(started)} 3 clients: 1 consumer, 2 producers",
        "Process ? · pid ? 1 client: 1 producer"]), heads
    grouped = queries.by_process([{"hostname": "h", "pid": 1, "process_started": None, "role": r}
                                  for r in ("producer", "Consumer", "consumer", None)], fmt_time)
    assert [(p["name"], p["roles_text"]) for p in grouped] == [("h · pid 1", "1 ?, 1 Consumer, 1 consumer, "
                                                                              "1 producer")]


def test_a_config_panel_asks_the_config_service_its_questions_at_once(ms: MetaServer) -> None:
    """A scope's release, its gray branch and the panel's instance records were asked one after another, so a
    panel (polled every second) waited for the config service three times in turn; under load each answer is a
    wait for a core there (a topic's panel p95 177 ms at 100,000 clients, bench/control_plane_scale.py). Each
    answer is slowed here by 0.4 s: the release and the branch come back in one wait, not two."""
    from metaserver.domain import hotconfig
    from metaserver.domain.apollo import ApolloOpenApi
    from tests.ms_fixtures import OPENAPI_TOKEN
    from ykafka.catalog import Scope

    assert ms.configcenter_url is not None
    api = ApolloOpenApi(ms.configcenter_url, OPENAPI_TOKEN, app_id=ms.apollo_app_id)
    topic = unique("panel-ask")
    ms.admin().push_config(f"topic:{topic}", {"producer.acks": "1"})
    real = api._session.request
    calls: list[tuple[str, float, float]] = []

    def slow(method: str, url: str, **kw: Any) -> requests.Response:
        began = time.monotonic()
        time.sleep(0.4)
        try:
            return real(method, url, **kw)
        finally:
            calls.append((url.rsplit("/", 2)[-1], began, time.monotonic()))

    api._session.request = slow  # type: ignore[method-assign]
    began = time.monotonic()
    current, release, _ = hotconfig.current_with_releases(api, Scope.parse(f"topic:{topic}"))
    took = time.monotonic() - began
    assert current["released"] == {"producer.acks": "1"} and release is not None and current["gray"] is None
    assert sorted(c[0] for c in calls) == ["branches", "latest"], calls
    (_, a0, a1), (_, b0, b1) = calls
    assert max(a0, b0) < min(a1, b1), calls  # before: one after the other, never overlapping
    assert took < 0.75, took  # before: 0.8 s and more (two waits of 0.4 s)


# --- first views: the summaries are read when the MetaServer starts, not by the first view ----------------------

def test_the_warmer_reads_the_summaries_so_a_first_view_runs_no_scan(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A MetaServer's first overview and topics page read the summaries over every live client themselves (at
    100,000 clients 625 ms and 491-647 ms, bench/control_plane_scale.py). Now the warmer reads them when the
    MetaServer starts: the first view's own statements include no scan of ``ms_client_state``. Every scan counts
    as slow and large here (the thresholds set to 0)."""
    from types import SimpleNamespace

    from metaserver.console import provision
    from metaserver.console.warm import SummaryWarmer
    from metaserver.rollouts import drift

    _every_summary_kept(monkeypatch)
    cluster, now = unique("dc-warm"), time.time()
    for i in range(4):
        clients.store(engine, _report(f"warm-{i}-{cluster}", {}, cluster=cluster,
                                      topics=[f"warm-{cluster}"], role="producer" if i else "consumer"), now=now)
    beat = 29  # a heartbeat no other test's summaries use
    # the MetaServer's services as far as the warmer reads them (its database and heartbeat); with no config
    # service the global panel's read fails and is logged: views read that one themselves
    svc = SimpleNamespace(engine=engine, settings=SimpleNamespace(renew_interval=beat), apollo=None)
    warmer = SummaryWarmer(svc).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and queries.warming(engine):
            time.sleep(0.05)
        assert queries.settle(10.0)
        with recorded(engine) as seen, db.read(engine) as conn:
            roles = dict(queries.live_roles(conn, beat))
            drifting = drift.drifting(conn, beat, True)
            names = queries.topic_names(conn, beat)
            loads = provision.cluster_loads(conn, beat)
        scans = [s for s, _ in seen if "ms_client_state" in s]
        assert scans == [], scans  # before: the first view ran each scan itself
        assert roles["producer"] >= 3 and roles["consumer"] >= 1 and drifting == 0
        assert f"warm-{cluster}" in names and isinstance(loads, list)
    finally:
        warmer.stop()
        assert queries.settle(10.0)
        queries._reused.clear()


def test_a_summary_another_metaserver_read_lately_is_taken_from_the_database_not_scanned(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each MetaServer's warmer scanned every summary itself: at 100,000 clients about a second of PostgreSQL a
    round per MetaServer, paid N times over by N MetaServers for the same counts. Now a warmer leaves what it
    scanned in ``ms_console_summaries``, and another MetaServer's warmer (here: the same process with nothing
    in memory) takes it from there while it is younger than half the interval, scanning nothing; its views then
    answer from it. Older than that, the warmer scans again. Every scan counts as slow and large here."""
    _every_summary_kept(monkeypatch)
    beat = 28  # a heartbeat no other test's summaries use
    tag, now = unique("shared"), time.time()
    for i in range(3):
        clients.store(engine, _report(f"shared-{i}-{tag}", {}, topics=[f"shared-{tag}"],
                                      role="consumer" if i else "producer"), now=now)

    def warm() -> tuple[list[str], list[tuple[str, int]], int]:
        with recorded(engine) as seen, engine.connect() as conn, conn.begin():
            names, roles = queries.read_and_keep(lambda: (queries.topic_names(conn, beat),
                                                          queries.live_roles(conn, beat)))
        return names, roles, sum(1 for st, _ in seen if "ms_client_state" in st)

    try:
        names, roles, scans = warm()  # MetaServer A: two scans, both left in the database
        assert scans == 2 and f"shared-{tag}" in names and dict(roles)["consumer"] >= 2
        queries._reused.clear()  # MetaServer B: nothing of A's in its memory
        names_b, roles_b, scans_b = warm()
        assert scans_b == 0 and names_b == names and roles_b == roles  # the same values, tuples as read
        with recorded(engine) as seen, db.read(engine) as conn:  # and B's views answer from them
            assert queries.topic_names(conn, beat) == names and queries.live_roles(conn, beat) == roles
        assert [st for st, _ in seen if "ms_client_state" in st] == []
        queries._reused.clear()
        monkeypatch.setattr(queries, "WARM_EVERY_S", 0.0)  # what is in the database is too old now: scanned
        assert warm()[2] == 2
    finally:
        queries._reused.clear()


def test_after_start_up_the_warmer_reads_one_summary_at_a_time_spread_over_the_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three MetaServers started together each read their five summaries at once every 20 s: at 100,000 clients
    a second of PostgreSQL in step, and the topics page views that met it took 240-370 ms against ~55 ms. At
    start-up the warmer still reads them all at once (no first view pays); after that one at a time, each within
    the interval, at a random pace (so processes started together drift apart)."""
    from types import SimpleNamespace

    from metaserver.console.warm import SummaryWarmer

    monkeypatch.setattr(queries, "WARM_EVERY_S", 1.0)
    engine = sa.create_engine("sqlite://")  # the fleet-size probe fails on it and is logged: pure pacing here
    svc = SimpleNamespace(engine=engine, settings=SimpleNamespace(renew_interval=31), apollo=None)
    warmer = SummaryWarmer(svc)  # type: ignore[arg-type]
    reads: list[tuple[str, float]] = []
    warmer._summaries = [((name, 31), lambda _c, name=name: reads.append((name, time.monotonic())))
                         for name in ("a", "b", "c", "d", "e")]
    warmer.start()
    try:
        time.sleep(2.6)
    finally:
        warmer.stop()
    first, later = reads[:5], reads[5:]
    assert [n for n, _ in first] == ["a", "b", "c", "d", "e"] and first[-1][1] - first[0][1] < 0.1
    # from a random point within the first 0.4 of the interval, one a fifth of the interval (0.7-0.95 of it)
    # after the other: 2.6 s leave at least (2.6 - 0.4 - 0.1) / 0.19 = 11 reads after the first pass
    assert len(later) >= 10, later
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(later)]
    assert min(gaps) >= 0.7 * 0.2 - 0.01 and max(gaps) <= 0.95 * 0.2 + 0.1, gaps
    assert later[0][1] - first[-1][1] <= 0.4 + 0.1
    for name in "abcde":  # every summary read again within 0.4 + 0.95 of the interval (and scheduling slack)
        times = [t for n, t in reads if n == name]
        assert all(b - a <= 1.35 + 0.15 for a, b in itertools.pairwise(times)), (name, times)


def test_a_first_view_while_the_first_count_runs_is_answered_counting_on_postgresql(
        ms_factory: Callable[..., MetaServer], request: pytest.FixtureRequest) -> None:
    """A MetaServer that has just started reads the summaries in the background; a view that comes before that
    read finishes is answered at once with its counts shown "counting…", never waiting on the scan. Here the
    scan is held by a lock on ``ms_client_state`` taken before the MetaServer starts (PostgreSQL: SQLite's
    readers do not wait for a writer); before the warmer, the first overview waited on it (the scan ran on the
    request). Once the lock is released the same page shows the count."""
    require_pg()
    url = request.getfixturevalue("pg_schema_factory")()
    eng = db.make_engine(url)
    db.migrate(eng)
    now = time.time()
    for i in range(3):
        clients.store(eng, _report(f"first-{i}", {}), now=now)
    holder = eng.connect()
    tx = holder.begin()
    holder.execute(sa.text("LOCK TABLE ms_client_state IN ACCESS EXCLUSIVE MODE"))
    try:
        server = ms_factory(db_url=url, renew_interval=30)
        sess = _console(server)
        t0 = time.monotonic()
        page = sess.get(server.url + "/console/", timeout=10)
        took = time.monotonic() - t0
        assert page.status_code == 200 and took < 3.0, (page.status_code, took)
        assert re.search(r'id="live-count">counting…<', page.text) and 'id="counting"' in page.text
        topics = sess.get(server.url + "/console/topics", timeout=10)
        assert topics.status_code == 200 and 'id="counting"' in topics.text
    finally:
        tx.rollback()
        holder.close()
    deadline = time.monotonic() + 20
    text_ = ""
    while time.monotonic() < deadline:
        text_ = sess.get(server.url + "/console/", timeout=10).text
        if 'id="counting"' not in text_:
            break
        time.sleep(0.2)
    assert re.search(r'id="live-count">3<', text_), text_[:2000]
    eng.dispose()


def test_the_topic_names_are_reused_only_when_there_are_many(engine: sa.Engine,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The topics page's list of names is a summary over every live client: reused once its scan is slow and
    it finds ``SUMMARY_MIN_TOPICS`` names or more (at 13,333 clients and 1,000 topics it was read on every view,
    its scan under the 50 ms bar of then, docs/deployment.md), read fresh on every view for a handful (a test's,
    a demo's: a new topic shows at once). Every scan counts as slow here (the bar at 0)."""
    monkeypatch.setattr(queries, "SUMMARY_SLOW_S", 0.0)
    queries._reused.clear()
    topic, now = unique("names"), time.time()
    clients.store(engine, _report(f"names-{topic}", {}, topics=[topic]), now=now)

    def scans_of_two_views() -> int:
        with recorded(engine) as seen, db.read(engine) as conn:
            for _ in range(2):
                assert topic in queries.topic_names(conn, 30)
        return sum(1 for s, _ in seen if "DISTINCT" in s and "ms_client_state" in s)

    try:
        assert scans_of_two_views() == 2  # a few names: read on each view
        monkeypatch.setattr(queries, "SUMMARY_MIN_TOPICS", 1)  # as many as a large fleet's
        assert scans_of_two_views() == 1  # read once, the second view answered from it
    finally:
        queries._reused.clear()


def test_the_topics_pages_counts_are_reused_only_among_many_topics(engine: sa.Engine,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts of the topics a page shows cost 20-30 ms of PostgreSQL a view at 100,000 clients and 10,000
    topics: among ``SUMMARY_MIN_TOPICS`` topics or more a slow read is reused per page of names (a second view
    reads nothing, and shows the same counts); among fewer it is read on every view, so a client that starts
    shows at once. Every read counts as slow here (the bar at 0)."""
    monkeypatch.setattr(queries, "SUMMARY_SLOW_S", 0.0)
    queries._reused.clear()
    topic, now = unique("usage-reuse"), time.time()
    clients.store(engine, _report(f"usage-reuse-1-{topic}", {}, topics=[topic]), now=now)

    def counts_and_reads(among: int, newcomer: str) -> tuple[list[int], int]:
        counts = []
        with recorded(engine) as seen:
            for i in range(2):  # two views, each its own read
                with db.read(engine) as conn:
                    counts.append(sum(n for *_, n in queries.topic_usage(conn, 30, [topic], among)))
                if i == 0:  # a second client between the two views
                    clients.store(engine, _report(f"usage-reuse-{newcomer}-{topic}", {}, topics=[topic]), now=now)
        return counts, sum(1 for s, _ in seen if "count(" in s and "ms_client_state" in s)

    try:
        assert counts_and_reads(10, "2") == ([1, 2], 2)  # a few topics: each view reads, the new client shows
        monkeypatch.setattr(queries, "SUMMARY_MIN_TOPICS", 5)
        assert counts_and_reads(10, "3") == ([2, 2], 1)  # many: read once, the second view answered from it
        # (a third client came between them, not shown until the counts are read again)
    finally:
        queries._reused.clear()


def test_the_topics_pages_counts_are_the_same_asked_in_chunks(engine: sa.Engine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The topics page's counts per topic, role and group are asked about 1 % of the fleet's topics at a time on
    PostgreSQL (at least ``TOPIC_USAGE_CHUNK``; so each statement reads the GIN index rather than parse every
    client's topics): the same counts as asked topic by topic, however many at a time."""
    tag, now = unique("usage"), time.time()
    topics = [f"{tag}-{i:02d}" for i in range(23)]
    for i in range(30):
        clients.store(engine, _report(f"usage-{i}-{tag}", {}, topics=[topics[i % 23], topics[(i * 7) % 23]],
                                      role="consumer" if i % 3 == 0 else "producer",
                                      group=f"g-{i % 2}" if i % 3 == 0 else None), now=now)
    with db.read(engine) as conn:
        one_by_one = sorted(row for t in topics for row in queries.topic_usage(conn, 30, [t]))
        assert sum(n for *_, n in one_by_one) == 60  # each client names two topics (a repeated one twice)
        for chunk in (1, 4, 10, 100):
            monkeypatch.setattr(queries, "TOPIC_USAGE_CHUNK", chunk)
            for among in (0, 100 * chunk, 1000 * chunk):  # one statement; chunk topics at a time; 10 x chunk
                assert sorted(queries.topic_usage(conn, 30, topics, among)) == one_by_one, (chunk, among)
        assert queries.topic_usage(conn, 30, []) == []
