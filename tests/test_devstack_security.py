"""``ykafka dev up`` with a secured Kafka cluster (``security: sasl_ssl`` in configs/dev.yaml, or
``YKAFKA_DEV_SECURITY``): certificates and the super user's password made at the first ``up`` under the
stack's home (0600), the MetaServer started as that super user, the cluster registered with its CA; an
address-only client is refused while the seeded demo app works through its own principal (issue 28)."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import new_stack
from ykafka import Producer, kafka_security
from ykafka.devstack import StackConfig, StackError


def test_security_needs_kafka_and_a_known_mode(tmp_path: Path) -> None:
    config = tmp_path / "dev.yaml"
    config.write_text("clusters:\n  dc-a: {port: 19092, broker: tansu, security: sasl_ssl}\n")
    with pytest.raises(StackError, match="needs broker kafka"):
        StackConfig.load(config, env={})
    config.write_text("clusters:\n  dc-a: {port: 19092, broker: kafka, security: tls-maybe}\n")
    with pytest.raises(StackError, match="security must be one of none, sasl_plaintext, sasl_ssl"):
        StackConfig.load(config, env={})


def test_a_secured_dev_stack_refuses_strangers_and_serves_the_demo_app(tmp_path: Path) -> None:
    st = new_stack(tmp_path / "stack", broker="kafka")
    spec = st.cfg.clusters["dc-a"]
    spec.security, spec.standby = "sasl_ssl", None
    st.cfg.clusters = {"dc-a": spec}
    st.cfg.default_cluster = "dc-a"
    try:
        st.up()
        home = st.home
        password_file = home / "secrets" / "kafka-admin.password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        assert stat.S_IMODE((home / "tls" / "broker-key.pem").stat().st_mode) == 0o600
        registered = st.admin("GET", "/v1/admin/clusters/dc-a").json()
        security = registered["security"]
        assert security["protocol"] == "SASL_SSL" and "BEGIN CERTIFICATE" in security["ca_pem"]
        assert password_file.read_text() not in (home / "dev.env").read_text()  # never handed to apps
        topic = f"demo.{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": st.bootstrap(), **kafka_security.client_properties(
            protocol="SASL_SSL", username=kafka_security.ADMIN_USER, password=password_file.read_text(),
            ca_pem=security["ca_pem"])})
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(30)
        errors: list[object] = []
        stranger = RawProducer({"bootstrap.servers": st.bootstrap(), "message.timeout.ms": 5000})
        stranger.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
        stranger.flush(10)
        assert len(errors) == 1 and errors[0] is not None
        delivered: list[object] = []
        with Producer(st.client_config()) as producer:
            own = producer.runtime.cluster("dc-a").rdkafka()["sasl.username"]
            assert own.startswith(f"app.{st.cfg.app_id}@dc-a")
            for i in range(20):
                producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _msg: delivered.append(err))
            assert producer.flush(30) == 0
        assert delivered == [None] * 20
    finally:
        st.down()
