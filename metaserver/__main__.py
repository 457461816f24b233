"""``python -m metaserver serve …``: run the MetaServer (every flag is also a ``YKAFKA_MS_*`` env var)."""

from __future__ import annotations

import os
from typing import Any

import click
import uvicorn

from .httpproto import UpgradeIgnoringProtocol
from .settings import ENV_PREFIX, Settings, parse_admin_tokens


def _env(name: str) -> str:
    return ENV_PREFIX + name.upper()


@click.group()
def main() -> None:
    """ykafka MetaServer."""


@main.command()
@click.option("--host", default="127.0.0.1", envvar=_env("host"), show_default=True)
@click.option("--port", default=7070, type=int, envvar=_env("port"), show_default=True)
@click.option("--db-url", default="sqlite:///metaserver.storage.db", envvar=_env("db_url"), show_default=True,
              help="sqlite:///path.db or postgresql+psycopg://user@host/db")
@click.option("--configcenter-url", envvar=_env("configcenter_url"),
              help="config service URL handed to clients (several instances: comma-separated, clients fail over)")
@click.option("--configcenter-openapi-url", envvar=_env("configcenter_openapi_url"),
              help="Apollo portal URL for the Open API (default: --configcenter-url)")
@click.option("--configcenter-openapi-token", envvar=_env("configcenter_openapi_token"))
@click.option("--configcenter-access-key-secret", envvar=_env("configcenter_access_key_secret"),
              help="deprecated: the config service's shared secret is no longer handed out; turns "
                   "--configcenter-app-keys on")
@click.option("--configcenter-app-keys/--no-configcenter-app-keys", default=False,
              envvar=_env("configcenter_app_keys"),
              help="give each app its own config-center access key, scoped to the namespaces it may read")
@click.option("--apollo-env", default="DEV", envvar=_env("apollo_env"), show_default=True)
@click.option("--apollo-app-id", default="ykafka", envvar=_env("apollo_app_id"), show_default=True)
@click.option("--apollo-cluster", default="default", envvar=_env("apollo_cluster"), show_default=True)
@click.option("--apollo-operator", default="apollo", envvar=_env("apollo_operator"), show_default=True,
              help="Apollo user recorded as the operator of writes")
@click.option("--admin-token", "admin_tokens", multiple=True, envvar=[_env("admin_token"), _env("admin_tokens")],
              help="admin bearer token, optionally name:token; repeat or comma-separate for several")
@click.option("--renew-interval", default=30, type=int, envvar=_env("renew_interval"), show_default=True)
@click.option("--token-ttl", default=600, type=int, envvar=_env("token_ttl"), show_default=True)
@click.option("--default-cluster", envvar=_env("default_cluster"))
@click.option("--auth-window", "auth_window_s", default=300, type=int, envvar=_env("auth_window_s"),
              show_default=True, help="seconds a signed request's timestamp may be off")
@click.option("--max-body-bytes", default=1024 * 1024, type=int, envvar=_env("max_body_bytes"), show_default=True,
              help="largest request body accepted (413 beyond it, before parsing)")
@click.option("--auth-fail-limit", default=20, type=int, envvar=_env("auth_fail_limit"), show_default=True)
@click.option("--auth-fail-window", "auth_fail_window_s", default=60, type=int, envvar=_env("auth_fail_window_s"),
              show_default=True)
@click.option("--auth-switch-ttl", "auth_switch_ttl_s", default=2.0, type=float, envvar=_env("auth_switch_ttl_s"),
              show_default=True)
@click.option("--route-cache", "route_cache_s", default=30.0, type=float, envvar=_env("route_cache_s"),
              show_default=True, help="seconds the config center's route values (what a grant reaches) are trusted")
@click.option("--pipeline-store", envvar=_env("pipeline_store"),
              help="the pipeline's Parquet store (path or URI) served by /v1/admin/aggregates")
@click.option("--kafka-admin-user", envvar=_env("kafka_admin_user"),
              help="the MetaServer's super user on secured clusters (password: YKAFKA_MS_KAFKA_ADMIN_PASSWORD)")
@click.option("--kafka-admin-password-dir", envvar=_env("kafka_admin_password_dir"),
              help="folder of per-cluster super-user passwords, <cluster>.password (0600); a cluster without one "
                   "uses YKAFKA_MS_KAFKA_ADMIN_PASSWORD")
@click.option("--client-retention-days", default=7.0, type=float, envvar=_env("client_retention_days"),
              show_default=True, help="clients not seen for this long leave the inventory")
@click.option("--client-history-days", default=7.0, type=float, envvar=_env("client_history_days"),
              show_default=True, help="client history rows (one per changed report) kept this long")
@click.option("--client-prune-interval", "client_prune_s", default=3600.0, type=float,
              envvar=_env("client_prune_s"), show_default=True,
              help="seconds between prunes of the client inventory (0: never)")
@click.option("--forwarded-allow-ips", envvar=_env("forwarded_allow_ips"),
              help="comma-separated reverse-proxy addresses whose X-Forwarded-For is trusted (default: none)")
@click.option("--sealing-key-file", envvar=_env("sealing_key_file"),
              help="file (0600) holding the key that seals app passwords and signing keys outside the database "
                   "(or the key itself in YKAFKA_MS_SEALING_KEY); unset: derived from the database, with a warning")
@click.option("--sealing-key-previous-file", envvar=_env("sealing_key_previous_file"),
              help="while rotating the sealing key: the previous key's file; every row is re-sealed at start")
@click.option("--kafka-system-users", envvar=_env("kafka_system_users"),
              help="comma-separated SCRAM users of the clusters' own nodes that the reconciler keeps (every other "
                   "user it did not issue is deleted as foreign)")
@click.option("--acl-reconcile-interval", "acl_reconcile_s", default=60.0, type=float, envvar=_env("acl_reconcile_s"),
              show_default=True, help="seconds between ACL reconciles of secured clusters (0: after changes only)")
@click.option("--credential-grace", "credential_grace_s", default=None, type=float,
              envvar=_env("credential_grace_s"),
              help="seconds a rotated app credential keeps working (default: 2 renew intervals + 60)")
@click.option("--console-oidc-issuer", envvar=_env("console_oidc_issuer"),
              help="console single sign-on: the OpenID provider's issuer URL (unset: local users only)")
@click.option("--console-oidc-client-id", envvar=_env("console_oidc_client_id"),
              help="the console's client id at the provider (secret: YKAFKA_MS_CONSOLE_OIDC_CLIENT_SECRET)")
@click.option("--console-oidc-redirect-uri", envvar=_env("console_oidc_redirect_uri"),
              help="https://<console host>/console/sso/callback, as registered at the provider")
@click.option("--console-oidc-scopes", default="openid profile email", envvar=_env("console_oidc_scopes"),
              show_default=True)
@click.option("--console-oidc-claim", default="groups", envvar=_env("console_oidc_claim"), show_default=True,
              help="the claim holding the user's groups or roles")
@click.option("--console-oidc-roles", envvar=_env("console_oidc_roles"),
              help="claim value -> console role: 'ykafka-admins:admin,ykafka-ops:operator,staff:viewer'")
@click.option("--console-oidc-username-claim", default="preferred_username",
              envvar=_env("console_oidc_username_claim"), show_default=True)
@click.option("--workers", default=1, type=int, envvar=_env("workers"), show_default=True)
@click.option("--log-level", default="info", envvar=_env("log_level"), show_default=True)
def serve(admin_tokens: tuple[str, ...], **options: Any) -> None:
    """Serve the MetaServer API."""
    from .app import configure_logging

    os.umask(0o077)  # the database (and its -wal, -shm) holds sealed secrets and audit: owner-only files

    settings = Settings(admin_tokens=parse_admin_tokens(",".join(admin_tokens)),
                        kafka_admin_password=os.environ.get(_env("kafka_admin_password")) or None,
                        sealing_key=os.environ.get(_env("sealing_key")) or None,
                        sealing_key_previous=os.environ.get(_env("sealing_key_previous")) or None,
                        console_oidc_client_secret=os.environ.get(_env("console_oidc_client_secret")) or None,
                        **options)
    configure_logging(settings.log_level)
    # Migrate once before workers fork, then hand the resolved settings to them through the environment.
    from .storage import db

    engine = db.make_engine(settings.db_url)
    db.migrate(engine)
    engine.dispose()
    os.environ.update(settings.to_env())
    uvicorn.run(f"{__package__}.app:create_app_from_env", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers if settings.workers > 1 else None, log_level="warning",
                access_log=False, proxy_headers=bool(settings.forwarded_allow_ips),
                forwarded_allow_ips=settings.forwarded_allow_ips or "",
                http=UpgradeIgnoringProtocol)  # answers Java's `Upgrade: h2c` requests (metaserver/httpproto.py)


if __name__ == "__main__":
    main()
