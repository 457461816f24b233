"""Apollo access-key signatures for config-service calls (apollo-core `Signature`, configservice
`ClientAuthenticationFilter`).

A client of an app that has access keys sends `Authorization: Apollo {appId}:{signature}` and
`Timestamp: <epoch ms>`; the signature is base64(HMAC-SHA1(secret, timestamp + "\\n" + pathWithQuery)) over
the raw (still percent-encoded) request path and query, exactly as the Java filter sees them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qs

HTTP_HEADER_TIMESTAMP = "Timestamp"
AUTHORIZATION_FORMAT = "Apollo {app_id}:{signature}"
DEFAULT_TOLERANCE_S = 60.0

_APP_ID = re.compile(r"^[0-9a-zA-Z_-]+[0-9a-zA-Z_.-]*$")
_PREFIXES = ("/configs/", "/configfiles/json/", "/configfiles/raw/", "/configfiles/")


def signature(timestamp: str, path_with_query: str, secret: str) -> str:
    """The signature string a client puts after `appId:`."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{path_with_query}".encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def build_headers(app_id: str, path_with_query: str, secret: str, now_ms: int | None = None) -> dict[str, str]:
    """The headers an Apollo client sends for a signed request (used by tests, samples and the SDK)."""
    ts = str(now_ms if now_ms is not None else int(time.time() * 1000))
    return {
        "Authorization": AUTHORIZATION_FORMAT.format(app_id=app_id, signature=signature(ts, path_with_query, secret)),
        HTTP_HEADER_TIMESTAMP: ts,
    }


def is_config_service_path(path: str) -> bool:
    return path.startswith(_PREFIXES) or path == "/notifications" or path.startswith("/notifications/")


def extract_app_id(path: str, query: str) -> str | None:
    """The appId a config-service request is for, as AccessKeyUtil finds it; None when absent or invalid."""
    app_id: str | None = None
    for prefix in _PREFIXES:
        if path.startswith(prefix):
            rest = path[len(prefix):]
            app_id = rest.split("/", 1)[0] if "/" in rest else None
            break
    else:
        if path == "/notifications" or path.startswith("/notifications/"):
            values = parse_qs(query).get("appId")
            app_id = values[0] if values else None
    if not app_id or not _APP_ID.match(app_id):
        return None
    return app_id


def check_timestamp(timestamp: str | None, tolerance_s: float = DEFAULT_TOLERANCE_S,
                    now_ms: int | None = None) -> bool:
    try:
        ts = int(timestamp or "")
    except ValueError:
        return False
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    return abs(now - ts) < tolerance_s * 1000


def check_authorization(authorization: str | None, timestamp: str | None, path_with_query: str,
                        secrets: Iterable[str]) -> bool:
    """True when the Authorization header carries a signature made with one of the app's secrets."""
    return signed_with(authorization, timestamp, path_with_query, list(secrets)) is not None


def signed_with(authorization: str | None, timestamp: str | None, path_with_query: str,
                secrets: Sequence[str]) -> int | None:
    """The index of the secret the Authorization header's signature was made with, or None (as Apollo, every
    secret is tried; which one verified decides what the request may read: keyscope.py)."""
    if not authorization or timestamp is None:
        return None
    parts = authorization.split(":")
    if len(parts) < 2:
        return None
    given = parts[1]
    for index, secret in enumerate(secrets):
        if hmac.compare_digest(given, signature(timestamp, path_with_query, secret)):
            return index
    return None
