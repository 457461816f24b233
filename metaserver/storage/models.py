"""The MetaServer's tables (SQLAlchemy Core). Every bit of shared state lives here so peers agree.

The Alembic migrations under ``metaserver/migrations`` create exactly these; keep the two in step.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData()

apps = Table(
    "ms_apps", metadata,
    Column("app_id", String(128), primary_key=True),
    # ykafka.signing.derive_key(app_id, secret); the secret itself is never stored
    Column("signing_key", LargeBinary(64), nullable=False),
    # bumped by every secret rotation; tokens carry it, so a rotation ends older tokens at their next renewal
    Column("key_generation", Integer, nullable=False, default=1),
    Column("description", Text, nullable=False, default=""),
    Column("default_cluster", String(200), nullable=True),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("acl", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: which cluster holds each topic (read one row at a time: the table may hold millions)
topic_placements = Table(
    "ms_topic_placements", metadata,
    Column("topic", String(255), primary_key=True),
    Column("cluster", String(200), nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(64), nullable=False),
    Index("ix_ms_topic_placements_cluster", "cluster"),
)

clusters = Table(
    "ms_clusters", metadata,
    Column("name", String(200), primary_key=True),
    Column("bootstrap_servers", Text, nullable=False),
    Column("dc", String(100), nullable=False, default=""),
    Column("standby", String(200), nullable=True),
    Column("status", String(16), nullable=False, default="active"),
    # broker-side security: PLAINTEXT (open), SASL_PLAINTEXT or SASL_SSL; the SCRAM mechanism; the CA (PEM) that
    # signed the brokers' certificates. No password: each app gets its own principal (kafka_principals)
    Column("sasl_mechanism", String(32), nullable=True),
    Column("updated_at", Float, nullable=False),
    Column("security_protocol", String(16), nullable=False, default="PLAINTEXT", server_default="PLAINTEXT"),
    Column("ssl_ca", Text, nullable=True),
)

#: one SCRAM principal per (app, cluster, generation); the password is encrypted with a key derived from the
#: token key (metaserver/domain/credentials.py). A rotation adds generation n+1 and retires n at ``retire_at``.
kafka_principals = Table(
    "ms_kafka_principals", metadata,
    Column("app_id", String(128), primary_key=True),
    Column("cluster", String(200), primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("username", String(255), nullable=False, unique=True),
    Column("password", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("provisioned_at", Float, nullable=True),  # when the broker last received this credential
    Column("retire_at", Float, nullable=True),
)

#: each secured cluster's last ACL reconcile: when, whether it succeeded, repairs made, the bindings in force
kafka_reconciles = Table(
    "ms_kafka_reconciles", metadata,
    Column("cluster", String(200), primary_key=True),
    Column("at", Float, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("error", Text, nullable=True),
    Column("repairs", Integer, nullable=False),
    Column("bindings", JSON, nullable=False),
)

nonces = Table(
    "ms_nonces", metadata,
    Column("app_id", String(128), primary_key=True),
    Column("nonce", String(128), primary_key=True),
    Column("expires_at", Float, nullable=False),
    Index("ix_ms_nonces_expires_at", "expires_at"),
)

auth_failures = Table(
    "ms_auth_failures", metadata,
    Column("scope", String(8), primary_key=True),  # "app" or "ip"
    Column("subject", String(255), primary_key=True),
    Column("window_start", BigInteger, primary_key=True),
    Column("count", Integer, nullable=False),
)

server_keys = Table(
    "ms_server_keys", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", LargeBinary(128), nullable=False),
    Column("created_at", Float, nullable=False),
)

_CLIENT_COLUMNS = (
    ("ip", String(64)),
    ("hostname", String(255)),
    ("pid", Integer),
    ("process_started", Float),
    ("language", String(32)),
    ("ykafka_version", String(64)),
    ("confluent_kafka_version", String(64)),
    ("librdkafka_version", String(64)),
    ("role", String(16)),
    ("topics", JSON),
    ("group_id", String(255)),
    ("cluster", String(200)),
    ("config_release_keys", JSON),
    ("state", String(64)),
    ("errors", JSON),
    ("extra", JSON),
)


def _client_columns() -> list[Column[object]]:
    return [Column(name, type_, nullable=True) for name, type_ in _CLIENT_COLUMNS]


client_state = Table(
    "ms_client_state", metadata,
    Column("app_id", String(128), primary_key=True),
    Column("client_id", String(255), primary_key=True),
    *_client_columns(),
    Column("first_seen", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Index("ix_ms_client_state_cluster", "cluster"),
    Index("ix_ms_client_state_librdkafka", "librdkafka_version"),
    Index("ix_ms_client_state_group", "group_id"),
    Index("ix_ms_client_state_last_seen", "last_seen"),
    # the clients reporting errors, a few of every live one (a config panel's holders with errors; migration 0016)
    Index("ix_ms_client_state_errored", "app_id", "client_id",
          postgresql_where=text("CAST(errors AS TEXT) NOT IN ('[]', 'null')"),
          sqlite_where=text("CAST(errors AS TEXT) NOT IN ('[]', 'null')")),
    # PostgreSQL also has ix_ms_client_state_topics, a GIN index on (topics::jsonb) (migration 0013), and prefix
    # indexes on ip and hostname (text_pattern_ops: the clients page's IP / host filter; migration 0017)
)

#: the release keys a client holds (its report's ``config_release_keys``), one row per namespace and key part
#: (the config service joins merged releases' keys with ``+``): "who holds another key than the one in force"
#: is an index range here, where the JSON column needs a read of every live client (migration 0016). Written
#: by a report whose keys changed (domain/clients.store), deleted with the client (domain/clients.prune).
client_release_keys = Table(
    "ms_client_release_keys", metadata,
    Column("app_id", String(128), primary_key=True),
    Column("client_id", String(255), primary_key=True),
    Column("namespace", String(512), primary_key=True),
    Column("release_key", String(512), primary_key=True),
    Index("ix_ms_client_release_keys_held", "namespace", "release_key"),
)

client_reports = Table(
    "ms_client_reports", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("app_id", String(128), nullable=False),
    Column("client_id", String(255), nullable=False),
    *_client_columns(),
    Index("ix_ms_client_reports_app_at", "app_id", "at"),
    Index("ix_ms_client_reports_cluster", "cluster"),
    Index("ix_ms_client_reports_librdkafka", "librdkafka_version"),
    Index("ix_ms_client_reports_group", "group_id"),
    Index("ix_ms_client_reports_at", "at"),  # the retention's delete (domain/clients.prune)
    Index("ix_ms_client_reports_client", "app_id", "client_id", "id"),  # one client's newest history rows
)

audit = Table(
    "ms_audit", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("operator", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(512), nullable=False),
    Column("before", JSON, nullable=True),
    Column("after", JSON, nullable=True),
    Index("ix_ms_audit_at", "at"),
    Index("ix_ms_audit_target", "target"),
)

CLIENT_FIELDS: tuple[str, ...] = tuple(name for name, _ in _CLIENT_COLUMNS)

#: the console's summaries over every live client as the MetaServer that last read one left them, so the other
#: MetaServers' warmers take them from here rather than scan (metaserver/console/queries.py, migration 0018);
#: ``key`` is the SHA-256 of the summary's key, ``value`` its JSON, ``read_at`` when it was read (epoch seconds)
console_summaries = Table(
    "ms_console_summaries", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("read_at", Float, nullable=False),
)

alerts = Table(
    "ms_alerts", metadata,
    # the pipeline's alert id, stable per (rule, subject, level): a re-post updates this row
    Column("id", String(64), primary_key=True),
    Column("rule", String(128), nullable=False),
    Column("level", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("topic", String(255), nullable=True),
    Column("group_id", String(255), nullable=True),
    Column("partition", Integer, nullable=True),
    Column("client_id", String(255), nullable=True),
    Column("reason", Text, nullable=False),
    Column("evidence", JSON, nullable=False),
    # when the pipeline judged it (epoch ms, as sent); first / last receipt here (epoch s) and how often
    Column("ts", BigInteger, nullable=False),
    Column("first_seen", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Column("posts", Integer, nullable=False, default=1),
    Column("reported_by", String(255), nullable=False),
    Index("ix_ms_alerts_last_seen", "last_seen"),
    Index("ix_ms_alerts_rule", "rule"),
    Index("ix_ms_alerts_topic", "topic"),
    Index("ix_ms_alerts_group", "group_id"),
)

#: one row per namespace a push is publishing to: the push's lock across MetaServer instances (configwrites)
config_locks = Table(
    "ms_config_locks", metadata,
    Column("namespace", String(300), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", Float, nullable=False),  # a lock left by a MetaServer that died mid-push lapses
)

offset_resets = Table(
    "ms_offset_resets", metadata,
    # a consumer group's offset reset (metaserver/kafka/offset_jobs.py): its plan and each step as it happens, so any
    # MetaServer peer shows the live panel of a reset another peer runs
    Column("id", String(32), primary_key=True),
    Column("group_id", String(255), nullable=False),
    Column("cluster", String(200), nullable=False),
    Column("operator", String(255), nullable=False),
    Column("mode", String(16), nullable=False),  # direct | coordinated
    Column("state", String(16), nullable=False),  # running | done | failed
    Column("spec", JSON, nullable=False),
    Column("plan", JSON, nullable=False),
    Column("steps", JSON, nullable=False),
    Column("error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_ms_offset_resets_group", "group_id"),
)

#: the security switches (``ykafka.catalog.LOCKED``, e.g. ``auth.enabled``): kept here, set only through the admin
#: API (``PUT /v1/admin/security``, audited), never read from the config center whose Open API token could write
#: them (issue 37); a missing row is the catalog default
security_switches = Table(
    "ms_security_switches", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", JSON, nullable=False),
    Column("updated_by", String(255), nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: each app's own config-center access key (metaserver/domain/configkeys.py, issue 37): the secret sealed like the
#: Kafka passwords (domain/sealing.py), the app's key generation it was minted for, and the scope (namespaces the
#: app may read) last pushed to the config service (NULL: not pushed yet)
configcenter_keys = Table(
    "ms_configcenter_keys", metadata,
    Column("app_id", String(128), primary_key=True),
    Column("secret", Text, nullable=False),
    Column("key_generation", Integer, nullable=False),
    Column("scope", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
)
