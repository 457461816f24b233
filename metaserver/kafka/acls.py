"""The MetaServer's ACL table as Kafka ACL bindings: what the broker must allow each app principal.

The rights are ``ykafka.acl.permissions``, the same function the SDK's ACL check decides with (one decision,
two enforcers): produce → WRITE and DESCRIBE on the topic; consume → READ and DESCRIBE on the topic; group →
READ on the group, and, for a literal group name only, READ, WRITE, DESCRIBE and CREATE on its retry and
dead-letter topics (``__ykafka-retry.<len>.<group>.``: a group pattern never widens topic rights);
producers → WRITE and DESCRIBE on transactional ids starting ``<app id>/``; every app → WRITE and DESCRIBE
on its own telemetry topics only (``__ykafka_clients.<app>``, ``_metrics.<app>``, ``_trace.<app>``: one app
cannot write a report, metric or trace into another's) and DENY READ on every telemetry topic (the MetaServer's
and the pipeline's principals read them; not even an app granted consume ``*`` does). A name is a LITERAL pattern,
``prefix*`` a PREFIXED one, ``*`` Kafka's literal wildcard. Pure data: the reconciler
(metaserver/kafka/reconciler.py) compares these with ``describe_acls`` and repairs the difference (bindings
of the older naming are no longer desired, so its first pass migrates them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ykafka import acl as acl_patterns
from ykafka import events

#: principals the MetaServer issues and therefore owns on a cluster: ``User:app.<app>@<cluster>.g<n>``
PRINCIPAL_PREFIX = "User:app."
#: the shared telemetry topics (the open stack's clients and the pipeline's lag sampler write them; on a
#: secured cluster no app may): the reconciler creates them, beside each app's own (:func:`telemetry_topics`)
TELEMETRY_TOPICS = events.TELEMETRY_TOPICS
#: Kafka's "every user" principal: a hand-made binding for it opens the cluster, so the reconciler owns it too
EVERYONE = "User:*"

@dataclass(frozen=True, order=True)
class Binding:
    """One ALLOW binding from any host (the only kind the MetaServer writes)."""

    principal: str
    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID
    name: str
    pattern: str  # LITERAL or PREFIXED
    operation: str
    permission: str = "ALLOW"
    host: str = "*"

    def as_json(self) -> dict[str, str]:
        return asdict(self)

    def show(self) -> str:
        """One line for the audit log and the console: ``User:x WRITE TOPIC:LITERAL:t`` (``DENY READ ...``)."""
        deny = "DENY " if self.permission == "DENY" else ""
        return f"{self.principal} {deny}{self.operation} {self.resource}:{self.pattern}:{self.name}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Binding:
        return cls(**{k: str(v) for k, v in data.items()})


def principal(username: str) -> str:
    return f"User:{username}"


def username(app_id: str, cluster: str, generation: int) -> str:
    """The SCRAM user of an app on a cluster; the generation changes at each credential rotation."""
    return f"app.{app_id}@{cluster}.g{generation}"


def user_cluster(user: str) -> str | None:
    """The registry cluster an issued SCRAM user belongs to, or None when the MetaServer did not issue it
    (app ids hold no '@', so the part after it is ``<cluster>.g<n>``)."""
    if not user.startswith("app.") or "@" not in user:
        return None
    cluster, sep, generation = user.split("@", 1)[1].rpartition(".g")
    return cluster if sep and generation.isdigit() else None


def owned(principal_name: str, cluster: str, siblings: Iterable[str] = ()) -> bool:
    """Whether the reconciler of ``cluster`` owns bindings of this principal (deletes them when not desired):
    every principal on a managed cluster, whoever made it (a user or binding the MetaServer did not issue is
    foreign and goes), except those it issued for ``siblings``, other registry names of the same Kafka
    cluster, whose own reconcilers keep them."""
    if not principal_name.startswith("User:"):
        return True
    issued_for = user_cluster(principal_name[len("User:"):])
    return issued_for is None or issued_for == cluster or issued_for not in set(siblings)


def foreign(principal_name: str, registered: Iterable[str]) -> bool:
    """Whether the MetaServer never issued this principal for any ``registered`` cluster (a hand-made user,
    ``User:*``, ``User:ANONYMOUS``): found on a managed cluster, it is deleted and alerted."""
    name = principal_name[len("User:"):] if principal_name.startswith("User:") else principal_name
    issued_for = user_cluster(name)
    return issued_for is None or issued_for not in set(registered)


def resource_pattern(pattern: str) -> tuple[str, str]:
    """(name, pattern type) of an ACL pattern: ``*`` → Kafka's wildcard, ``p*`` → PREFIXED ``p``, else LITERAL."""
    return acl_patterns.resource_pattern(pattern)


def pattern_problem(pattern: str) -> str | None:
    """Why Kafka's ACLs cannot express ``pattern`` (so it is refused when saved, never enforced only in the
    SDK), or None."""
    problem = acl_patterns.pattern_problem(pattern)
    if problem is None:
        return None
    return (f"{problem}; Kafka ACLs match only a literal name, a prefix (written 'prefix*') or every name "
            f"('*')")


def telemetry_topics(app_id: str) -> list[str]:
    """App ``app_id``'s own telemetry topics, the only ones it may write (``ykafka.events.app_topic``)."""
    return [events.app_topic(kind, app_id) for kind in events.TELEMETRY_KINDS]


def app_bindings(user: str, app_id: str, acl: Mapping[str, Iterable[str]]) -> set[Binding]:
    """The bindings one app principal needs for ``acl``: ``ykafka.acl.permissions`` as bindings, with WRITE on
    the app's own telemetry topics."""
    who = principal(user)
    return {Binding(who, p.resource, p.name, p.pattern, p.operation, p.permission)
            for p in acl_patterns.permissions(acl, app_id, telemetry_topics(app_id))}


def topic_pattern_problem(pattern: str) -> str | None:
    """Why a produce or consume pattern may not be saved (``ykafka.acl.topic_pattern_problem``), or None."""
    problem = acl_patterns.topic_pattern_problem(pattern)
    if problem is None or not problem.startswith("reaches into"):
        return pattern_problem(pattern)
    return problem
