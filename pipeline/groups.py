"""Consumer-group lifecycle: idle groups become cleanup candidates; ephemeral groups go when their last client does.

Periodic (batch): a group with no live member whose committed offsets have not moved for ``idle`` is a
candidate. When its offsets last moved comes from the lag samples in the store (the pipeline samples
every group's committed offsets); a group the store has never seen move counts as idle since its first
sample. ``ykafka admin groups cleanup`` lists the candidates and, with ``--apply``, deletes them through
the AdminClient (``DeleteGroups``; Tansu supports it).

Real time: a client event with ``state=closed`` for a group declared ephemeral (the client's report says
``ephemeral``, or the group matches a configured pattern) deletes the group as soon as the broker shows
no live member and no other client of that group is still reporting.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from ykafka.events import MetricName

from .lag_sampler import GroupInfo, LagSampler
from .store import Store, days_between, hour_prefixes

log = structlog.get_logger(__name__)


def _commit_history(store: Store, since: dt.timedelta, now: dt.datetime,
                    groups: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
    """group -> (first sample ts, last ts its committed offsets changed) from the sampler's lag samples; of
    ``groups`` only when given (the console's page of groups: the other groups' samples are not loaded)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if groups is not None and not groups:
        return {}  # an empty page (an empty value set would not even type-check against the column)
    start = now - since
    wanted = (pc.field("name") == str(MetricName.LAG)) & (pc.field("source") == "sampler")
    if groups is not None:
        wanted = wanted & pc.field("group").isin(pa.array(list(groups), pa.string()))
    table = store.read("metrics", hour_prefixes(start, now), filter=wanted,
                       columns=["ts", "group", "topic", "partition", "committed"])
    rows = sorted(table.to_pylist(), key=lambda r: r["ts"])
    last_seen: dict[tuple[str, str, int], int] = {}
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        group = row["group"]
        if group is None:
            continue
        first, changed = out.get(group, (row["ts"], row["ts"]))
        tp = (group, row["topic"], row["partition"])
        if tp in last_seen and last_seen[tp] != row["committed"]:
            changed = row["ts"]
        last_seen[tp] = row["committed"]
        out[group] = (first, changed)
    return out


#: groups one page shows and describes (the console's groups page and ``ykafka admin groups list``)
GROUP_PAGE = 200
#: the most a page may ask for: each group on it is one describe and one offsets request to the broker
GROUP_PAGE_MAX = 5_000


def page_of(names: Sequence[str], name: str = "", after: str | None = None, limit: int = GROUP_PAGE
            ) -> dict[str, Any]:
    """One page of the sorted group ``names``: those containing ``name``, after the group ``after`` in name order
    (a cursor, not an offset: a group created or deleted meanwhile does not shift the pages), at most ``limit``.

    Why: describing a group and reading its offsets is one broker request each, so a reader of every group
    (the console's groups page was one, ``ykafka admin groups list`` another) costs two requests per group of
    the cluster per call. The names come from one ListGroups request (Kafka's protocol has no paged form; a
    name is a few bytes); only the page is described. Returns ``page`` (names), ``total`` (matching names),
    ``first`` (1-based position of the page's first) and ``next`` (the cursor of the next page, or None)."""
    import bisect

    matching = sorted(g for g in names if name in g)
    start = bisect.bisect_right(matching, after) if after is not None else 0
    chosen = matching[start:start + limit]
    return {"page": chosen, "total": len(matching), "first": start + 1,
            "next": chosen[-1] if chosen and start + len(chosen) < len(matching) else None}


def candidates(sampler: LagSampler, store: Store | None, idle: dt.timedelta, now: dt.datetime | None = None,
               history: dt.timedelta = dt.timedelta(days=30), include: Sequence[str] = ("*",),
               infos: Sequence[GroupInfo] | None = None) -> list[dict[str, Any]]:
    """Groups with no live member and no commit movement for ``idle`` (see module docstring); among ``infos``
    (groups already described: a page of them) when given, else among every group of the cluster."""
    now = now or dt.datetime.now(dt.UTC)
    now_ms = int(now.timestamp() * 1000)
    page = infos is not None
    if infos is None:
        infos = sampler.groups()
    seen = (_commit_history(store, history, now, [i.group for i in infos] if page else None)
            if store is not None else {})
    out = []
    for info in infos:
        if info.alive or not any(fnmatch.fnmatch(info.group, p) for p in include):
            continue
        first, changed = seen.get(info.group, (None, None))
        if changed is None:
            idle_s = 0.0 if idle.total_seconds() > 0 else None
            basis = "never sampled by the pipeline"
        else:
            idle_s = (now_ms - changed) / 1000.0
            basis = "offsets last moved" if changed != first else "offsets unchanged since first sample"
        if idle_s is not None and idle_s < idle.total_seconds():
            continue
        out.append({"group": info.group, "state": info.state, "members": info.members,
                    "idle_s": None if idle_s is None else round(idle_s, 1), "basis": basis,
                    "committed": info.as_dict()["offsets"]})
    return out


def delete_groups(admin: Any, names: Iterable[str], timeout_s: float = 10.0) -> dict[str, str | None]:
    """Delete groups through the AdminClient; group -> None (deleted) or the error text."""
    names = list(names)
    if not names:
        return {}
    result: dict[str, str | None] = {}
    for name, future in admin.delete_consumer_groups(names, request_timeout=timeout_s).items():
        try:
            future.result(timeout_s)
            result[name] = None
        except Exception as exc:
            result[name] = str(exc)
    return result


def ephemeral_closures(rows: Sequence[dict[str, Any]], patterns: Sequence[str] = ()) -> set[str]:
    """Groups named by ``closed`` client events that are ephemeral (flag or pattern)."""
    out = set()
    for row in rows:
        group = row.get("group")
        if not group or row.get("state") != "closed":
            continue
        if row.get("ephemeral") or any(fnmatch.fnmatch(group, p) for p in patterns):
            out.add(group)
    return out


def live_clients(store: Store, group: str, now: dt.datetime, within: dt.timedelta) -> list[str]:
    """Clients of ``group`` whose latest event in ``within`` is not ``closed``."""
    import pyarrow.compute as pc

    start = now - within
    table = store.read("clients", [f"date={d}" for d in days_between(start, now)],
                       filter=(pc.field("group") == group) & (pc.field("ts") >= int(start.timestamp() * 1000)),
                       columns=["ts", "client_id", "state"])
    latest: dict[str, tuple[int, str]] = {}
    for row in table.to_pylist():
        current = latest.get(row["client_id"])
        if current is None or row["ts"] >= current[0]:
            latest[row["client_id"]] = (row["ts"], row["state"])
    return sorted(c for c, (_ts, state) in latest.items() if state != "closed")


def delete_ephemeral(sampler: LagSampler, store: Store, groups: Iterable[str], now: dt.datetime | None = None,
                     heartbeat: dt.timedelta = dt.timedelta(minutes=3)) -> dict[str, str | None]:
    """Delete the given ephemeral groups that have no live member and no live client; returns outcomes."""
    now = now or dt.datetime.now(dt.UTC)
    names = sorted(set(groups))
    if not names:
        return {}
    deletable = []
    skipped: dict[str, str | None] = {}
    for info in sampler.groups(names):
        if info.state == "DEAD":
            skipped[info.group] = "kept: the broker does not know the group"
            continue
        clients = live_clients(store, info.group, now, heartbeat)
        if info.alive or clients:
            skipped[info.group] = f"kept: state {info.state}, live clients {clients}"
            continue
        deletable.append(info.group)
    result = delete_groups(sampler.admin, deletable)
    for name, error in result.items():
        log.info("ykafka.pipeline.ephemeral_group_deleted" if error is None else "ykafka.pipeline.ephemeral_failed",
                 group=name, error=error)
    result.update(skipped)
    return result
