"""Broker-side security: on a secured cluster only the MetaServer's grant opens the door, and only to the ACL.

Against a dev stack whose cluster is secured (``YKAFKA_DEV_SECURITY=sasl_ssl ykafka dev up --broker kafka``, or
``security: sasl_ssl`` on a cluster in configs/dev.yaml; then ``source .ykafka/dev.env``):

    python samples/broker_security.py [--topic secured-demo] [--cluster dc-a] [--count 20]

It shows the app's own principal and its ACL bindings (desired against in force), has the platform create the
topic (the console's topic requests do this; here with the local stack's super user from
``.ykafka/secrets``), shows that a client knowing only the address is refused, that the KRaft controller
listener (the client port + 100 on the local stack) drops an anonymous CreateAcls unanswered and refuses the
app's own credentials, then writes with a ykafka Producer and reads everything back with the app's own
credentials.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer as RawProducer

from ykafka import Producer
from ykafka.admin import AdminClient
from ykafka.admin.topics import create_topic
from ykafka.devstack import security as kafka_security
from ykafka.devstack import wire
from ykafka.logs import configure
from ykafka.oneline import run


def refused(bootstrap: str, topic: str) -> str:
    """What a client that knows only the address gets (it never authenticates)."""
    errors: list[Any] = []
    stranger = RawProducer({"bootstrap.servers": bootstrap, "message.timeout.ms": 4000})
    stranger.produce(topic, b"let me in", on_delivery=lambda err, _msg: errors.append(err))
    stranger.flush(8)
    return errors[0].name() if errors and errors[0] is not None else "DELIVERED"


def controller_refuses(host: str, port: int, app_user: str, app_password: str) -> str:
    """What the controller listener answers an anonymous CreateAcls granting everyone every topic (before
    issue 37 it was a PLAINTEXT listener whose anonymous user was a super user: it said yes), and what it
    answers the app's own SCRAM credentials."""
    with wire.Probe(host, port) as probe:
        anonymous = probe.request("create_acls", principal="User:*", topic="*")
    with wire.Probe(host, port) as probe:
        app = probe.login("SCRAM-SHA-512", app_user, app_password)
    shown = {wire.CLOSED: "connection closed", wire.NONE: "ACCEPTED",
             wire.UNSUPPORTED_SASL_MECHANISM: "mechanism refused", wire.SASL_AUTHENTICATION_FAILED: "login refused"}
    return f"anonymous CreateAcls: {shown.get(anonymous, anonymous)}; the app's credentials: {shown.get(app, app)}"


def read_back(props: dict[str, Any], topic: str, expected: int) -> int:
    consumer = RawConsumer({**props, "group.id": f"secured-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for msg in consumer.consume(num_messages=100, timeout=1.0) if msg.error() is None)
    finally:
        consumer.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default=f"secured-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--cluster", default="dc-a")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--controller-port", type=int, default=None,
                        help="the KRaft controller listener (default: the bootstrap port + 100, the local stack's)")
    parser.add_argument("--home", default=os.environ.get("YKAFKA_DEV_HOME", ".ykafka"), help="the dev stack's home")
    args = parser.parse_args()
    configure(os.environ.get("YKAFKA_LOG_LEVEL", "warning"))
    admin = AdminClient(os.environ.get("YKAFKA_METASERVER", "http://127.0.0.1:7070"),
                        os.environ.get("YKAFKA_ADMIN_TOKEN"), operator="samples/broker_security")
    spec = admin.get_cluster(args.cluster)
    security = spec["security"]
    if not security:
        raise SystemExit(f"cluster {args.cluster} is open: start the stack with YKAFKA_DEV_SECURITY=sasl_ssl")
    print(f"{args.cluster}: {security['protocol']} {security['mechanism']}")
    platform = {"bootstrap.servers": spec["bootstrap_servers"], **kafka_security.client_properties(
        protocol=security["protocol"], username=kafka_security.ADMIN_USER,
        password=kafka_security.admin_password(Path(args.home).resolve(), args.cluster), ca_pem=security["ca_pem"])}
    create_topic(platform, args.topic, 1)
    print(f"a client with only the address: refused ({refused(spec['bootstrap_servers'], args.topic)})")
    host, _, port = spec["bootstrap_servers"].split(",")[0].rpartition(":")
    controller = args.controller_port or int(port) + 100
    delivered = 0

    def counted(err: Any, _msg: Any) -> None:
        nonlocal delivered
        delivered += err is None

    with Producer({}) as producer:  # identity from the environment (dev.env)
        app_id = producer.runtime.app_id
        own = producer.runtime.cluster(args.cluster).rdkafka()
        print(f"the app's own principal: User:{own['sasl.username']}")
        print(f"the controller listener {host}:{controller}: "
              f"{controller_refuses(host, controller, own['sasl.username'], own['sasl.password'])}")
        for i in range(args.count):
            producer.produce(args.topic, f"message {i}".encode(), on_delivery=counted)
        producer.flush(30)
    view = next(c for c in admin.app_kafka(app_id)["clusters"] if c["cluster"] == args.cluster)
    print(f"bindings in force: {len(view['in_force'])} of {len(view['desired'])} desired, "
          f"missing {len(view['missing'])}, extra {len(view['extra'])}")
    seen = read_back(own, args.topic, args.count)
    ok = delivered == seen == args.count
    print(f"{delivered} sent, {seen} read back with the app's own credentials: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
