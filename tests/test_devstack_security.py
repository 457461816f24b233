"""``ykafka dev up`` with a secured Kafka cluster (``security: sasl_ssl`` in configs/dev.yaml, or
``YKAFKA_DEV_SECURITY``): the settings it accepts. A secured stack itself runs in tests/test_samples.py
(``samples/broker_security.py``: an address-only client refused, the demo app through its own principal)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ykafka.devstack import StackConfig, StackError


def test_security_needs_kafka_and_a_known_mode(tmp_path: Path) -> None:
    config = tmp_path / "dev.yaml"
    config.write_text("clusters:\n  dc-a: {port: 19092, broker: tansu, security: sasl_ssl}\n")
    with pytest.raises(StackError, match="needs broker kafka"):
        StackConfig.load(config, env={})
    config.write_text("clusters:\n  dc-a: {port: 19092, broker: kafka, security: tls-maybe}\n")
    with pytest.raises(StackError, match="security must be one of none, sasl_plaintext, sasl_ssl"):
        StackConfig.load(config, env={})


def test_a_secured_stack_never_runs_with_the_public_default_tokens(tmp_path: Path) -> None:
    """``dev-admin-token`` once created an app consuming ``*`` on a secured stack, and ``dev-openapi-token``
    turned ``auth.enabled`` off (issue 37): with a secured cluster both become random, kept 0600."""
    import stat

    from ykafka.devstack import Stack
    from ykafka.devstack.config import DEFAULT_ADMIN_TOKEN, DEFAULT_OPENAPI_TOKEN

    config = tmp_path / "dev.yaml"
    config.write_text(f"home: {tmp_path / 'home'}\n"
                      "clusters:\n  dc-a: {port: 19092, broker: kafka, security: sasl_ssl}\n")
    cfg = StackConfig.load(config, env={})
    assert (cfg.admin_token, cfg.openapi_token) == (DEFAULT_ADMIN_TOKEN, DEFAULT_OPENAPI_TOKEN)
    first = Stack(cfg)
    assert cfg.admin_token != DEFAULT_ADMIN_TOKEN and cfg.openapi_token != DEFAULT_OPENAPI_TOKEN
    assert len(cfg.admin_token) >= 32 and cfg.admin_token != cfg.openapi_token
    for name in ("metaserver-admin.token", "configcenter-openapi.token"):
        assert stat.S_IMODE((first.home / "secrets" / name).stat().st_mode) == 0o600
    again = StackConfig.load(config, env={})
    Stack(again)
    assert (again.admin_token, again.openapi_token) == (cfg.admin_token, cfg.openapi_token)  # kept across restarts
    config.write_text(f"home: {tmp_path / 'open'}\nclusters:\n  dc-a: {{port: 19092, broker: tansu}}\n")
    open_cfg = StackConfig.load(config, env={})
    Stack(open_cfg)
    assert open_cfg.admin_token == DEFAULT_ADMIN_TOKEN  # the open stack: unchanged (README says what it protects)
