"""Alembic environment: runs on the connection metaserver.storage.db.migrate hands over (online only).

Shared by the MetaServer (versions/, ms_alembic_version) and the config service
(configcenter/migrations/, cc_alembic_version); ``metaserver.storage.db.migrate`` picks which.
"""

from __future__ import annotations

import importlib

from alembic import context
from sqlalchemy import create_engine

from ykafka.servers import require_server_package

config = context.config
VERSION_TABLE = config.get_main_option("version_table") or "ms_alembic_version"
# metaserver.storage.db.migrate hands over the component's tables (the MetaServer's or the config service's); alembic
# run by hand gets the MetaServer's, from this package under its installed or checkout name (ykafka.servers)
metadata = config.attributes.get("metadata") or importlib.import_module(
    f"{require_server_package('metaserver', 'alembic')}.storage.models").metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set sqlalchemy.url (alembic -x) or run migrations through metaserver.storage.db.migrate")
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, version_table=VERSION_TABLE,
                          render_as_batch=conn.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run the MetaServer or alembic upgrade online")
run()
