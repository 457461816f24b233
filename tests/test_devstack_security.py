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


def test_each_secured_cluster_has_its_own_super_user_password(tmp_path: Path) -> None:
    """Issue 37: one super-user password served every secured cluster of a stack, so whoever read it from one
    cluster's storage format or node could administer all. Now each cluster gets its own (0600, one file each);
    a cluster's storage is formatted with its own only, and the MetaServer connects to each with its own file and
    with nothing to another cluster that has none."""
    import stat

    from metaserver.kafka import admin as kafka_admin
    from metaserver.settings import Settings
    from ykafka.devstack import security as kafka_security
    from ykafka.devstack.services import secure

    config = tmp_path / "dev.yaml"
    config.write_text(f"home: {tmp_path / 'home'}\nclusters:\n"
                      "  dc-a: {port: 19092, broker: kafka, security: sasl_plaintext}\n"
                      "  dc-b: {port: 19192, broker: kafka, security: sasl_plaintext}\n")
    cfg = StackConfig.load(config, env={})
    home = Path(cfg.home)
    for spec in cfg.clusters.values():
        secure(spec, home)
    folder = kafka_security.admin_password_dir(home)
    passwords = {name: (folder / f"{name}.password").read_text() for name in ("dc-a", "dc-b")}
    assert len(set(passwords.values())) == 2 and all(len(p) >= 32 for p in passwords.values())
    assert {stat.S_IMODE((folder / f"{n}.password").stat().st_mode) for n in passwords} == {0o600}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not (home / "secrets" / "kafka-admin.password").exists()
    for name, other in (("dc-a", "dc-b"), ("dc-b", "dc-a")):
        formatted = " ".join(cfg.clusters[name].kafka.format_args)
        assert passwords[name] in formatted and passwords[other] not in formatted

    settings = Settings(kafka_admin_user=kafka_security.ADMIN_USER, kafka_admin_password_dir=str(folder))
    security = {"protocol": "SASL_PLAINTEXT", "mechanism": kafka_security.MECHANISM, "ca_pem": None}
    for name in passwords:
        spec = {"name": name, "bootstrap_servers": "127.0.0.1:1", "security": security}
        assert kafka_admin.connection(spec, settings)["sasl.password"] == passwords[name]
    with pytest.raises(kafka_admin.BrokerAdminError, match="no Kafka admin credentials for it"):
        kafka_admin.connection({"name": "dc-c", "bootstrap_servers": "127.0.0.1:1", "security": security}, settings)
    with pytest.raises(kafka_admin.BrokerAdminError):  # a name reaching out of the folder reads nothing
        kafka_admin.connection({"name": "../kafka-admin/dc-a", "bootstrap_servers": "x:1", "security": security},
                               settings)
