"""The sealing key outside the database (issue 37): refused when others can read it, and the documented
migration and rotation re-seal every row, on a real SQLite database migrated as the MetaServer does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select

from metaserver.domain import credentials, sealing
from metaserver.domain.tokens import load_or_create_key
from metaserver.settings import Settings
from metaserver.storage import db
from metaserver.storage.models import apps, kafka_principals
from ykafka import signing


def _key_file(path: Path, mode: int = 0o600) -> Path:
    path.write_bytes(Fernet.generate_key())
    path.chmod(mode)
    return path


def test_a_key_file_others_can_read_or_a_malformed_key_is_refused_with_the_fix(tmp_path: Path) -> None:
    loose = _key_file(tmp_path / "loose.key", 0o644)
    with pytest.raises(sealing.SealingKeyError, match=r"readable by others \(mode 644\): chmod 600 it"):
        sealing.load(Settings(sealing_key_file=str(loose)), b"k" * 32)
    with pytest.raises(sealing.SealingKeyError, match="is not a Fernet key"):
        sealing.load(Settings(sealing_key="not-a-key"), b"k" * 32)
    assert not sealing.load(Settings(), b"k" * 32).outside  # no key: the old derivation (warned at start)


def test_rows_sealed_before_are_resealed_under_the_outside_key_then_rotated_to_a_new_one(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'ms.db'}")
    db.migrate(engine)
    db_key = load_or_create_key(engine)
    legacy = sealing.load(Settings(), db_key)  # how a MetaServer before issue 37 sealed
    raw_key = signing.derive_key("shop", "the-secret")
    now = time.time()
    with db.write(engine) as conn:
        conn.execute(apps.insert().values(app_id="shop", signing_key=raw_key, key_generation=1, description="",
                                          default_cluster=None, enabled=True, acl={}, created_at=now, updated_at=now))
        credentials.ensure(conn, "shop", ["dc-a"], legacy.box, now)
        sealed_before = conn.execute(select(kafka_principals.c.password)).scalar_one()
    password = legacy.box.decrypt(sealed_before.encode())

    first = _key_file(tmp_path / "first.key")
    sealer = sealing.load(Settings(sealing_key_file=str(first)), db_key)
    assert sealing.reseal(engine, sealer, db_key) == {"passwords": 1, "signing_keys": 1,
                                                         "configcenter_keys": 0, "unreadable": 0}
    assert sealing.reseal(engine, sealer, db_key) == {"passwords": 0, "signing_keys": 0,
                                                         "configcenter_keys": 0, "unreadable": 0}
    with db.read(engine) as conn:
        stored_pw = conn.execute(select(kafka_principals.c.password)).scalar_one()
        stored_key = bytes(conn.execute(select(apps.c.signing_key)).scalar_one())
    with pytest.raises(InvalidToken):
        legacy.box.decrypt(stored_pw.encode())  # the database's own key opens nothing any more
    assert sealer.box.decrypt(stored_pw.encode()) == password and sealer.signing_key(stored_key) == raw_key
    assert sealer.signing_key(raw_key) is None  # an unsealed key in the table is never trusted once sealing is on
    assert sealer.token_key != db_key

    second = _key_file(tmp_path / "second.key")
    rotating = sealing.load(Settings(sealing_key_file=str(second), sealing_key_previous_file=str(first)), db_key)
    assert sealing.reseal(engine, rotating, db_key) == {"passwords": 1, "signing_keys": 1,
                                                         "configcenter_keys": 0, "unreadable": 0}
    after = sealing.load(Settings(sealing_key_file=str(second)), db_key)  # the previous key dropped
    with db.read(engine) as conn:
        assert after.box.decrypt(conn.execute(select(kafka_principals.c.password)).scalar_one().encode()) == password
        assert after.signing_key(bytes(conn.execute(select(apps.c.signing_key)).scalar_one())) == raw_key
