"""The rollout tables: the guard rules as edited in the console, rollout plans and the drivers' lease.

They hang off the MetaServer's one ``metadata`` so the Alembic environment sees them; migration 0006
creates exactly these.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, Index, Integer, String, Table, Text

from ..storage.models import metadata

#: the guard rules in force: one row (id 1) once an admin edited them; absent, the file under configs/ is read
guard_rules = Table(
    "ms_guard_rules", metadata,
    Column("id", Integer, primary_key=True),
    Column("body", Text, nullable=False),  # the YAML text as the admin saved it
    Column("version", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(255), nullable=False),
)

#: one row per rollout plan; the driver holding the lease moves ``step`` / ``state`` and appends decisions
rollout_plans = Table(
    "ms_rollout_plans", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(300), nullable=False),
    Column("namespace", String(300), nullable=False),
    Column("spec", JSON, nullable=False),  # values, delete, targets, steps, bake_s, thresholds, comment
    Column("state", String(16), nullable=False),  # running, paused, done, rolled_back, aborted
    Column("step", Integer, nullable=False),  # index into spec.steps of the step in force
    Column("step_started", Float, nullable=True),  # when the step in force was published
    Column("canary", JSON, nullable=True),  # client ids the step in force targets
    Column("decisions", JSON, nullable=False),  # [{at, step, action, reason, evidence}]
    Column("created_by", String(255), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_ms_rollout_plans_state", "state"),
)

#: exactly one driver at a time across MetaServer instances: whoever holds the unexpired row drives
rollout_lease = Table(
    "ms_rollout_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", Float, nullable=False),
)
