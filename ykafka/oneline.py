"""One-line answers to the errors a user fixes themselves: configuration, identity, connection (exit 2).

The ``ykafka`` command and the samples run under :func:`one_line_errors`: such an error prints
``error: WHAT. Fix: HOW`` on stderr and exits 2, rather than a traceback. ``--debug`` or ``YKAFKA_DEBUG=1``
lets the exception through with its traceback. Any other error is a bug and always shows its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests

from ykafka.errors import AuthError, ConfigError, MetaServerUnavailable

EXIT_USER_ERROR = 2
DEV_ENV_HINT = "after `ykafka dev up`, run `source .ykafka/dev.env` (it sets YKAFKA_METASERVER, YKAFKA_APP_ID " \
               "and YKAFKA_APP_SECRET)"


def debug_requested(argv: list[str] | None = None) -> bool:
    flag = os.environ.get("YKAFKA_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
    return flag or "--debug" in (sys.argv if argv is None else argv)


def explain(exc: BaseException) -> str | None:
    """``error: ... Fix: ...`` for a user-fixable error, else None (a bug: show the traceback)."""
    from ykafka.admin.client import AdminError  # the admin client imports nothing of this module

    what = " ".join(str(exc).split())[:400]
    if isinstance(exc, MetaServerUnavailable):
        fix = "start the stack (`ykafka dev up`) or point YKAFKA_METASERVER at a running MetaServer"
    elif isinstance(exc, AuthError):
        fix = ("check YKAFKA_APP_ID and YKAFKA_APP_SECRET (the local stack's are in .ykafka/dev.env; "
               "`ykafka admin apps rotate APP` issues a new secret)")
    elif isinstance(exc, ConfigError):
        fix = DEV_ENV_HINT if "no MetaServer configured" in what else "correct the setting named above"
    elif isinstance(exc, AdminError) and exc.status == 0:
        what = " ".join(exc.message.split(": ", 1)[0].split())
        fix = "start the stack (`ykafka dev up`) or pass --url / set YKAFKA_METASERVER"
    elif isinstance(exc, AdminError) and exc.status in (401, 403):
        what = f"the MetaServer refused the admin token (HTTP {exc.status}): {exc.message}"
        fix = "pass --token or set YKAFKA_ADMIN_TOKEN (the local stack's is in .ykafka/dev.env)"
    elif isinstance(exc, requests.ConnectionError):
        what = f"cannot connect: {type(exc).__name__}"
        fix = "start the stack (`ykafka dev up`, `ykafka dev status` shows it) or check the URL"
    else:
        return None
    return f"error: {what.rstrip('.')}. Fix: {fix}"


@contextmanager
def one_line_errors(debug: bool | None = None) -> Iterator[None]:
    """Turn a user-fixable error into one line on stderr and exit 2 (unless debugging)."""
    try:
        yield
    except Exception as exc:
        line = explain(exc)
        if line is None or (debug_requested() if debug is None else debug):
            raise
        sys.stderr.write(line + "\n")  # no click: samples run on the client alone
        raise SystemExit(EXIT_USER_ERROR) from None


def run(main: Callable[[], Any]) -> None:
    """Entry point of a sample: ``--debug`` is taken out of argv; exits with ``main()``'s code."""
    debug = debug_requested()
    sys.argv = [a for a in sys.argv if a != "--debug"]
    with one_line_errors(debug):
        code = main()
    sys.exit(code if isinstance(code, int) else 0)
