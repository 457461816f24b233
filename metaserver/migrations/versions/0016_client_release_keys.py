"""The release keys each client holds, one row per (client, namespace, key part), indexed by (namespace, key); and
a partial index on the clients that report errors.

Why: a config panel's unsettled rows (the clients still pending a release, the holders reporting errors) were
filters on the JSON of ``ms_client_state.config_release_keys`` over every live client, which no index answers:
at 100,000 clients 80-120 ms each on every view of the panel (bench/control_plane_scale.py). With these, "who
holds another key" is an index range on (namespace, release_key) and "who reports errors" a partial index the
size of the erring clients. The JSON column stays (the reports' history, the rollouts read it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: the errors column holds a JSON list; an empty one (or JSON null) is no error (console.queries._has_errors)
ERRORED = "CAST(errors AS TEXT) NOT IN ('[]', 'null')"


def upgrade() -> None:
    op.create_table(
        "ms_client_release_keys",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("client_id", sa.String(255), primary_key=True),
        sa.Column("namespace", sa.String(512), primary_key=True),
        sa.Column("release_key", sa.String(512), primary_key=True),
    )
    op.create_index("ix_ms_client_release_keys_held", "ms_client_release_keys", ["namespace", "release_key"])
    op.execute(f"CREATE INDEX ix_ms_client_state_errored ON ms_client_state (app_id, client_id) WHERE {ERRORED}")
    bind = op.get_bind()
    state = sa.table("ms_client_state", sa.column("app_id"), sa.column("client_id"),
                     sa.column("config_release_keys", sa.JSON()))
    keys = sa.table("ms_client_release_keys", sa.column("app_id"), sa.column("client_id"), sa.column("namespace"),
                    sa.column("release_key"))
    rows: list[dict[str, str]] = []
    for app_id, client_id, held in bind.execute(sa.select(state.c.app_id, state.c.client_id,
                                                          state.c.config_release_keys)):
        held = json.loads(held) if isinstance(held, str) else held
        for namespace, key in (held or {}).items():
            rows += [{"app_id": app_id, "client_id": client_id, "namespace": namespace, "release_key": part}
                     for part in sorted(set(str(key).split("+"))) if 0 < len(part) <= 512 and len(namespace) <= 512]
        if len(rows) >= 5000:
            bind.execute(keys.insert(), rows)
            rows = []
    if rows:
        bind.execute(keys.insert(), rows)


def downgrade() -> None:
    op.drop_index("ix_ms_client_state_errored", "ms_client_state")
    op.drop_table("ms_client_release_keys")
