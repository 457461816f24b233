"""The console's summaries over every live client, read when the MetaServer starts and every
``queries.WARM_EVERY_S`` after, off the request path.

Why: the overview's counts per role and of drifting clients, the topics page's names, the clusters' client
counts and the global config panel's counts per status each look at every live client: at 100,000 clients a
scan of 90-370 ms of PostgreSQL. They are reused per process while read again in the background
(``queries.reuse_when_slow``), but only once a first view had paid for them: a MetaServer's first topics page
took 491-647 ms, its first overview 625 ms (bench/control_plane_scale.py). Read here at start-up, no view pays
them; a view that comes before the first read finishes is answered at once with its counts shown as
"counting..." (``queries.Counting``). Read again every ``WARM_EVERY_S`` (less than ``STALE_MAX_S``), a
console nobody has looked at for a while is not read in the foreground either. A small fleet's scan is fast
and not kept, so its pages still read it fresh on every view (docs/deployment.md, "First views"). The
MetaServers of a deployment share what their warmers read through the database (``queries._shared``): one scan
of a summary serves them all.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

import structlog
from sqlalchemy import Connection, func, literal, select

from ykafka.catalog import GLOBAL

from ..rollouts import drift
from ..services import Services
from ..storage.models import client_state as cs
from . import provision, queries

log = structlog.get_logger("metaserver.console")


class SummaryWarmer:
    """A daemon thread reading the console's summaries now, then each again within ``queries.WARM_EVERY_S``
    (one at a time, spread over it)."""

    def __init__(self, svc: Services) -> None:
        self._svc = svc
        self._rng = random.Random()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        beat = svc.settings.renew_interval
        self._roles: list[tuple[str, int]] = []
        # (key prefix, read): the overview's counts first (the page an operator opens first), the panel's last
        # (it asks the config service for the release in force first)
        self._summaries: list[tuple[tuple[Any, ...], Callable[[Connection], object]]] = [
            (("live_roles", beat), self._read_roles),
            (("drift_count", beat), lambda c: drift.drifting(c, beat, queries.many(self._roles))),
            (("topic_names", beat), lambda c: queries.topic_names(c, beat)),
            (("cluster_loads", beat), lambda c: provision.cluster_loads(c, beat)),
            (("reached_summary", beat, GLOBAL.kind.value), self._read_global_panel),
        ]

    def _read_roles(self, conn: Connection) -> list[tuple[str, int]]:
        self._roles = queries.live_roles(conn, self._svc.settings.renew_interval)
        return self._roles

    def _read_global_panel(self, conn: Connection) -> object:
        from .config_views import _state  # the console's views import this module's users: read at call time

        _, tgt = _state(self._svc, GLOBAL)
        return queries.reached_summary(conn, self._svc.settings.renew_interval, GLOBAL.kind.value, GLOBAL.name,
                                       tgt.namespace, tgt.gray_ips, tgt.gray_labels)

    def start(self) -> SummaryWarmer:
        queries.begin_warming(self._svc.engine, [prefix for prefix, _ in self._summaries])
        self._thread = threading.Thread(target=self._run, name="console-warm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for prefix, _ in self._summaries:  # never read: views read them themselves
            queries.end_warming(self._svc.engine, prefix)

    def _run(self) -> None:
        self._small_fleet()
        self.read_all()  # at start-up all at once: no view pays for them
        # then one at a time, spread over the interval, from a random point in it: MetaServers started together
        # (a deployment) no longer scan in step. At 100,000 clients three warmers' five scans each at once took
        # 0.4-1.0 s of PostgreSQL apiece, and the topics page views that met them 240-370 ms against ~55 ms
        # (bench/control_plane_scale.py, docs/deployment.md). The last summary is read again within
        # 0.4 + 4/5 x 0.95 of the interval (23 s) of its first read, each after that within 0.95 of it: under
        # STALE_MAX_S, so a view never scans for one
        step = queries.WARM_EVERY_S / len(self._summaries)
        if self._stop.wait(self._rng.uniform(0.0, 0.4) * queries.WARM_EVERY_S):
            return
        while not self._stop.is_set():
            for prefix, read in self._summaries:
                self._read(prefix, read)
                if self._stop.wait(self._rng.uniform(0.7, 0.95) * step):
                    return

    def _small_fleet(self) -> None:
        """A table of fewer than ``queries.SUMMARY_MIN_CLIENTS`` clients (a count capped there: a few ms at any
        size) ends the first read's "counting…" at once: a small fleet's summaries are read fresh by each view
        anyway, so its pages never show "counting…" for the warmer's pass (a loaded machine, the tests)."""
        cap = queries.SUMMARY_MIN_CLIENTS
        try:
            with self._svc.engine.connect() as conn:
                n = conn.execute(select(func.count()).select_from(
                    select(literal(1)).select_from(cs).limit(cap).subquery())).scalar_one()
        except Exception as exc:  # noqa: BLE001 - the database away: the pass below logs it too
            log.warning("console.summary_warm_failed", summary="fleet size", error=f"{type(exc).__name__}: {exc}")
            return
        if int(n) < cap:
            for prefix, _ in self._summaries:
                queries.end_warming(self._svc.engine, prefix)

    def read_all(self) -> None:
        """Every summary read now (kept when slow and large); a failure is logged and the next pass tries
        again (a view meanwhile reads it itself, as before the warmer)."""
        for prefix, read in self._summaries:
            if self._stop.is_set():
                return
            self._read(prefix, read)

    def _read(self, prefix: tuple[Any, ...], read: Callable[[Connection], object]) -> None:
        try:
            with self._svc.engine.connect() as conn, conn.begin():
                queries.read_and_keep(functools.partial(read, conn))
        except Exception as exc:  # noqa: BLE001 - the database or the config service away: next pass
            log.warning("console.summary_warm_failed", summary=str(prefix[0]), error=f"{type(exc).__name__}: {exc}")
        finally:
            queries.end_warming(self._svc.engine, prefix)
