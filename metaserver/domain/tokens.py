"""Self-verifying bearer tokens: any peer checks one with the key every peer reads from the database.

A token is ``v1.<base64url payload>.<base64url HMAC-SHA256>``; the payload names the app, the client,
the app's key generation (so rotating the secret ends old tokens) and the expiry. Verification costs
one HMAC and no database round trip.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import Engine, select

from ..storage import db
from ..storage.models import server_keys

TOKEN_KEY_NAME = "token-hmac-v1"


@dataclass(frozen=True)
class TokenClaims:
    app_id: str
    client_id: str
    generation: int
    issued_at: float
    expires_at: float


def load_or_create_key(engine: Engine) -> bytes:
    """The shared token key: the first peer to start creates it, every other peer reads the same row."""
    with db.write(engine) as conn:
        db.insert_ignore(conn, server_keys,
                         {"name": TOKEN_KEY_NAME, "value": secrets.token_bytes(32), "created_at": time.time()},
                         ["name"])
        value = conn.execute(select(server_keys.c.value).where(server_keys.c.name == TOKEN_KEY_NAME)).scalar_one()
    return bytes(value)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenCodec:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def issue(self, app_id: str, client_id: str, generation: int, ttl_s: float,
              now: float | None = None) -> tuple[str, float]:
        now = time.time() if now is None else now
        expires_at = round(now + ttl_s, 3)
        payload = json.dumps({"a": app_id, "c": client_id, "g": generation, "i": round(now, 3), "e": expires_at,
                              "n": secrets.token_hex(6)}, separators=(",", ":")).encode()
        body = _b64(payload)
        signature = _b64(hmac.new(self._key, f"v1.{body}".encode(), hashlib.sha256).digest())
        return f"v1.{body}.{signature}", expires_at

    def verify(self, token: str, now: float | None = None) -> TokenClaims | None:
        """The claims of a valid, unexpired token; None for anything else (callers answer a plain 401)."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "v1":
            return None
        expected = _b64(hmac.new(self._key, f"v1.{parts[1]}".encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected, parts[2]):
            return None
        try:
            data = json.loads(_unb64(parts[1]))
            claims = TokenClaims(str(data["a"]), str(data["c"]), int(data["g"]), float(data["i"]), float(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        if claims.expires_at <= (time.time() if now is None else now):
            return None
        return claims
