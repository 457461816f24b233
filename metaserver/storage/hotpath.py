"""Pre-written SQL for the grant path, run on the pooled DBAPI connection (bound parameters only).

Building, compiling and wrapping Core statements costs about a millisecond per grant in SQLAlchemy;
the grant path is the one that must do a thousand a second on two cores, so its few statements are
written once here, in the dialect's parameter style, and handed straight to the driver cursor.
Everything else in the MetaServer uses Core statements.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

_NAMED = re.compile(r"(?<!:):([a-z_]+)")

APP = ("SELECT app_id, signing_key, key_generation, enabled, acl, default_cluster FROM ms_apps "
       "WHERE app_id = :app_id")
FAILURES = ("SELECT count FROM ms_auth_failures WHERE window_start = :window_start AND "
            "((scope = 'ip' AND subject = :ip) OR (scope = 'app' AND subject = :app_id))")
CLUSTERS = ("SELECT name, bootstrap_servers, dc, standby, status, sasl_mechanism, security_protocol, ssl_ca "
            "FROM ms_clusters ORDER BY name")
NONCE = ("INSERT INTO ms_nonces (app_id, nonce, expires_at) VALUES (:app_id, :nonce, :expires_at) "
         "ON CONFLICT (app_id, nonce) DO NOTHING RETURNING nonce")
PURGE_NONCES = "DELETE FROM ms_nonces WHERE expires_at < :now"
# a client's first send to an unseen topic: the app's ACL and the topic's placement in one statement
PLACEMENT = ("SELECT a.acl, p.cluster FROM ms_apps a LEFT JOIN ms_topic_placements p ON p.topic = :topic "
             "WHERE a.app_id = :app_id AND a.enabled")

# a client report (every client, every heartbeat): its previous content, the real-time row, a history row
_CLIENT_COLS = ("ip", "hostname", "pid", "process_started", "language", "ykafka_version", "confluent_kafka_version",
                "librdkafka_version", "role", "topics", "group_id", "cluster", "config_release_keys", "state",
                "errors", "extra")
#: the JSON columns: written as their JSON text, read back decoded (json_value)
CLIENT_JSON = ("topics", "config_release_keys", "errors", "extra")
CLIENT_COLUMNS = _CLIENT_COLS
CLIENT_BEFORE = (f"SELECT {', '.join(_CLIENT_COLS)} FROM ms_client_state "
                 "WHERE app_id = :app_id AND client_id = :client_id")
CLIENT_UPSERT = (f"INSERT INTO ms_client_state (app_id, client_id, {', '.join(_CLIENT_COLS)}, first_seen, last_seen) "
                 f"VALUES (:app_id, :client_id, {', '.join(':' + c for c in _CLIENT_COLS)}, :now, :now) "
                 "ON CONFLICT (app_id, client_id) DO UPDATE SET "
                 + ", ".join(f"{c} = excluded.{c}" for c in _CLIENT_COLS) + ", last_seen = excluded.last_seen")
CLIENT_HISTORY = (f"INSERT INTO ms_client_reports (at, app_id, client_id, {', '.join(_CLIENT_COLS)}) "
                  f"VALUES (:now, :app_id, :client_id, {', '.join(':' + c for c in _CLIENT_COLS)})")

# the release keys a client holds, one row per namespace and key part (models.client_release_keys): rewritten
# only by a report whose keys changed
RELEASE_KEYS_DELETE = "DELETE FROM ms_client_release_keys WHERE app_id = :app_id AND client_id = :client_id"
RELEASE_KEYS_INSERT = ("INSERT INTO ms_client_release_keys (app_id, client_id, namespace, release_key) "
                       "VALUES (:app_id, :client_id, :namespace, :release_key) ON CONFLICT DO NOTHING")


@lru_cache(maxsize=64)
def _for(dialect: str, sql: str) -> str:
    if dialect == "sqlite":  # sqlite3 takes :name with a dict
        return sql
    return _NAMED.sub(r"%(\1)s", sql)  # psycopg: pyformat


def rows(cursor: Any, dialect: str, sql: str, params: dict[str, Any]) -> list[Any]:
    cursor.execute(_for(dialect, sql), params)
    return list(cursor.fetchall()) if cursor.description is not None else []


def many(cursor: Any, dialect: str, sql: str, params: list[dict[str, Any]]) -> None:
    """One statement for each of ``params`` (nothing when there are none)."""
    if params:
        cursor.executemany(_for(dialect, sql), params)


def json_value(value: Any) -> Any:
    """JSON columns come back decoded from psycopg and as text from sqlite3."""
    return json.loads(value) if isinstance(value, str | bytes) else value
