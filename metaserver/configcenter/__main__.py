"""Command line of the config center.

    python -m metaserver.configcenter serve --host 127.0.0.1 --port 8080 --db PATH.sqlite|URL
        [--longpoll-timeout 60] [--openapi-token TOKEN] [--log-level info] [--log-json]
        [--scan-interval 0.5] [--no-notify] [--max-parked-polls N]

--db is a SQLite file or a SQLAlchemy URL (``postgresql+psycopg://user@host/db``); several instances may
share one database (releases reach the others by release-message scanning, woken by LISTEN/NOTIFY on
PostgreSQL). The schema is migrated to head at start (Alembic, version table ``cc_alembic_version``).
    python -m metaserver.configcenter token create --db PATH [--token T] [--app-id A ...] [--name N]
    python -m metaserver.configcenter accesskey add --db PATH --app-id A [--secret S]

Every serve flag also reads an env var (YKAFKA_CC_HOST, YKAFKA_CC_PORT, YKAFKA_CC_DB,
YKAFKA_CC_LONGPOLL_TIMEOUT, YKAFKA_CC_OPENAPI_TOKEN, YKAFKA_CC_LOG_LEVEL, YKAFKA_CC_SCAN_INTERVAL,
YKAFKA_CC_NOTIFY=0, YKAFKA_CC_MAX_PARKED_POLLS); a flag wins over its env var.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import structlog

from .longpoll import DEFAULT_POLL_RETRY_AFTER_S

log = structlog.get_logger(__name__)


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _retry_after(value: str) -> int:
    """Whole seconds from 1 to 300 (argparse type): what a refused long poll's ``Retry-After`` says."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected whole seconds from 1 to 300") from None
    if not 1 <= number <= 300:
        raise argparse.ArgumentTypeError("expected whole seconds from 1 to 300")
    return number


def _count(value: str) -> int:
    """A count of 0 or more (argparse type): a negative or non-numeric value is a usage error."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a whole number >= 0") from None
    if number < 0:
        raise argparse.ArgumentTypeError("expected a whole number >= 0")
    return number


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}",
                                     description="Apollo-compatible config service (ykafka's embedded config center)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the config service")
    serve.add_argument("--host", default=_env("YKAFKA_CC_HOST", "127.0.0.1"), help="env YKAFKA_CC_HOST")
    serve.add_argument("--port", type=int, default=int(_env("YKAFKA_CC_PORT", "8080") or 8080),
                       help="env YKAFKA_CC_PORT")
    serve.add_argument("--db", default=_env("YKAFKA_CC_DB"), help="SQLite file or database URL, env YKAFKA_CC_DB")
    serve.add_argument("--longpoll-timeout", type=float,
                       default=float(_env("YKAFKA_CC_LONGPOLL_TIMEOUT", "60") or 60),
                       help="seconds a notification long poll is held, env YKAFKA_CC_LONGPOLL_TIMEOUT")
    serve.add_argument("--openapi-token", default=_env("YKAFKA_CC_OPENAPI_TOKEN"),
                       help="seed this Open API token (all apps), env YKAFKA_CC_OPENAPI_TOKEN")
    serve.add_argument("--log-level", default=_env("YKAFKA_CC_LOG_LEVEL", "info"), help="env YKAFKA_CC_LOG_LEVEL")
    serve.add_argument("--advertise-url", default=_env("YKAFKA_CC_ADVERTISE_URL"),
                       help="URL /services/config lists for this process (default http://HOST:PORT), "
                            "env YKAFKA_CC_ADVERTISE_URL")
    serve.add_argument("--require-access-key", action="store_true",
                       default=_env("YKAFKA_CC_REQUIRE_ACCESS_KEY", "0") not in ("0", ""),
                       help="refuse every unsigned config-service read (401), also of apps without access keys "
                            "(the secured stack: clients sign with their per-app key), env "
                            "YKAFKA_CC_REQUIRE_ACCESS_KEY=1")
    serve.add_argument("--log-json", action="store_true", help="JSON log lines")
    serve.add_argument("--scan-interval", type=float, default=float(_env("YKAFKA_CC_SCAN_INTERVAL", "0.5") or 0.5),
                       help="seconds between release-message scans (other instances' releases), "
                            "env YKAFKA_CC_SCAN_INTERVAL")
    serve.add_argument("--no-notify", dest="notify", action="store_false",
                       default=_env("YKAFKA_CC_NOTIFY", "1") != "0",
                       help="PostgreSQL: do not LISTEN for other instances' releases (scan only), "
                            "env YKAFKA_CC_NOTIFY=0")
    serve.add_argument("--max-parked-polls", type=_count, default=_env("YKAFKA_CC_MAX_PARKED_POLLS", "0"),
                       help="long polls parked at most; more are answered 503 + Retry-After at once so the "
                            "client polls another instance (0: from the open-file limit, about half of it), "
                            "env YKAFKA_CC_MAX_PARKED_POLLS")
    serve.add_argument("--poll-retry-after", type=_retry_after,
                       default=_env("YKAFKA_CC_POLL_RETRY_AFTER", str(DEFAULT_POLL_RETRY_AFTER_S)),
                       help="seconds a refused long poll is told to wait (Retry-After) once every instance "
                            "refused it: ykafka's clients poll again within 1.25 times this, so a release "
                            "reaches a watcher no instance could park within that (default "
                            f"{DEFAULT_POLL_RETRY_AFTER_S}), env YKAFKA_CC_POLL_RETRY_AFTER")
    serve.add_argument("--loop", choices=["asyncio", "uvloop"], default=_env("YKAFKA_CC_LOOP", "asyncio"),
                       help="event loop; asyncio accepts a burst of new connections at once (a failover moves "
                            "every client here), uvloop one per loop turn, env YKAFKA_CC_LOOP")

    token = sub.add_parser("token", help="Open API tokens").add_subparsers(dest="action", required=True)
    create = token.add_parser("create", help="create an Open API token and print it")
    create.add_argument("--db", default=_env("YKAFKA_CC_DB"), help="SQLite file or database URL, env YKAFKA_CC_DB")
    create.add_argument("--token", default=None, help="the token value (default: random)")
    create.add_argument("--app-id", action="append", default=[],
                        help="limit the token to this app (repeatable; default: every app)")
    create.add_argument("--name", default="cli", help="a label for the token")

    accesskey = sub.add_parser("accesskey", help="config-service access keys").add_subparsers(
        dest="action", required=True)
    add = accesskey.add_parser("add", help="add an access-key secret to an app and print it")
    add.add_argument("--db", default=_env("YKAFKA_CC_DB"), help="SQLite file or database URL, env YKAFKA_CC_DB")
    add.add_argument("--app-id", required=True)
    add.add_argument("--secret", default=None, help="the secret (default: random 32 hex chars)")
    return parser


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    from types import FrameType

    import uvicorn

    from ykafka.logs import configure

    from ..httpproto import UpgradeIgnoringProtocol
    from .app import create_app
    from .center import ConfigCenter

    configure(args.log_level, args.log_json)
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    app = create_app(args.db, args.longpoll_timeout, args.openapi_token,
                     advertise_url=args.advertise_url or f"http://{host}:{args.port}",
                     scan_interval=args.scan_interval, notify=args.notify, max_parked=args.max_parked_polls,
                     poll_retry_after=args.poll_retry_after,
                     require_access_key=args.require_access_key)
    center: ConfigCenter = app.state.center

    class Server(uvicorn.Server):
        """Answers parked long polls with 304 on SIGTERM/SIGINT, so shutdown does not wait out the timeout."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            center.closing = True  # new polls are refused from now on, whatever the loop is doing
            with contextlib.suppress(RuntimeError):  # no loop running: nothing is parked
                asyncio.get_running_loop().call_soon_threadsafe(center.begin_shutdown)

    # asyncio by default: libuv (>= 1.45, under uvloop) accepts one connection per loop turn, so after a failover
    # the survivor left ~700 of 1,000 moving clients in its accept queue for ~2 s while it served the others;
    # asyncio accepts up to the backlog per turn (docs/benchmarks.md, bench/controlplane_failover.py)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False, loop=args.loop,
                            backlog=8192, timeout_keep_alive=75, timeout_graceful_shutdown=1,
                            h11_max_incomplete_event_size=256 * 1024,  # long polls list many namespaces
                            http=UpgradeIgnoringProtocol)  # answers Java's `Upgrade: h2c` requests
    log.info("configcenter.serving", host=args.host, port=args.port, db=center.store.engine.url.render_as_string())
    Server(config).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.db:
        sys.stderr.write("error: --db (or YKAFKA_CC_DB) is required\n")
        return 2
    if args.command == "serve":
        os.umask(0o077)  # its database (and -wal, -shm) holds tokens and access keys: owner-only files
        return _serve(args)

    from .store import Store

    store = Store(args.db)
    try:
        if args.command == "token":
            sys.stdout.write(store.create_token(args.token, args.name, all_apps=not args.app_id,
                                                app_ids=args.app_id) + "\n")
        else:
            sys.stdout.write(store.add_access_key(args.app_id, args.secret) + "\n")
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
