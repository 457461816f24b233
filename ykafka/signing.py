"""Request signing shared by the SDK and the MetaServer.

The app's secret never travels and is never stored: both sides derive a signing key from it
(PBKDF2, salted with the app id) and sign ``METHOD\\npath\\nsha256(body)\\ntimestamp_ms\\nnonce`` with
HMAC-SHA256. The MetaServer stores only the derived key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

HEADER_APP = "X-Ykafka-App"
HEADER_TIMESTAMP = "X-Ykafka-Timestamp"
HEADER_NONCE = "X-Ykafka-Nonce"
HEADER_SIGNATURE = "X-Ykafka-Signature"
KDF_ITERATIONS = 100_000


def derive_key(app_id: str, secret: str) -> bytes:
    """The signing key for an app; costly on purpose so a leaked key table resists guessing secrets."""
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), f"ykafka:{app_id}".encode(), KDF_ITERATIONS)


def string_to_sign(method: str, path: str, body: bytes, timestamp_ms: str, nonce: str) -> bytes:
    body_hash = hashlib.sha256(body).hexdigest()
    return "\n".join([method.upper(), path, body_hash, timestamp_ms, nonce]).encode()


def sign(key: bytes, method: str, path: str, body: bytes, timestamp_ms: str, nonce: str) -> str:
    digest = hmac.new(key, string_to_sign(method, path, body, timestamp_ms, nonce), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def signed_headers(app_id: str, key: bytes, method: str, path: str, body: bytes) -> dict[str, str]:
    """Headers for one signed request; a fresh nonce and the current time every call."""
    timestamp_ms = str(int(time.time() * 1000))
    nonce = secrets.token_hex(16)
    return {
        HEADER_APP: app_id,
        HEADER_TIMESTAMP: timestamp_ms,
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: sign(key, method, path, body, timestamp_ms, nonce),
    }


def verify(key: bytes, method: str, path: str, body: bytes, timestamp_ms: str, nonce: str,
           signature: str) -> bool:
    expected = sign(key, method, path, body, timestamp_ms, nonce)
    return hmac.compare_digest(expected, signature)
