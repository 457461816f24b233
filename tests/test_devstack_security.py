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
