"""The MetaServer's admin connection to a secured cluster (its super user) and the few calls it makes:
SCRAM users (``alter_user_scram_credentials``) and ACL bindings (``describe/create/delete_acls``).

The super user's name and password come from the MetaServer's settings (``--kafka-admin-user``; the password
per cluster from ``--kafka-admin-password-dir``, else ``YKAFKA_MS_KAFKA_ADMIN_PASSWORD``), never from the registry
or a grant.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from ..settings import Settings
from .acls import Binding

TIMEOUT_S = 10.0
SETTLE_S = 5.0
_ITERATIONS = 8192
_MECHANISMS = {"SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512, "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256}


class BrokerAdminError(RuntimeError):
    """A call to a cluster's brokers failed (unreachable, refused, or the admin credentials are wrong)."""


def admin_password(cluster: str, settings: Settings) -> str | None:
    """The super user's password on ``cluster``: its own file ``<--kafka-admin-password-dir>/<cluster>.password``
    (read at each connection, so a rotated file takes effect at the next pass), else the one
    ``YKAFKA_MS_KAFKA_ADMIN_PASSWORD``. One password per cluster (issue 37): whoever learns one cluster's (a node's
    ``server.properties``, its storage format) cannot administer another."""
    if settings.kafka_admin_password_dir and cluster and "/" not in cluster and not cluster.startswith("."):
        path = Path(settings.kafka_admin_password_dir) / f"{cluster}.password"
        try:
            return path.read_text().strip() or None
        except FileNotFoundError:
            pass
    return settings.kafka_admin_password


def connection(spec: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """librdkafka properties of the MetaServer's super user on a registry entry."""
    props: dict[str, Any] = {"bootstrap.servers": spec["bootstrap_servers"], "socket.timeout.ms": int(TIMEOUT_S * 1000)}
    security = spec.get("security")
    if security:
        password = admin_password(str(spec.get("name") or ""), settings)
        if not (settings.kafka_admin_user and password):
            raise BrokerAdminError("cluster is secured but the MetaServer has no Kafka admin credentials for it "
                                   "(--kafka-admin-user; --kafka-admin-password-dir/<cluster>.password or "
                                   "YKAFKA_MS_KAFKA_ADMIN_PASSWORD)")
        props.update({"security.protocol": security["protocol"], "sasl.mechanism": security["mechanism"],
                      "sasl.username": settings.kafka_admin_user, "sasl.password": password})
        if security.get("ca_pem"):
            props["ssl.ca.pem"] = security["ca_pem"]
    return props


class ClusterAdmin:
    """One cluster's admin client (made per reconcile: clusters come and go with the registry)."""

    def __init__(self, spec: Mapping[str, Any], settings: Settings) -> None:
        self.mechanism = _MECHANISMS[(spec.get("security") or {}).get("mechanism", "SCRAM-SHA-512")]
        self.client = AdminClient(connection(spec, settings))

    def scram_users(self) -> set[str]:
        try:
            found = self.client.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result()  # type: ignore[union-attr]
        except KafkaException as exc:
            raise BrokerAdminError(f"describe SCRAM users: {exc.args[0]}") from None
        return set(found)

    def upsert_users(self, users: Mapping[str, str]) -> None:
        info = ScramCredentialInfo(self.mechanism, _ITERATIONS)
        self._alter([UserScramCredentialUpsertion(u, info, p.encode()) for u, p in users.items()])

    def delete_users(self, users: Iterable[str]) -> None:
        self._alter([UserScramCredentialDeletion(u, self.mechanism) for u in users])

    def _alter(self, alterations: list[Any]) -> None:
        if not alterations:
            return
        for user, future in self.client.alter_user_scram_credentials(alterations, request_timeout=TIMEOUT_S).items():
            try:
                future.result()
            except KafkaException as exc:
                raise BrokerAdminError(f"SCRAM credential of {user}: {exc.args[0]}") from None

    def bindings(self) -> set[Binding]:
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                 AclOperation.ANY, AclPermissionType.ANY)
        try:
            found = self.client.describe_acls(every, request_timeout=TIMEOUT_S).result()
        except KafkaException as exc:
            raise BrokerAdminError(f"describe ACLs: {exc.args[0]}") from None
        return {Binding(b.principal, b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name,
                        b.permission_type.name, b.host) for b in found}

    def create(self, bindings: Iterable[Binding]) -> None:
        wanted = [_acl(b) for b in bindings]
        if wanted:
            self._wait(self.client.create_acls(wanted, request_timeout=TIMEOUT_S), "create ACL")

    def delete(self, bindings: Iterable[Binding]) -> None:
        filters = [_acl(b, AclBindingFilter) for b in bindings]
        if filters:
            self._wait(self.client.delete_acls(filters, request_timeout=TIMEOUT_S), "delete ACL")

    def settle(self, bindings: Iterable[Binding], users: Iterable[str], timeout_s: float = SETTLE_S) -> bool:
        """Wait until the brokers answer with ``bindings`` and ``users``: the controller acknowledges a change
        before the brokers apply it, and a client granted at once was refused in that window (seen in CI)."""
        want_bindings, want_users = set(bindings), set(users)
        deadline = time.monotonic() + timeout_s
        while True:
            if want_bindings <= self.bindings() and want_users <= self.scram_users():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def ensure_topics(self, names: Iterable[str]) -> list[str]:
        """Create those of ``names`` the cluster lacks (with its default partitions and replication), and return
        them: an app may write the telemetry topics but not create them, so on a secured cluster the first client
        report of every app was refused ("Topic authorization failed") and the console showed no client at all."""
        try:
            have = set(self.client.list_topics(timeout=TIMEOUT_S).topics)
        except KafkaException as exc:
            raise BrokerAdminError(f"list topics: {exc.args[0]}") from None
        missing = [name for name in names if name not in have]
        if missing:
            futures = self.client.create_topics([NewTopic(name, -1, -1) for name in missing],
                                                request_timeout=TIMEOUT_S)
            for name, future in futures.items():
                try:
                    future.result()
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another MetaServer was first
                        raise BrokerAdminError(f"create topic {name}: {exc.args[0]}") from None
        return missing

    @staticmethod
    def _wait(futures: Mapping[Any, Any], what: str) -> None:
        for binding, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                raise BrokerAdminError(f"{what} {binding}: {exc.args[0]}") from None


def _acl(b: Binding, kind: type = AclBinding) -> Any:
    return kind(ResourceType[b.resource], b.name, ResourcePatternType[b.pattern], b.principal, b.host,
                AclOperation[b.operation], AclPermissionType[b.permission])
