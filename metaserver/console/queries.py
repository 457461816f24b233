"""The console's reads of the client table: filters pushed into SQL and only the columns a page shows, so a
page stays fast with tens of thousands of reports (bench/console_pages.py measures it).

Topic membership: on PostgreSQL ``topics::jsonb ? name``, answered by a GIN index on that expression
(migration 0013): at 100,000 clients the ``LIKE`` scan it replaced read every row, 190-290 ms per topic page or
filter, against 1-20 ms with the index (bench/control_plane_scale.py). On SQLite (one host, small fleets) a
``LIKE`` on the JSON text of ``topics`` (quoted name), checked exactly in Python.

The list of topic names live clients report (the topics page) is the one read that must look at every live
client; once that read takes longer than :data:`TOPIC_NAMES_SLOW_S` and finds :data:`SUMMARY_MIN_TOPICS` or
more (a large fleet: 240 ms at 100,000 clients), its result is reused for :data:`TOPIC_NAMES_TTL_S` per process
instead of read on every page. The other summaries over every live client (the overview's counts, a config
panel's counts per status) are reused the same way (:func:`reuse_when_slow`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
import time
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
from sqlalchemy import (
    Connection,
    Engine,
    String,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    false,
    func,
    literal_column,
    not_,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.types import Boolean

from ..configcenter.readmodel import INSTANCE_LABEL
from ..storage.models import client_release_keys as rk
from ..storage.models import client_state as cs
from ..storage.models import console_summaries as summaries

LIST_COLUMNS = (cs.c.app_id, cs.c.client_id, cs.c.ip, cs.c.hostname, cs.c.pid, cs.c.process_started, cs.c.role,
                cs.c.cluster, cs.c.topics,
                cs.c.group_id, cs.c.ykafka_version, cs.c.librdkafka_version, cs.c.state, cs.c.last_seen)


#: :func:`live`'s "not closed", for the statements written as text (c: ms_client_state)
_NOT_CLOSED = "(c.state IS NULL OR c.state <> 'closed')"


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _prefix(value: str) -> Any:
    """``LIKE`` pattern for values starting with ``value``, rendered into the statement as a quoted literal
    (SQLAlchemy's ``literal_execute``)."""
    return bindparam(None, _like(value)[1:], type_=String, literal_execute=True)


class _NamesTopic(ColumnElement[bool]):
    """``client_state.topics`` names ``topic``: compiled per dialect (below)."""

    type = Boolean()
    inherit_cache = True

    def __init__(self, topic: str) -> None:
        self.topic = bindparam(None, topic, type_=String)


@compiles(_NamesTopic, "postgresql")
def _names_topic_pg(element: _NamesTopic, compiler: SQLCompiler, **kw: Any) -> str:
    # the expression of ix_ms_client_state_topics (GIN): written exactly so, or the index is not used
    return f"(ms_client_state.topics)::jsonb ? {compiler.process(element.topic, **kw)}"


@compiles(_NamesTopic)
def _names_topic_other(element: _NamesTopic, compiler: SQLCompiler, **kw: Any) -> str:
    pattern = bindparam(None, _like(f'"{element.topic.value}"'), type_=String)
    return f"CAST(ms_client_state.topics AS TEXT) LIKE {compiler.process(pattern, **kw)} ESCAPE '\\'"


def _topic_filter(topic: str) -> Any:
    return _NamesTopic(topic)


_TOPIC_ELEMENTS = {  # one row per (live client, topic in its report)
    "sqlite": "FROM ms_client_state c, json_each(c.topics) t",
    "postgresql": "FROM ms_client_state c, json_array_elements_text(c.topics::json) AS t(value)",
}
#: PostgreSQL: only the rows naming one of the topics asked for (the GIN index), not every live client
_ANY_TOPIC = {"sqlite": "", "postgresql": "AND (c.topics)::jsonb ?| CAST(:wanted AS text[]) "}

#: a read over every live client (a summary: a count, the topic names) slower than this is reused for a few
#: seconds per process (the TTL each caller gives), when its result says the fleet is large (``large``:
#: :data:`SUMMARY_MIN_CLIENTS`, :data:`SUMMARY_MIN_TOPICS`); a faster one, or a small fleet's, is read fresh on
#: every page. Was 50 ms: at 13,333 live clients (1,000 topics) the topics page's summaries each came in under it
#: and were read on every view, 116 ms of PostgreSQL a view and the page's p95 207 ms, twice its p95 at 100,000
#: clients, whose summaries were reused (bench/control_plane_scale.py, docs/deployment.md)
TOPIC_NAMES_SLOW_S = SUMMARY_SLOW_S = 0.02
#: the topic names are reused only when there are at least this many (a test's or a demo's handful: read fresh)
SUMMARY_MIN_TOPICS = 1_000
TOPIC_NAMES_TTL_S = 10.0
#: summaries kept at most (a panel's counts are kept per scope: 10,000 topics must not grow the process)
SUMMARY_KEEP = 512
#: a summary past its TTL is still answered, while it is read again in the background, up to this age
STALE_MAX_S = 30.0
#: the warmer (metaserver/console/warm.py) reads the summaries every console's first view needs this often:
#: less than :data:`STALE_MAX_S`, so a view never finds them too old to answer and reads them itself
WARM_EVERY_S = 20.0
_reused: dict[tuple[Any, ...], tuple[float, float, Any]] = {}
_reused_lock = threading.Lock()
_refreshing: set[tuple[Any, ...]] = set()  # the summaries being read again now (one read each at a time)
_settled = threading.Condition()
#: where expired summaries are read again: two at a time per process at most (each is one scan)
_REFRESH = ThreadPoolExecutor(max_workers=2, thread_name_prefix="console-summary")
log = structlog.get_logger("metaserver.console")
T = TypeVar("T")
#: summaries whose first read at start-up (metaserver/console/warm.py) has not finished: (database, name, ...)
#: prefixes of their keys. A view of one of them waits at most :data:`FIRST_WAIT_S` for it, then is answered
#: "counting" (:class:`Counting`) rather than run the scan itself
_warming: set[tuple[Any, ...]] = set()
#: how long a view waits for a summary's first read under way before it is answered without it
FIRST_WAIT_S = 0.2
_forced = threading.local()  # set on the warmer's thread: every summary it asks for is read and kept


class Counting(Exception):  # noqa: N818 - a state, not a failure: the page shows "counting..."
    """The summary asked for is being read for the first time since this process started (a large fleet's
    scan, off the request path): the page shows its counts as "counting..." rather than wait for it."""


def _db(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def begin_warming(engine: Engine, prefixes: list[tuple[Any, ...]]) -> None:
    """Mark these summaries (key prefixes, e.g. ``("live_roles", 30)``) as read for the first time now."""
    with _reused_lock:
        _warming.update((_db(engine), *p) for p in prefixes)


def end_warming(engine: Engine, prefix: tuple[Any, ...]) -> None:
    """The first read of a summary has finished (kept, forgotten as fast, or failed): views read it as usual."""
    with _reused_lock:
        _warming.discard((_db(engine), *prefix))
    with _settled:
        _settled.notify_all()


def warming(engine: Engine) -> bool:
    """Whether a summary's first read since start-up is still under way on this database."""
    with _reused_lock:
        return any(p[0] == _db(engine) for p in _warming)


def read_and_keep(read: Callable[[], T]) -> T:
    """``read()`` with every summary it asks :func:`reuse_when_slow` for read now and kept when slow and large
    (the warmer's pass: it keeps the summaries fresh whether or not anyone looks)."""
    _forced.on = True
    try:
        return read()
    finally:
        _forced.on = False


def _warming_for(full: tuple[Any, ...]) -> bool:
    return any(full[:len(p)] == p for p in _warming)


def reuse_when_slow(conn: Connection, key: tuple[Any, ...], ttl_s: float, read: Callable[[Connection], T],
                    large: Callable[[T], bool] | None = None) -> T:
    """``read(conn)``, or its result of at most ``ttl_s`` ago when that read took longer than
    :data:`SUMMARY_SLOW_S` (and, given ``large``, the result says the fleet is large: a small fleet's scan slowed
    by a busy machine is still read fresh, so a change shows at once there). Once that result is older than
    ``ttl_s`` (but at most :data:`STALE_MAX_S`), it is still answered while one read runs again on a thread of
    its own (:func:`_refresh`), so no page view waits for the scan once one has been made.

    Why: a few console reads must look at every live client (the overview's counts per role and of drifting
    clients, a config panel's counts per status, the topics page's names and its clusters' counts); at 100,000
    clients each is a scan of 50-500 ms of PostgreSQL. Reused per process, the view that found it expired
    still paid it: a config panel's p95 at 100,000 clients was that scan (290 ms at load 9-10,
    bench/control_plane_scale.py). A fleet that large changes its counts by a handful a second, so a summary a
    few seconds old says the same; a small fleet, whose scan is fast, is always read fresh (the tests' and the
    demo's). A view after :data:`STALE_MAX_S` of nobody looking reads it again before answering; the summaries
    every console's first view needs are read at start-up and every :data:`WARM_EVERY_S` by the warmer
    (metaserver/console/warm.py), so that does not happen to them. A view of one whose first read since
    start-up is still under way waits at most :data:`FIRST_WAIT_S`, then gets :class:`Counting`."""
    engine = conn.engine
    full = (_db(engine), *key)
    if getattr(_forced, "on", False):
        with _reused_lock:
            _refreshing.add(full)
        try:
            shared = _shared(conn, key)
            if shared is not None:  # another MetaServer of the deployment read it lately: no scan here
                value, age = shared
                with _reused_lock:
                    _reused[full] = (time.monotonic() - age, ttl_s, value)
                return typing.cast(T, value)
            value = _keep(conn, full, ttl_s, read, large)
            with _reused_lock:
                kept = full in _reused
            if kept:
                _share(conn, key, value)
            return value
        finally:
            with _reused_lock:
                _refreshing.discard(full)
            with _settled:
                _settled.notify_all()
    now = time.monotonic()
    deadline = now + FIRST_WAIT_S
    with _settled:  # a summary's first read since start-up under way: wait a little for it, never for the scan
        while True:
            with _reused_lock:
                warming, cached = _warming_for(full), _reused.get(full)
            if not warming or cached is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise Counting(str(key[0]))
            _settled.wait(left)
    now = time.monotonic()
    with _reused_lock:
        cached = _reused.get(full)
        age = now - cached[0] if cached is not None else math.inf
        if cached is not None and age <= cached[1]:
            return typing.cast(T, cached[2])
        stale = cached is not None and age <= STALE_MAX_S
        again = stale and full not in _refreshing
        if again:
            _refreshing.add(full)
    if again:
        _REFRESH.submit(_refresh, engine, full, ttl_s, read, large)
    if stale and cached is not None:
        return typing.cast(T, cached[2])
    return _keep(conn, full, ttl_s, read, large)


def _keep(conn: Connection, full: tuple[Any, ...], ttl_s: float, read: Callable[[Connection], T],
          large: Callable[[T], bool] | None) -> T:
    """``read(conn)``, kept for reuse when it was slow and large (:func:`reuse_when_slow`), else forgotten."""
    now = time.monotonic()
    value = read(conn)
    took = time.monotonic() - now
    with _reused_lock:
        if took > SUMMARY_SLOW_S and (large is None or large(value)):
            if len(_reused) >= SUMMARY_KEEP:  # the expired first, else the oldest
                for k in [k for k, v in _reused.items() if now - v[0] > v[1]] or [min(_reused, key=lambda k:
                                                                                     _reused[k][0])]:
                    _reused.pop(k, None)
            _reused[full] = (now, ttl_s, value)
        else:
            _reused.pop(full, None)
    return value


def _shared_key(key: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps(key, separators=(",", ":"), default=str).encode()).hexdigest()


def _shared(conn: Connection, key: tuple[Any, ...]) -> tuple[Any, float] | None:
    """(the summary, its age in seconds) as another MetaServer left it in the database, when it read it less than
    half of :data:`WARM_EVERY_S` ago; else None (the warmer scans). Half: kept here until the next warm round
    (within 0.95 of the interval), it is at most 0.5 + 0.95 of it old, under :data:`STALE_MAX_S`, so a view never
    finds it too old. Why: each MetaServer's warmer scanned every summary itself, about a second of PostgreSQL a
    round at 100,000 clients, so N MetaServers paid N times for the same counts; now about one scan a summary
    and interval in the whole deployment. A database without the table (not migrated) or any failure: None."""
    try:
        with conn.begin_nested():
            row = conn.execute(select(summaries.c.value, summaries.c.read_at).where(
                summaries.c.key == _shared_key(key))).first()
    except Exception as exc:  # noqa: BLE001 - sharing is an optimisation: the warmer scans as before
        log.warning("console.summary_share_failed", summary=str(key[0]), error=f"{type(exc).__name__}: {exc}")
        return None
    if row is None:
        return None
    age = max(0.0, time.time() - float(row.read_at))
    if age >= WARM_EVERY_S / 2:
        return None
    value = json.loads(row.value)
    # JSON gives lists where the read gave tuples (rows): back to tuples, so the value is the read's shape
    return ([tuple(v) if isinstance(v, list) else v for v in value] if isinstance(value, list) else value), age


def _share(conn: Connection, key: tuple[Any, ...], value: Any) -> None:
    """Leave a summary this process scanned (and kept) in the database for the other MetaServers' warmers."""
    try:
        row = {"key": _shared_key(key), "value": json.dumps(value, separators=(",", ":")), "read_at": time.time()}
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        stmt = insert(summaries).values(**row)
        with conn.begin_nested():
            conn.execute(stmt.on_conflict_do_update(index_elements=[summaries.c.key],
                                                    set_={"value": stmt.excluded.value,
                                                          "read_at": stmt.excluded.read_at}))
    except Exception as exc:  # noqa: BLE001 - not shared: the others scan it themselves, as before
        log.warning("console.summary_share_failed", summary=str(key[0]), error=f"{type(exc).__name__}: {exc}")


def _refresh(engine: Engine, full: tuple[Any, ...], ttl_s: float, read: Callable[[Connection], T],
             large: Callable[[T], bool] | None) -> None:
    """A summary read again off the request path, on a connection of its own; a failure forgets it (the next
    view reads it itself and shows the error) rather than keep answering an old count."""
    try:
        with engine.connect() as conn, conn.begin():
            _keep(conn, full, ttl_s, read, large)
    except Exception as exc:  # noqa: BLE001 - any failure: the next view reads in the foreground
        log.warning("console.summary_refresh_failed", summary=str(full[1]), error=f"{type(exc).__name__}: {exc}")
        with _reused_lock:
            _reused.pop(full, None)
    finally:
        with _reused_lock:
            _refreshing.discard(full)
        with _settled:
            _settled.notify_all()


def settle(timeout_s: float = 10.0) -> bool:
    """Wait until no summary is being read again in the background (the tests); whether none is."""
    deadline = time.monotonic() + timeout_s
    with _settled:
        while True:
            with _reused_lock:
                if not _refreshing:
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _settled.wait(min(0.2, left))


def topic_names(conn: Connection, heartbeat_s: int, needle: str = "") -> list[str]:
    """Every topic in live clients' reports containing ``needle`` (any case), sorted."""
    def read(conn: Connection) -> list[str]:
        rows = conn.execute(text(f"SELECT DISTINCT t.value {_TOPIC_ELEMENTS[conn.dialect.name]} "
                                 f"WHERE c.last_seen >= :after AND {_NOT_CLOSED} ORDER BY 1"),
                                 {"after": online_after(heartbeat_s)})
        return [str(name) for (name,) in rows]

    names = reuse_when_slow(conn, ("topic_names", heartbeat_s), TOPIC_NAMES_TTL_S, read,
                            lambda found: len(found) >= SUMMARY_MIN_TOPICS)
    needle = needle.lower()
    return [name for name in names if needle in name.lower()] if needle else list(names)


#: PostgreSQL: the topics page's counts are asked for about 1 % of the fleet's topics at a time, at least this
#: many. For the 100 shown at once out of 1,000 the planner, rightly estimating a fifth of a 13,333-client
#: fleet's rows, chose a sequential scan that parses every client's topics (88 ms a page); ten at a time each
#: reads the GIN index (1.4 ms a statement, 41-45 ms the page). Out of 10,000 topics 100 are 1 %: one statement
#: on the index (19-26 ms; ten of them 32-35 ms); under 1,000 topics the table is small: one statement too.
#: Disjoint topics, so the counts are the same (a row per topic, role and group)
TOPIC_USAGE_CHUNK = 10


def topic_usage(conn: Connection, heartbeat_s: int, topics: list[str],
                among: int = 0) -> list[tuple[str, str, str | None, int]]:
    """(topic, role, group, live clients) for the given topics (of ``among`` live topics in all: how many to
    ask at a time, :data:`TOPIC_USAGE_CHUNK`), counted by the database (the page reads only the rows of the
    topics it shows). Among :data:`SUMMARY_MIN_TOPICS` or more, a read slower than :data:`SUMMARY_SLOW_S` is
    reused as the topic names are (:func:`reuse_when_slow`, per page of names): at 100,000 clients and 10,000
    topics the page's 100 cost 20-30 ms of PostgreSQL on every view, the page's largest part after its rendering
    (py-spy over bench/control_plane_scale.py's views), for counts that move by a handful a second there."""
    dialect = conn.dialect.name
    stmt = text(f"SELECT t.value, c.role, c.group_id, count(*) {_TOPIC_ELEMENTS[dialect]} "
                f"WHERE c.last_seen >= :after AND {_NOT_CLOSED} {_ANY_TOPIC[dialect]}AND t.value IN :topics "
                "GROUP BY 1, 2, 3"
                ).bindparams(bindparam("topics", expanding=True))
    step = max(1, len(topics))  # SQLite scans anyway: once
    if _ANY_TOPIC[dialect] and among // 100 >= TOPIC_USAGE_CHUNK:
        step = among // 100

    def read(conn: Connection) -> list[tuple[str, str, str | None, int]]:
        out: list[tuple[str, str, str | None, int]] = []
        for i in range(0, len(topics), step):
            chunk = topics[i:i + step]
            params: dict[str, Any] = {"after": online_after(heartbeat_s), "topics": chunk}
            if _ANY_TOPIC[dialect]:
                params["wanted"] = chunk
            out += [(str(topic), str(role), group, int(count))
                    for topic, role, group, count in conn.execute(stmt, params)]
        return out

    if among < SUMMARY_MIN_TOPICS:
        return read(conn)
    return reuse_when_slow(conn, ("topic_usage", heartbeat_s, tuple(topics)), TOPIC_NAMES_TTL_S, read)


def topic_clients(conn: Connection, heartbeat_s: int, topic: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    """(the first ``limit`` live clients naming ``topic`` in their reports, newest report first; how many there
    are): the topic page's clients."""
    conds = [live(heartbeat_s), _topic_filter(topic)]
    total = conn.execute(select(func.count()).select_from(cs).where(*conds)).scalar_one()
    stmt = select(*LIST_COLUMNS).where(*conds).order_by(cs.c.role, cs.c.last_seen.desc()).limit(limit)
    rows = [{**row, "group": row["group_id"]} for row in conn.execute(stmt).mappings()
            if topic in (row["topics"] or [])]
    return rows, int(total)


def topic_groups(conn: Connection, topic: str, limit: int) -> list[str]:
    """Consumer groups whose clients (live or not, still in the table) report reading ``topic``."""
    stmt = (select(cs.c.group_id).where(cs.c.group_id.is_not(None), _topic_filter(topic)).distinct()
            .order_by(cs.c.group_id).limit(limit))
    return [str(g) for g in conn.execute(stmt).scalars()]


def ephemeral_groups(conn: Connection, groups: list[str]) -> set[str]:
    """Which of ``groups`` any client (live or not, still in the table) reported as ephemeral: the database
    returns each group's distinct flag values, not every client's report (the groups page asks this for every
    group without members, which at 2,000 groups was most of the consumers' rows)."""
    if not groups:
        return set()
    flag = cs.c.extra["ephemeral"].as_string()
    stmt = select(cs.c.group_id, flag).where(cs.c.group_id.in_(groups), flag.is_not(None)).distinct()
    # as the report's JSON would be read in Python: true (PostgreSQL 'true', SQLite 1) and other truthy values
    return {str(group) for group, value in conn.execute(stmt)
            if str(value).lower() not in ("", "0", "false", "null", "[]", "{}")}


def online_after(heartbeat_s: int) -> float:
    return time.time() - 3 * heartbeat_s


#: the state a client reports from ``close()`` (ykafka.runtime): its last report, so it is no longer live
CLOSED = "closed"


def live(heartbeat_s: int, after: float | None = None) -> ColumnElement[bool]:
    """A live client: seen within 3 heartbeats and not closed. A client's last report says ``closed``; it is
    still within its 3 heartbeats for a minute and a half, and counting it there made the overview (and the
    panels) disagree with the clients page, which shows it closed."""
    return and_(cs.c.last_seen >= (online_after(heartbeat_s) if after is None else after),
                or_(cs.c.state.is_(None), cs.c.state != CLOSED))


def is_live(row: Any, after: float) -> bool:
    """:func:`live` for a row read already (``last_seen`` and ``state``)."""
    return bool(row["last_seen"] >= after and row.get("state") != CLOSED)


#: the clients page counts matching clients up to this many and says "more than" beyond: an exact count at
#: 100,000 clients read the whole live inventory on every page (60-80 ms on PostgreSQL)
COUNT_CAP = 10_000

#: where a page of the clients list starts: after (last_seen, app_id, client_id) of the previous page's last row
Cursor = tuple[float, str, str]


def capped_count(conn: Connection, conds: list[Any], cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(how many rows match ``conds``, up to ``cap``; whether there are more): reads at most cap + 1 rows."""
    inner = select(cs.c.app_id).where(*conds).limit(cap + 1).subquery()
    n = int(conn.execute(select(func.count()).select_from(inner)).scalar_one())
    return min(n, cap), n > cap


def client_list(conn: Connection, heartbeat_s: int, f: dict[str, str], online_only: bool,
                limit: int, after: Cursor | None = None) -> tuple[list[dict[str, Any]], int, bool, Cursor | None]:
    """One page of the clients page, newest report first: (rows shown, matching clients counted up to
    :data:`COUNT_CAP`, whether there are more than that, the cursor of the next page or None on the last).

    Keyset paging on (last_seen, app_id, client_id), not OFFSET: a deep page costs what the first does (the
    index on last_seen). A client that reports while someone pages moves to the first page."""
    after_ts = online_after(heartbeat_s)
    conds: list[Any] = []
    for name, column in (("app", cs.c.app_id), ("cluster", cs.c.cluster), ("group", cs.c.group_id),
                         ("role", cs.c.role)):
        if f.get(name):
            conds.append(column == f[name])
    if f.get("topic"):
        conds.append(_topic_filter(f["topic"]))
    if f.get("ip"):  # a prefix: an index range on PostgreSQL (migration 0017), its pattern written into the SQL
        # (a bound parameter's generic plan cannot use the index); a substring read every live row
        prefix = _prefix(f["ip"])
        conds.append(or_(cs.c.ip.like(prefix, escape="\\"), cs.c.hostname.like(prefix, escape="\\")))
    if f.get("version"):
        conds.append(or_(cs.c.ykafka_version.like(_like(f["version"]), escape="\\"),
                         cs.c.librdkafka_version.like(_like(f["version"]), escape="\\")))
    if online_only:
        conds.append(live(heartbeat_s, after_ts))
    total, more_than = capped_count(conn, conds)
    page = list(conds)
    if after is not None:
        seen, app_id, client_id = after
        # the plain bound on last_seen lets the database walk its index; the row comparison breaks ties
        page += [cs.c.last_seen <= seen,
                 or_(cs.c.last_seen < seen, tuple_(cs.c.app_id, cs.c.client_id) < tuple_(app_id, client_id))]
    stmt = (select(*LIST_COLUMNS).where(*page)
            .order_by(cs.c.last_seen.desc(), cs.c.app_id.desc(), cs.c.client_id.desc()).limit(limit + 1))
    fetched = list(conn.execute(stmt).mappings())
    cursor: Cursor | None = None
    if len(fetched) > limit:
        fetched = fetched[:limit]
        last = fetched[-1]
        cursor = (float(last["last_seen"]), str(last["app_id"]), str(last["client_id"]))
    rows = []
    for row in fetched:
        item = dict(row)
        if f.get("topic") and f["topic"] not in (item["topics"] or []):
            continue
        item["group"] = item.pop("group_id")
        item["online"] = is_live(item, after_ts)
        rows.append(item)
    return rows, total, more_than, cursor


def by_process(rows: list[dict[str, Any]], fmt_time: Callable[[float | None], str]) -> list[dict[str, Any]]:
    """Rows grouped by the process holding each client (host, pid, start time), in the order of each process's
    first row: ``{"host", "pid", "started", "clients", "roles": {role: n}, "name", "roles_text"}``.

    ``name`` (as ``_process.html``'s ``process_name`` writes it, times by ``fmt_time``) and ``roles_text`` are
    written here, not by a template macro per process: on the clients page, 200 clients are usually 200
    processes, and those two macro calls per process were a third of its rendering (25 -> 17 ms of CPU for 200)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row.get("hostname") or "", row.get("pid"), row.get("process_started"))
        proc = out.get(key)
        if proc is None:
            host, pid, started = key
            name = f"{host or '?'} · pid {pid if pid is not None else '?'}"
            out[key] = proc = {"host": host, "pid": pid, "started": started, "clients": [], "roles": {},
                               "name": name + (f" · started {fmt_time(started)}" if started else "")}
        proc["clients"].append(row)
        proc["roles"][row.get("role") or "?"] = proc["roles"].get(row.get("role") or "?", 0) + 1
    for proc in out.values():
        roles = sorted(proc["roles"].items(), key=lambda kv: kv[0].lower())  # Jinja's dictsort: by key, any case
        proc["roles_text"] = ", ".join(f"{n} {role}{'s' if n != 1 else ''}" for role, n in roles)
    return list(out.values())


def _live_rows(conn: Connection, heartbeat_s: int, conds: list[Any], limit: int) -> list[dict[str, Any]]:
    after = online_after(heartbeat_s)
    stmt = select(*LIST_COLUMNS).where(*conds).order_by(cs.c.role, cs.c.app_id, cs.c.client_id).limit(limit)
    return [{**row, "group": row["group_id"], "online": is_live(row, after)}
            for row in conn.execute(stmt).mappings()]


def process_clients(conn: Connection, heartbeat_s: int, hostname: str | None, pid: int | None,
                    started: float | None, limit: int = 50) -> list[dict[str, Any]]:
    """Every client (live or not) of one process: the client page's siblings."""
    conds = [cs.c.hostname == hostname if hostname is not None else cs.c.hostname.is_(None),
             cs.c.pid == pid if pid is not None else cs.c.pid.is_(None),
             cs.c.process_started == started if started is not None else cs.c.process_started.is_(None)]
    return _live_rows(conn, heartbeat_s, conds, limit)


def group_clients(conn: Connection, heartbeat_s: int, group: str, limit: int = 50) -> list[dict[str, Any]]:
    """The live clients reporting ``group``: its ykafka consumers (the group page)."""
    return _live_rows(conn, heartbeat_s, [cs.c.group_id == group, live(heartbeat_s)],
                      limit)


#: how old the overview's counts (live clients per role, drifting clients) may be, once their scan is slow
OVERVIEW_TTL_S = 10.0
#: how old a config panel's counts per status may be, once their scan is slow (a release at 100,000 clients
#: reaches them over seconds anyway; the panel refreshes every few seconds)
PANEL_TTL_S = 3.0
#: a summary is reused only over this many live clients (below, its scan is fast on an idle machine)
SUMMARY_MIN_CLIENTS = 10_000


def many(rows: list[Any]) -> bool:
    """The summary rows (a count last) count at least :data:`SUMMARY_MIN_CLIENTS` clients."""
    return sum(int(r[-1]) for r in rows) >= SUMMARY_MIN_CLIENTS


def live_roles(conn: Connection, heartbeat_s: int) -> list[tuple[str, int]]:
    """(role, live clients): a count over every live client, reused when slow (:func:`reuse_when_slow`)."""
    def read(conn: Connection) -> list[tuple[str, int]]:
        stmt = (select(func.coalesce(cs.c.role, cast("?", String)), func.count()).where(
            live(heartbeat_s)).group_by(cs.c.role))
        return sorted((str(role), int(n)) for role, n in conn.execute(stmt))

    return reuse_when_slow(conn, ("live_roles", heartbeat_s), OVERVIEW_TTL_S, read, many)


def _scope_filter(stmt: Any, kind: str, name: str) -> Any:
    if kind == "cluster":
        return stmt.where(cs.c.cluster == name)
    if kind == "group":
        return stmt.where(cs.c.group_id == name)
    if kind == "topic":
        # names are [A-Za-z0-9._-]: the quoted name matches exactly one list element of the JSON text
        return stmt.where(_topic_filter(name))
    return stmt


def _held(namespace: str) -> Any:
    return cs.c.config_release_keys[namespace].as_string()


def _has_errors() -> Any:
    """Reports errors: the predicate of the partial index ``ix_ms_client_state_errored`` (migration 0016), its
    constants written into the SQL (a bound parameter would keep the database from matching the index)."""
    return cast(cs.c.errors, Text).not_in([literal_column("'[]'"), literal_column("'null'")])


def reached(conn: Connection, heartbeat_s: int, kind: str, name: str, namespace: str,
            where: Any = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Live clients reading a scope (kind global / cluster / group / topic) with the release key each holds
    for ``namespace`` (``held``) and whether it reports errors; the JSON is picked apart in SQL so ten
    thousand clients do not mean thirty thousand JSON decodes here."""
    stmt = select(cs.c.app_id, cs.c.client_id, cs.c.ip, cs.c.hostname, cs.c.role, _held(namespace).label("held"),
                  _has_errors().label("has_errors"), cs.c.extra["label"].as_string().label("label")
                  ).where(live(heartbeat_s))
    stmt = _scope_filter(stmt, kind, name)
    if where is not None:
        stmt = stmt.where(where)
    stmt = stmt.order_by(cs.c.app_id, cs.c.client_id)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [{**row, "has_errors": bool(row["has_errors"]), "online": True} for row in conn.execute(stmt).mappings()]


def reached_summary(conn: Connection, heartbeat_s: int, kind: str, name: str, namespace: str,
                    gray_ips: tuple[str, ...], gray_labels: tuple[str, ...] = ()
                    ) -> list[tuple[str | None, bool, bool, int]]:
    """(held key, has errors, on a gray IP or label, how many) over the live clients a scope reaches: the
    panel's counts without a row per client."""
    held, errs = _held(namespace), _has_errors()
    instances = [x[len(INSTANCE_LABEL):] for x in gray_labels if x.startswith(INSTANCE_LABEL)]  # a rollout step's
    gray = or_(cs.c.ip.in_(gray_ips), cs.c.extra["label"].as_string().in_(gray_labels), cs.c.client_id.in_(instances))
    groups = [held, errs] + ([gray] if gray_ips or gray_labels else [])
    stmt = select(*groups, func.count()).where(live(heartbeat_s))
    stmt = _scope_filter(stmt, kind, name).group_by(*groups)
    rows = reuse_when_slow(conn, ("reached_summary", heartbeat_s, kind, name, namespace, gray_ips, gray_labels),
                           PANEL_TTL_S, lambda c: [tuple(r) for r in c.execute(stmt)], many)
    if gray_ips or gray_labels:
        return [(h, bool(e), bool(g), int(n)) for h, e, g, n in rows]
    return [(h, bool(e), False, int(n)) for h, e, n in rows]


def _holds(namespace: str, keys: list[str]) -> Any:
    """Holds one of ``keys`` for ``namespace``: a primary-key lookup in ``ms_client_release_keys`` per client,
    where a ``LIKE`` on the JSON of ``config_release_keys`` decoded it."""
    if not keys:
        return false()
    return exists().where(rk.c.app_id == cs.c.app_id, rk.c.client_id == cs.c.client_id,
                          rk.c.namespace == namespace, rk.c.release_key.in_(keys))


def pending(namespace: str, keys: list[str]) -> Any:
    """Clients that do not hold one of ``keys`` yet."""
    return not_(_holds(namespace, keys))


def _ids_in(conn: Connection, ids: list[tuple[str, str]]) -> Any:
    """The clients of ``ids`` (app id, client id). On PostgreSQL two arrays unnested: an ``IN`` list of a few
    thousand pairs took seconds to plan (a bitmap scan per pair), the arrays are a join on the primary key."""
    if conn.dialect.name != "postgresql" or not ids:
        return tuple_(cs.c.app_id, cs.c.client_id).in_(ids)
    return text("(ms_client_state.app_id, ms_client_state.client_id) IN "
                "(SELECT * FROM unnest(CAST(:ids_app AS text[]), CAST(:ids_client AS text[])))").bindparams(
        ids_app=[a for a, _ in ids], ids_client=[c for _, c in ids])


def _other_key_ranges(keys: list[str]) -> list[Any]:
    """Conditions on ``ms_client_release_keys.release_key`` for a key part not in ``keys``: index ranges between
    the keys (``<>`` would read every holder of the namespace)."""
    ordered = sorted(set(keys))
    return [rk.c.release_key < ordered[0], rk.c.release_key > ordered[-1],
            *(and_(rk.c.release_key > a, rk.c.release_key < b) for a, b in itertools.pairwise(ordered))]


def errored_holders(conn: Connection, heartbeat_s: int, kind: str, name: str, namespace: str, keys: list[str],
                    limit: int = 5000) -> list[dict[str, Any]]:
    """Live clients of a scope that hold one of ``keys`` and report errors (applied, or rejected if the errors
    are this release's). The clients reporting errors are read first from their partial index (few of every
    live one), then those of them holding a key by primary key: two statements, because the planner, with no
    estimate of how few report errors, joined every holder of the key instead (0.9 s at 100,000 clients)."""
    errored = [(str(a), str(c)) for a, c in conn.execute(
        select(cs.c.app_id, cs.c.client_id).where(_has_errors(), live(heartbeat_s))
        .order_by(cs.c.app_id, cs.c.client_id).limit(limit))]  # in the partial index's order: read from it
    if not errored or not keys:
        return []
    return reached(conn, heartbeat_s, kind, name, namespace, limit=limit,
                   where=and_(_ids_in(conn, errored), _holds(namespace, keys)))


#: a pending page reads at most this many candidates from the index of held keys; more, and the walk in key
#: order fills the page sooner (pending_page)
CANDIDATES_MAX = 5000


def pending_page(conn: Connection, heartbeat_s: int, kind: str, name: str, namespace: str, keys: list[str],
                 pending_n: int, total: int, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` live clients of a scope not holding one of ``keys`` (a config panel's pending rows),
    given how many of ``total`` are pending (``pending_n``, from :func:`reached_summary`).

    Bounded either way: many pending (just after a release), clients are walked in key order, each checked by
    primary key, and about limit x total / pending_n are read before the page is full; few pending, they are
    read from the index of held keys (``ms_client_release_keys`` by namespace and key: the clients holding
    another key part: the pending ones, and those holding a merged key ``a+b``; at most :data:`CANDIDATES_MAX`,
    else the walk). So about sqrt(limit x total) clients are read (3,200 of 100,000), where the JSON filter read
    every live client when the last few were pending. A pending client holding no key of the namespace at all
    (one without a config service) is in no index: found by the walk."""
    waiting = pending(namespace, keys)
    if keys and pending_n * pending_n < limit * total:  # few: from the clients holding another key
        found: set[tuple[str, str]] = set()
        for key_range in _other_key_ranges(keys):  # one index range each, in its order: the planner, estimating
            # "another key" as every holder of the namespace, walked the whole table for an OR of them or an
            # anti-join here; the pending check is the next statement's, on these clients only
            found |= {(str(a), str(c)) for a, c in conn.execute(
                select(rk.c.app_id, rk.c.client_id).where(rk.c.namespace == namespace, key_range)
                .order_by(rk.c.release_key).limit(CANDIDATES_MAX + 1))}
        ids = sorted(found)
        if len(ids) <= CANDIDATES_MAX:
            rows = reached(conn, heartbeat_s, kind, name, namespace, limit=limit,
                           where=and_(_ids_in(conn, ids), waiting)) if ids else []
            if len(rows) >= min(limit, pending_n):
                return rows
    return reached(conn, heartbeat_s, kind, name, namespace, where=waiting, limit=limit)


def rejections(conn: Connection, app_id: str, client_id: str) -> list[dict[str, Any]]:
    """The structured rejections of one client (from ``extra``), read only for clients that have errors."""
    extra = conn.execute(select(cs.c.extra).where(cs.c.app_id == app_id, cs.c.client_id == client_id)).scalar()
    return [e for e in ((extra or {}).get("errors") or [])
            if isinstance(e, dict) and e.get("type") == "config_rejected"]


def reported_ips(conn: Connection, ips: set[str]) -> set[str]:
    """Which of ``ips`` appear in any client report (live or not): those hosts run ykafka clients."""
    if not ips:
        return set()
    return {str(ip) for ip in conn.execute(select(cs.c.ip).where(cs.c.ip.in_(sorted(ips))).distinct()).scalars()}
