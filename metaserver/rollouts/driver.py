"""The rollout driver: one thread per MetaServer process; only the holder of the lease row drives plans.

The lease is one row (``ms_rollout_lease``) taken with a conditional UPDATE — by its holder to renew, by
anyone once it expired — so across MetaServer peers (and uvicorn workers) exactly one drives at a time. A
driver that dies (SIGKILL) stops renewing; after ``LEASE_S`` another takes the row and carries every plan on
from its database state (a step published and baking is judged when its bake ends, by whoever holds it then).
"""

from __future__ import annotations

import threading
import time
import uuid

import structlog
from sqlalchemy import Engine, or_, update
from sqlalchemy.exc import IntegrityError

from ..services import Services
from ..storage import db
from . import plans
from .models import rollout_lease

log = structlog.get_logger("metaserver.rollouts.driver")

LEASE = "rollouts"
LEASE_S = 3.0
TICK_S = 0.5


def acquire(engine: Engine, holder: str, now: float | None = None, lease_s: float = LEASE_S) -> bool:
    """Take or renew the drivers' lease; True when ``holder`` holds it until ``now + lease_s``."""
    now = time.time() if now is None else now
    with db.write(engine) as conn:
        taken = conn.execute(update(rollout_lease).where(
            rollout_lease.c.name == LEASE,
            or_(rollout_lease.c.holder == holder, rollout_lease.c.expires_at < now),
        ).values(holder=holder, expires_at=now + lease_s)).rowcount
    if taken:
        return True
    try:
        with db.write(engine) as conn:
            conn.execute(rollout_lease.insert().values(name=LEASE, holder=holder, expires_at=now + lease_s))
        return True
    except IntegrityError:
        return False


class Driver:
    """Ticks every ``TICK_S``: renew the lease, then drive each running plan one step of its state machine."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        self.holder = f"{uuid.uuid4().hex[:12]}"
        self.driving = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollout-driver", daemon=True)

    def start(self) -> Driver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def tick(self) -> None:
        held = acquire(self.svc.engine, self.holder)
        if held != self.driving:
            log.info("rollout.lease", holder=self.holder, held=held)
            self.driving = held
        if not held:
            return
        for plan_id in plans.running(self.svc):
            try:
                plans.drive(self.svc, plan_id)
            except Exception as exc:  # one plan's failure (config center down) must not stop the others
                log.warning("rollout.drive_failed", plan=plan_id, error=str(exc))

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as exc:  # the database away for a moment: try again next tick
                log.warning("rollout.tick_failed", error=str(exc))
