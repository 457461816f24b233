"""Console single sign-on: OpenID Connect, authorization code flow with PKCE (S256).

The provider is found by discovery (``<issuer>/.well-known/openid-configuration``); Authlib builds the
authorization URL and exchanges the code (with the PKCE verifier and the client secret); joserfc checks the ID
token against the provider's JWKS: signature, issuer, audience (and ``azp``), expiry and nonce. The login's
state, nonce and verifier travel in a short-lived cookie of the browser that started it, so any MetaServer peer
finishes a login another one started and a callback that browser did not start is refused.

The user's role comes from one claim (``groups`` by default, read from the ID token, else from userinfo):
each value is looked up in the configured mapping and the highest role found wins; no match, no login.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import requests
import structlog
from authlib.integrations.requests_client import OAuth2Session
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ..settings import Settings
from .models import ROLES
from .users import RANK

log = structlog.get_logger("metaserver.console.sso")

COOKIE = "ykafka_sso"
COOKIE_PATH = "/console/sso"
#: how long a started login may take at the provider before the console forgets it
LOGIN_TTL_S = 600
USER_PREFIX = "sso:"
_TIMEOUT_S = 10.0
_METADATA_TTL_S = 3600.0
_LEEWAY_S = 60
#: asymmetric signatures only: an HS256 token keyed by the client secret or an unsigned one is refused
_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"]
#: the OAuth 2.0 / OIDC error codes a provider may send back; anything else is shown as "error"
_KNOWN_ERRORS = frozenset({
    "access_denied", "invalid_request", "unauthorized_client", "unsupported_response_type", "invalid_scope",
    "server_error", "temporarily_unavailable", "interaction_required", "login_required", "account_selection_required",
    "consent_required", "invalid_request_uri", "invalid_request_object", "request_not_supported",
    "request_uri_not_supported", "registration_not_supported"})
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
_USERNAME_BAD = re.compile(r"[^A-Za-z0-9._@-]")


class SsoError(Exception):
    """A login that cannot finish; the message is ours (never the request's or the provider's text)."""

    def __init__(self, message: str, status: int = 400, keep_login: bool = False) -> None:
        self.status = status
        self.keep_login = keep_login  # a forged callback must not cancel the login this browser has under way
        super().__init__(message)


@dataclass(frozen=True)
class Identity:
    username: str  # ``sso:<name>``, never a local user's name (local names cannot hold ':')
    role: str
    subject: str
    claim_source: str  # "id_token" or "userinfo": where the role claim was read


def parse_roles(text: str | None) -> dict[str, str]:
    """``"ykafka-admins:admin,ops:operator"`` → claim value → role (the last ':' splits, so values may hold ':')."""
    mapping: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        value, sep, role = part.rpartition(":")
        if not sep or not value.strip() or role.strip() not in ROLES:
            raise ValueError(f"console_oidc_roles: {part!r} is not '<claim value>:<{'|'.join(ROLES)}>'")
        mapping[value.strip()] = role.strip()
    return mapping


def role_for(claim: Any, mapping: dict[str, str]) -> str | None:
    """The highest role any of the claim's values maps to (a list, or one string, possibly space-separated)."""
    values = claim.split() if isinstance(claim, str) else claim if isinstance(claim, list) else []
    roles = [mapping[v] for v in values if isinstance(v, str) and v in mapping]
    return max(roles, key=lambda r: RANK[r]) if roles else None


def enabled(settings: Settings) -> bool:
    return bool(settings.console_oidc_issuer)


class OidcClient:
    """One provider, as the settings name it; discovery and JWKS cached (the JWKS refetched for an unknown key)."""

    def __init__(self, settings: Settings) -> None:
        missing = [name for name in ("console_oidc_issuer", "console_oidc_client_id", "console_oidc_redirect_uri",
                                     "console_oidc_roles") if not getattr(settings, name)]
        if missing:
            raise ValueError(f"console single sign-on needs {', '.join(missing)}")
        self.issuer = str(settings.console_oidc_issuer).rstrip("/")
        self.client_id = str(settings.console_oidc_client_id)
        self.client_secret = settings.console_oidc_client_secret
        self.redirect_uri = str(settings.console_oidc_redirect_uri)
        self.scopes = settings.console_oidc_scopes
        self.claim = settings.console_oidc_claim
        self.username_claim = settings.console_oidc_username_claim
        self.roles = parse_roles(settings.console_oidc_roles)
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None

    # --- the provider's documents ----------------------------------------------------------------

    def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            resp = requests.get(url, timeout=_TIMEOUT_S, headers={"Accept": "application/json"})
            resp.raise_for_status()
            doc = resp.json()
        except (requests.RequestException, ValueError) as exc:
            log.warning("identity provider unreachable", what=what, url=url, error=str(exc)[:300])
            raise SsoError("the identity provider could not be reached; try again later", 502) from exc
        if not isinstance(doc, dict):
            raise SsoError("the identity provider answered something that is not OpenID Connect", 502)
        return doc

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if self._metadata is not None and time.monotonic() - self._metadata_at < _METADATA_TTL_S:
                return self._metadata
        doc = self._get_json(self.issuer + "/.well-known/openid-configuration", "discovery")
        if str(doc.get("issuer", "")).rstrip("/") != self.issuer or not all(
                isinstance(doc.get(k), str) for k in ("authorization_endpoint", "token_endpoint", "jwks_uri")):
            log.warning("discovery document does not match the configured issuer", issuer=self.issuer,
                        answered=str(doc.get("issuer"))[:200])
            raise SsoError("the identity provider's discovery document does not match the configured issuer", 502)
        with self._lock:
            self._metadata, self._metadata_at = doc, time.monotonic()
        return doc

    def _keyset(self, refresh: bool) -> KeySet:
        if self._keys is None or refresh:
            doc = self._get_json(self.metadata()["jwks_uri"], "jwks")
            try:
                self._keys = KeySet.import_key_set(doc)  # type: ignore[arg-type]
            except (JoseError, ValueError, KeyError, TypeError) as exc:
                raise SsoError("the identity provider's signing keys could not be read", 502) from exc
        return self._keys

    # --- the flow ----------------------------------------------------------------------------------

    def _session(self) -> OAuth2Session:
        return OAuth2Session(self.client_id, self.client_secret, scope=self.scopes, redirect_uri=self.redirect_uri,
                             code_challenge_method="S256", token_endpoint_auth_method=self._auth_method())

    def _auth_method(self) -> str:
        """How the code exchange authenticates: none for a public client (PKCE alone), else HTTP basic unless the
        provider only takes the secret in the form."""
        if not self.client_secret:
            return "none"
        supported = self.metadata().get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        return "client_secret_post" if "client_secret_basic" not in supported and "client_secret_post" in supported \
            else "client_secret_basic"

    def start(self) -> tuple[str, str]:
        """(the provider's authorization URL, the cookie value holding this login's state, nonce and verifier)."""
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        with self._session() as oauth:
            url, _ = oauth.create_authorization_url(self.metadata()["authorization_endpoint"], state=state,
                                                    nonce=nonce, code_verifier=verifier)
        return url, f"{state}.{nonce}.{verifier}"

    def finish(self, params: dict[str, str], cookie: str | None) -> Identity:
        """Check the callback against the browser's cookie, exchange the code, verify the ID token, map the role."""
        started = (cookie or "").split(".")
        if len(started) != 3 or not all(_TOKEN_RE.match(part) for part in started):
            raise SsoError("no login is in progress in this browser (it expired or was already used); "
                           "start again from the login page")
        state, nonce, verifier = started
        if not hmac.compare_digest(params.get("state", "").encode(), state.encode()):
            raise SsoError("the answer does not belong to the login this browser started (state mismatch); "
                           "start again from the login page", keep_login=True)
        if "error" in params:
            code = params["error"] if params["error"] in _KNOWN_ERRORS else "error"
            raise SsoError(f"the identity provider did not sign you in ({code})", 403 if code == "access_denied"
                           else 400)
        if params.get("iss") and params["iss"].rstrip("/") != self.issuer:  # RFC 9207 mix-up defence
            raise SsoError("the answer comes from another identity provider than the configured one")
        code = params.get("code", "")
        if not code or len(code) > 2048:
            raise SsoError("the identity provider's answer holds no authorization code")
        token = self._exchange(code, verifier)
        claims = self._verify_id_token(token.get("id_token"), nonce)
        value, source = claims.get(self.claim), "id_token"
        if value is None and self.metadata().get("userinfo_endpoint") and token.get("access_token"):
            value, source = self._userinfo(str(token["access_token"]), str(claims["sub"])).get(self.claim), "userinfo"
        role = role_for(value, self.roles)
        subject = str(claims["sub"])
        name = claims.get(self.username_claim)
        name = _USERNAME_BAD.sub("_", str(name if isinstance(name, str) and name else subject))
        username = (USER_PREFIX + name)[:64]
        if role is None:
            log.info("sso login without a console role", subject=subject, claim=self.claim)
            raise SsoError(f"your account is not in any group this console maps to a role ('{self.claim}' claim); "
                           "ask an administrator", 403)
        return Identity(username, role, subject, source)

    def _exchange(self, code: str, verifier: str) -> dict[str, Any]:
        try:
            with self._session() as oauth:
                token = oauth.fetch_token(self.metadata()["token_endpoint"], grant_type="authorization_code",
                                          code=code, code_verifier=verifier, timeout=_TIMEOUT_S)
        except requests.RequestException as exc:
            log.warning("token endpoint unreachable", error=str(exc)[:300])
            raise SsoError("the identity provider could not be reached; try again later", 502) from exc
        except Exception as exc:  # noqa: BLE001 - Authlib raises its OAuthError (or ValueError) for any refusal
            log.info("code exchange refused", error=str(exc)[:300])
            raise SsoError("the identity provider refused the authorization code (expired, used or tampered); "
                           "start again from the login page") from exc
        return dict(token)

    def _verify_id_token(self, id_token: Any, nonce: str) -> dict[str, Any]:
        if not isinstance(id_token, str) or not id_token:
            raise SsoError("the identity provider sent no ID token")
        try:
            try:
                decoded = jwt.decode(id_token, self._keyset(refresh=False), algorithms=_ALGORITHMS)
            except JoseError:  # a key rotated since the JWKS was read: read it once more
                decoded = jwt.decode(id_token, self._keyset(refresh=True), algorithms=_ALGORITHMS)
            claims = dict(decoded.claims)
            jwt.JWTClaimsRegistry(leeway=_LEEWAY_S, iss={"essential": True, "value": self.issuer},
                                  sub={"essential": True}, exp={"essential": True},
                                  nonce={"essential": True, "value": nonce}).validate(claims)
        except (JoseError, ValueError, KeyError, TypeError) as exc:  # whatever a malformed token makes joserfc raise
            log.warning("id token refused", error=str(exc)[:300])
            raise SsoError("the identity provider's ID token did not verify (signature, issuer, expiry or nonce)") \
                from exc
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        if self.client_id not in audiences or (len(audiences) > 1 and claims.get("azp") != self.client_id):
            log.warning("id token for another audience", aud=str(audience)[:200])
            raise SsoError("the identity provider's ID token was issued to another application")
        return claims

    def _userinfo(self, access_token: str, subject: str) -> dict[str, Any]:
        try:
            resp = requests.get(self.metadata()["userinfo_endpoint"], timeout=_TIMEOUT_S,
                                headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"})
            resp.raise_for_status()
            info = resp.json()
        except (requests.RequestException, ValueError) as exc:
            log.warning("userinfo unreachable", error=str(exc)[:300])
            raise SsoError("the identity provider could not be reached; try again later", 502) from exc
        if not isinstance(info, dict) or info.get("sub") != subject:
            raise SsoError("the identity provider's userinfo is for another user")
        return info
