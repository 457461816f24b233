"""Secrets at rest: the sealing key lives outside the database, so a copy of the database alone yields no app's
Kafka password, no app's signing key and no bearer token (issue 37).

What is sealed (Fernet, AES-128-CBC + HMAC-SHA256) under the *sealing key*:

* each app principal's Kafka password (``ms_kafka_principals.password``);
* each app's request-signing key (``ms_apps.signing_key``, the PBKDF2 of its secret the HMAC signature needs);
* each app's own config-center access key (``ms_configcenter_keys.secret``, domain/configkeys.py).

Design choice: the signing keys are *sealed with the outside key* rather than replaced by Ed25519 public
keys. The SDK's HMAC request signature (``ykafka.signing``) and every deployed client stay as they are, and the
MetaServer must hold an outside key for the Kafka passwords anyway; the cost is that whoever holds the database
*and* the key can sign, which is true of any design where the server can hand out passwords.

The bearer-token key is derived from the sealing key and the database's token key together, so a database copy
cannot mint a token that renews into a grant either.

The key comes from ``--sealing-key-file`` (a file holding one Fernet key, refused unless 0600 or stricter) or
``YKAFKA_MS_SEALING_KEY``; every peer needs the same one. Rotation: start every peer with the new key and the
old one as ``--sealing-key-previous-file`` / ``YKAFKA_MS_SEALING_KEY_PREVIOUS``; at start each peer re-seals
every row under the new key (:func:`reseal`, idempotent), after which the previous key can be dropped. Without
any sealing key the MetaServer runs as before issue 37 (the key derived from the database, a warning at start):
the open local stack and old deployments keep working, and say so.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import Engine, delete, select, update

from ..settings import Settings
from ..storage import db
from ..storage.models import apps, configcenter_keys, kafka_principals

log = structlog.get_logger("metaserver.domain.sealing")

#: how long an unsealed signing key is (``ykafka.signing.derive_key``: SHA-256 PBKDF2)
RAW_SIGNING_KEY_BYTES = 32


class SealingKeyError(RuntimeError):
    """The sealing key is missing, malformed or readable by others; the message says which and how to fix it."""


class Box(Protocol):
    """What seals and unseals (a Fernet or a MultiFernet)."""

    def encrypt(self, data: bytes) -> bytes: ...

    def decrypt(self, token: bytes | str, ttl: int | None = None) -> bytes: ...


def legacy_box(token_key: bytes) -> Fernet:
    """The cipher before issue 37: derived from the database's own token key (a database copy opens it)."""
    import base64

    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"ykafka-kafka-credentials:" + token_key).digest()))


def _read_key(path: str) -> bytes:
    file = Path(path)
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
    except OSError as exc:
        raise SealingKeyError(f"sealing key file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise SealingKeyError(f"sealing key file {path} is readable by others (mode {mode:o}): chmod 600 it")
    return file.read_bytes().strip()


def _fernet(raw: bytes, where: str) -> Fernet:
    try:
        return Fernet(raw)
    except (ValueError, TypeError):
        hint = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
        raise SealingKeyError(f"{where} is not a Fernet key (32 bytes, url-safe base64; make one: {hint})") from None


def new_key_file(path: Path) -> Path:
    """Write a new sealing key to ``path`` (0600, its folder 0700) unless one is there; returns ``path``."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "wb") as out:
        out.write(Fernet.generate_key())
    return path


@dataclass
class Sealer:
    """The configured sealing: ``box`` seals and unseals (current key first, then the previous one);
    ``outside`` says whether the key is outside the database."""

    box: Box
    outside: bool
    token_key: bytes  # the bearer tokens' HMAC key
    current: bytes | None = None  # the current outside key (None in legacy mode)

    def signing_key(self, stored: bytes) -> bytes | None:
        """The signing key an app row stores: unsealed, or None when it cannot be (a raw key where sealed ones are
        required, or sealed under a key this MetaServer lacks)."""
        if not self.outside:
            return stored
        if len(stored) == RAW_SIGNING_KEY_BYTES:
            return None  # never trust an unsealed key once sealing is on (reseal converts them at start)
        try:
            return self.box.decrypt(stored)
        except InvalidToken:
            return None

    def seal_signing_key(self, key: bytes) -> bytes:
        return self.box.encrypt(key) if self.outside else key


def load(settings: Settings, db_token_key: bytes) -> Sealer:
    """The sealing the settings configure (see the module's docstring)."""
    current = settings.sealing_key or (_read_key(settings.sealing_key_file) if settings.sealing_key_file else None)
    if not current:
        log.warning("sealing key derived from the database: a copy of the database yields every app's Kafka "
                    "password and signing key; give --sealing-key-file or YKAFKA_MS_SEALING_KEY (docs/metaserver.md)")
        return Sealer(legacy_box(db_token_key), False, db_token_key)
    raw = current.encode() if isinstance(current, str) else current
    keys = [_fernet(raw, "the sealing key")]
    previous = settings.sealing_key_previous or (
        _read_key(settings.sealing_key_previous_file) if settings.sealing_key_previous_file else None)
    if previous:
        keys.append(_fernet(previous.encode() if isinstance(previous, str) else previous, "the previous sealing key"))
    token_key = hashlib.sha256(b"ykafka-tokens:" + raw + b":" + db_token_key).digest()
    return Sealer(MultiFernet(keys), True, token_key, raw)


def reseal(engine: Engine, sealer: Sealer, db_token_key: bytes) -> dict[str, int]:
    """Bring every sealed row under the current outside key: passwords sealed under the database-derived key or
    the previous key, and raw or previously sealed signing keys. Idempotent; every peer may run it at start.
    Returns how many rows changed (and how many could not be opened: those principals are re-issued by the
    reconciler, those apps need ``rotate-secret``)."""
    counts = {"passwords": 0, "signing_keys": 0, "configcenter_keys": 0, "unreadable": 0}
    if not sealer.outside or not isinstance(sealer.box, MultiFernet) or sealer.current is None:
        return counts
    box = sealer.box
    first = Fernet(sealer.current)
    legacy = legacy_box(db_token_key)
    with db.write(engine) as conn:
        for username, sealed in conn.execute(select(kafka_principals.c.username, kafka_principals.c.password)).all():
            token = sealed.encode()
            fresh = _reseal_one(token, first, box, legacy)
            if fresh is None:
                counts["unreadable"] += 1
            elif fresh != token:
                conn.execute(update(kafka_principals).where(kafka_principals.c.username == username)
                             .values(password=fresh.decode()))
                counts["passwords"] += 1
        for app_id, stored in conn.execute(select(apps.c.app_id, apps.c.signing_key)).all():
            stored = bytes(stored)
            if len(stored) == RAW_SIGNING_KEY_BYTES:
                fresh_key: bytes | None = box.encrypt(stored)
            else:
                fresh_key = _reseal_one(stored, first, box, None)
            if fresh_key is None:
                counts["unreadable"] += 1
            elif fresh_key != stored:
                conn.execute(update(apps).where(apps.c.app_id == app_id).values(signing_key=fresh_key))
                counts["signing_keys"] += 1
        for app_id, sealed in conn.execute(select(configcenter_keys.c.app_id, configcenter_keys.c.secret)).all():
            token = sealed.encode()
            fresh = _reseal_one(token, first, box, legacy)
            if fresh is None:  # minted again at the app's next grant
                conn.execute(delete(configcenter_keys).where(configcenter_keys.c.app_id == app_id))
                counts["unreadable"] += 1
            elif fresh != token:
                conn.execute(update(configcenter_keys).where(configcenter_keys.c.app_id == app_id)
                             .values(secret=fresh.decode()))
                counts["configcenter_keys"] += 1
    if any(counts.values()):
        log.info("secrets re-sealed under the current sealing key", **counts)
    return counts


def _reseal_one(token: bytes, first: Fernet, box: MultiFernet, legacy: Fernet | None) -> bytes | None:
    try:
        first.decrypt(token)
        return token  # already under the current key
    except InvalidToken:
        pass
    try:
        return box.rotate(token)
    except InvalidToken:
        pass
    if legacy is not None:
        try:
            return first.encrypt(legacy.decrypt(token))
        except InvalidToken:
            pass
    return None
