"""The client inventory stays bounded at a large fleet's size (issue 41): a heartbeat that says nothing new adds
no history row, the retention deletes old clients and history in bounded batches, and the deletes and a client's
history read walk indexes, not the table (checked on PostgreSQL's plans). bench/control_plane_scale.py measures
the tables after a simulated week."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from metaserver.domain import clients
from metaserver.schemas import ClientReport
from metaserver.storage import db
from tests.ms_fixtures import MetaServer, new_app, wait_until


def _report(client_id: str, state: str = "running", **fields: Any) -> ClientReport:
    return ClientReport.model_validate({"client_id": client_id, "app_id": "inv-app", "role": "producer",
                                       "ip": "10.0.0.1", "hostname": "h1", "pid": 7, "topics": ["orders"],
                                       "versions": {"ykafka": "0.1.0", "librdkafka": "2.6.0"},
                                       "config_release_keys": {"ykafka.global": "r1"}, "state": state, **fields})


@pytest.fixture(scope="module")
def engine(pg_schema_factory: Callable[[], str]) -> Iterator[sa.Engine]:
    eng = db.make_engine(pg_schema_factory())
    db.migrate(eng)
    yield eng
    eng.dispose()


def _count(engine: sa.Engine, sql: str, **params: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


def test_unchanged_heartbeats_add_no_history_rows(engine: sa.Engine) -> None:
    now = time.time()
    assert clients.store(engine, _report("c-same"), now=now) is True  # first report: recorded
    for k in range(1, 6):  # five heartbeats saying the same: the real-time view moves, the history does not
        assert clients.store(engine, _report("c-same"), now=now + 30 * k) is False
    assert clients.store(engine, _report("c-same", state="degraded", errors=["dc-a down"]), now=now + 200) is True
    assert clients.store(engine, _report("c-same", topics=["orders", "refunds"]), now=now + 230) is True
    with engine.connect() as conn:
        rows = clients.history(conn, app="inv-app", client_id="c-same")
        state = clients.one(conn, 30, "inv-app", "c-same")
    assert [(r["state"], r["topics"]) for r in rows] == [("running", ["orders", "refunds"]),
                                                         ("degraded", ["orders"]), ("running", ["orders"])]
    assert state is not None and state["last_seen"] == now + 230 and state["first_seen"] == now


def test_prune_deletes_old_clients_and_history_in_batches(engine: sa.Engine) -> None:
    day = 86400.0
    t0 = time.time() - 30 * day
    for i in range(7):  # seven clients last seen 30 days ago, each with one history row then
        clients.store(engine, _report(f"old-{i}"), now=t0)
    clients.store(engine, _report("fresh"), now=t0 + 29.5 * day)  # seen half a day ago
    assert _count(engine, "SELECT count(*) FROM ms_client_reports WHERE at < :cut", cut=t0 + day) == 7
    removed = clients.prune(engine, t0 + 30 * day, 7 * day, 7 * day, batch=3)  # 3 a statement: 3 + 3 + 1
    assert removed == {"clients": 7, "history": 7}
    assert _count(engine, "SELECT count(*) FROM ms_client_state WHERE client_id LIKE 'old-%'") == 0
    assert _count(engine, "SELECT count(*) FROM ms_client_reports WHERE at < :cut", cut=t0 + day) == 0
    assert _count(engine, "SELECT count(*) FROM ms_client_state WHERE client_id = 'fresh'") == 1
    assert clients.prune(engine, t0 + 30 * day, 7 * day, 7 * day) == {"clients": 0, "history": 0}


def _plan(engine: sa.Engine, sql: str, **params: Any) -> str:
    with engine.connect() as conn:
        conn.execute(sa.text("SET enable_seqscan = off"))  # a tiny table: make the planner show what it can use
        return "\n".join(str(r[0]) for r in conn.execute(sa.text("EXPLAIN " + sql), params))


def test_retention_and_a_clients_history_walk_indexes(engine: sa.Engine) -> None:
    # the retention's batch: an index range on `at` (without ix_ms_client_reports_at: a sequential scan of
    # every history row, each hour, on every MetaServer)
    plan = _plan(engine, "SELECT id FROM ms_client_reports WHERE at < :cut LIMIT 5000", cut=time.time())
    assert "ix_ms_client_reports_at" in plan, plan
    plan = _plan(engine, "SELECT app_id, client_id FROM ms_client_state WHERE last_seen < :cut LIMIT 5000",
                 cut=time.time())
    assert "ix_ms_client_state_last_seen" in plan, plan
    # a client's page: its newest 20 history rows, read in index order (not every row of its app, sorted)
    with engine.connect() as conn:
        stmt = sa.select(sa.literal_column("id")).select_from(sa.table("ms_client_reports")).where(
            sa.literal_column("app_id") == "inv-app", sa.literal_column("client_id") == "c-same").order_by(
            sa.literal_column("id").desc()).limit(20)
        sql = str(stmt.compile(conn, compile_kwargs={"literal_binds": True}))
    plan = _plan(engine, sql)
    assert "ix_ms_client_reports_client" in plan and "Sort" not in plan, plan


def test_metaserver_prunes_clients_past_retention(ms_factory: Callable[..., MetaServer]) -> None:
    # retention 2 s, a prune every second: a client that stops reporting leaves the inventory by itself
    server = ms_factory(client_retention_days=2 / 86400, client_history_days=2 / 86400, client_prune_interval=1)
    app = new_app(server)
    sdk = server.sdk(app.app_id, app.secret)
    token = sdk.grant("gone").json()["token"]
    assert sdk.report(token, client_id="gone").status_code == 204
    admin = server.admin()
    assert [c["client_id"] for c in admin.clients(app=app.app_id)] == ["gone"]
    wait_until(lambda: admin.clients(app=app.app_id) == [] and admin.client_history(app=app.app_id) == [],
               timeout=15)


def test_topic_lookups_use_the_gin_index_and_match_exactly(engine: sa.Engine) -> None:
    from metaserver.console import queries

    now = time.time()
    clients.store(engine, _report("t-orders", topics=["orders", "refunds"]), now=now)
    clients.store(engine, _report("t-orders2", topics=["orders2"]), now=now)
    clients.store(engine, _report("t-like", topics=["ord_rs"]), now=now)  # '_' is not a wildcard here
    with engine.connect() as conn:
        rows, total, _more, _next = queries.client_list(conn, 30, {"topic": "orders"}, False, 50)
        assert {r["client_id"] for r in rows} >= {"t-orders", "c-same"} and "t-orders2" not in {
            r["client_id"] for r in rows}
        assert total == len(rows)
        assert [r["client_id"] for r in queries.topic_clients(conn, 30, "ord_rs", 50)[0]] == ["t-like"]
        usage = {(t, role) for t, role, _g, _n in queries.topic_usage(conn, 30, ["orders2", "refunds"])}
        assert usage == {("orders2", "producer"), ("refunds", "producer")}
        assert "orders2" in queries.topic_names(conn, 30, "DERS2")  # any case
        # the statement the topic filter compiles to is answered by ix_ms_client_state_topics (without it:
        # a scan of every client's JSON, 190-290 ms at 100,000 clients)
        stmt = sa.select(sa.func.count()).select_from(sa.table("ms_client_state")).where(
            queries._topic_filter("orders"))
        sql = str(stmt.compile(conn, compile_kwargs={"literal_binds": True}))
    assert "ix_ms_client_state_topics" in _plan(engine, sql)


def test_ephemeral_groups_are_read_as_one_row_per_group_and_flag(engine: sa.Engine) -> None:
    """The groups page's question (which memberless groups did an ephemeral consumer leave behind), answered
    from the reports' ``extra.ephemeral`` by the database, as the Python check of each report answered it."""
    from metaserver.console import queries

    now = time.time()
    for client_id, group, extra in (("e1", "g-eph", {"ephemeral": True}), ("e2", "g-eph", {}),
                                    ("k1", "g-kept", {"ephemeral": False}), ("k2", "g-kept", {}),
                                    ("o1", "g-other", {"ephemeral": True})):
        clients.store(engine, _report(client_id, role="consumer", group=group, extra=extra), now=now)
    with engine.connect() as conn:
        assert queries.ephemeral_groups(conn, ["g-eph", "g-kept", "g-none"]) == {"g-eph"}
        assert queries.ephemeral_groups(conn, []) == set()
