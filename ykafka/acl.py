"""ACL patterns shared by the MetaServer (which stores them) and the SDK (which enforces them), and the one
decision both enforcers derive from: the SDK's :func:`check` and the broker's ACL bindings
(``metaserver/kafka/acls.py``) both come from :func:`permissions`.

A pattern is an exact name, a prefix ending in ``*`` (``orders.*`` matches ``orders.eu``), or ``*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ykafka.events import TELEMETRY_TOPICS

Operation = Literal["produce", "consume", "group"]
OPERATIONS: tuple[Operation, ...] = ("produce", "consume", "group")


def matches(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def allowed(patterns: Iterable[str], name: str) -> bool:
    return any(matches(pattern, name) for pattern in patterns)


def check(acl: Mapping[str, Iterable[str]], operation: Operation, name: str) -> bool:
    """Whether ``acl`` (``{"produce": [...], "consume": [...], "group": [...]}``) allows the operation: exactly
    what the broker's bindings of the same table allow (:func:`permissions`, :func:`permits`), so a group's own
    retry and dead-letter topics (:func:`retry_prefix`) are consumable and producible too."""
    resource, right = OPERATION_RIGHTS[operation]
    return permits(permissions(acl), resource, name, right)


_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
NAME_RULE = "1-128 characters of letters, digits, '.', '_', '-', not starting with '.'"


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal app id, cluster, topic or group name, or None when it is.

    One rule for all of them: Kafka's legal characters (and its refusal of ``.`` / ``..``), Apollo's app-id
    rule (no leading dot), and a length every store holds. Names are checked before anything is stored.
    """
    if not 1 <= len(name) <= 128:
        return f"length {len(name)}: {NAME_RULE}"
    if not set(name) <= _LEGAL:
        return f"illegal characters: {NAME_RULE}"
    if name.startswith("."):
        return f"starts with '.': {NAME_RULE}"
    return None


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not an ACL pattern (a name, a prefix of one ending in ``*``, or ``*`` alone), or None.

    The name (or prefix) follows :func:`name_problem`, except that a prefix may start with ``.``.
    """
    if pattern == "*":
        return None
    prefix = pattern.endswith("*")
    body = pattern[:-1] if prefix else pattern
    if "*" in body:
        return "'*' may only end a prefix or stand alone"
    problem = name_problem(body)
    if problem is not None and not (prefix and body and problem.startswith("starts with '.'")):
        return problem
    return None


def valid_pattern(pattern: str) -> bool:
    """A name, a prefix of one ending in ``*``, or ``*`` alone."""
    return pattern_problem(pattern) is None


# --- one decision, two enforcers -----------------------------------------------------------------------------
# The SDK's check (``check``) and the broker's bindings (metaserver/kafka/acls.py ``app_bindings``) are both
# derived from :func:`permissions`; ``permits`` decides as Kafka's StandardAuthorizer does, so what the SDK
# allows is what the broker allows (tests/test_acl_decision.py: a hypothesis property over random tables).

#: every retry and dead-letter topic of the consumer framework lives under this prefix; no app topic may be
#: named inside it and no produce / consume pattern but ``*`` may reach into it (:func:`topic_pattern_problem`)
RETRY_NAMESPACE = "__ykafka-retry."
#: what follows the app id in each of its transactional ids; app ids never contain it (:func:`name_problem`),
#: so app ``shop``'s ids (``shop/...``) and app ``shop-billing``'s (``shop-billing/...``) never share a prefix
TRANSACTIONAL_SEPARATOR = "/"
#: the SDK's telemetry topics, shared (``__ykafka_trace``) and per app (``__ykafka_trace.<app>``,
#: ``ykafka.events.app_topic``): no app reads them (a DENY READ on each prefix, which beats even a consume
#: ``*``), each app writes only its own, and no produce / consume pattern but ``*`` reaches into them
TELEMETRY_NAMESPACES = TELEMETRY_TOPICS

Resource = Literal["TOPIC", "GROUP", "TRANSACTIONAL_ID"]
#: the Kafka right each SDK operation needs
OPERATION_RIGHTS: dict[str, tuple[Resource, str]] = {
    "produce": ("TOPIC", "WRITE"), "consume": ("TOPIC", "READ"), "group": ("GROUP", "READ")}
#: the Kafka operations each ACL entry grants on its own resource
_GRANTED: dict[str, tuple[Resource, tuple[str, ...]]] = {
    "produce": ("TOPIC", ("WRITE", "DESCRIBE")),
    "consume": ("TOPIC", ("READ", "DESCRIBE")),
    "group": ("GROUP", ("READ",)),
}
#: a group's own retry and dead-letter topics: it reads and writes them and creates them on first use
_RETRY_OPERATIONS = ("READ", "WRITE", "DESCRIBE", "CREATE")
#: operations Kafka's authorizer treats as implying DESCRIBE
_IMPLY_DESCRIBE = frozenset({"READ", "WRITE", "DELETE", "ALTER"})


@dataclass(frozen=True, order=True)
class Permission:
    """One right as Kafka expresses it: an operation on a resource named by a LITERAL name (``*``: every name)
    or a PREFIXED one."""

    resource: str
    name: str
    pattern: str  # LITERAL or PREFIXED
    operation: str
    permission: str = "ALLOW"  # or DENY, which beats every ALLOW of the same operation


def resource_pattern(pattern: str) -> tuple[str, str]:
    """(name, pattern type) of an ACL pattern: ``*`` → Kafka's wildcard, ``p*`` → PREFIXED ``p``, else LITERAL."""
    if pattern == "*":
        return "*", "LITERAL"
    if pattern.endswith("*"):
        return pattern[:-1], "PREFIXED"
    return pattern, "LITERAL"


def retry_prefix(group: str) -> str:
    """The prefix of every retry and dead-letter topic of ``group``: the group's length, then the group, so no
    other group's prefix starts with it (``billing`` → ``__ykafka-retry.7.billing.``; ``billing.x`` →
    ``__ykafka-retry.9.billing.x.``) and no app topic (refused inside :data:`RETRY_NAMESPACE`) falls in."""
    return f"{RETRY_NAMESPACE}{len(group)}.{group}."


def transactional_prefix(app_id: str) -> str:
    """What every transactional id of ``app_id`` starts with: ``<app id>/``."""
    return f"{app_id}{TRANSACTIONAL_SEPARATOR}"


def permissions(acl: Mapping[str, Iterable[str]], app_id: str | None = None,
                always_write: Iterable[str] = ()) -> frozenset[Permission]:
    """Every right ``acl`` grants, as Kafka bindings express them. A group pattern (``billing-*``, ``*``) grants
    the groups only: retry and dead-letter rights come from a literal group name alone, under its own
    :func:`retry_prefix`, so a group grant never widens topic rights. With ``app_id`` and any produce right:
    the transactional ids under :func:`transactional_prefix`. ``always_write``: topics this app writes whatever
    its table says (its own telemetry topics, ``ykafka.events.app_topics``). Always: DENY READ on every
    telemetry topic (:data:`TELEMETRY_NAMESPACES`), so not even a consume ``*`` reads another app's reports."""
    out: set[Permission] = set()
    for operation, (resource, granted) in _GRANTED.items():
        for pattern in acl.get(operation, ()):
            name, kind = resource_pattern(pattern)
            out.update(Permission(resource, name, kind, op) for op in granted)
    for pattern in acl.get("group", ()):
        name, kind = resource_pattern(pattern)
        if kind == "LITERAL" and name != "*":
            out.update(Permission("TOPIC", retry_prefix(name), "PREFIXED", op) for op in _RETRY_OPERATIONS)
    if app_id is not None and acl.get("produce"):
        out.update(Permission("TRANSACTIONAL_ID", transactional_prefix(app_id), "PREFIXED", op)
                   for op in ("WRITE", "DESCRIBE"))
    for topic in always_write:
        out.update(Permission("TOPIC", topic, "LITERAL", op) for op in ("WRITE", "DESCRIBE"))
    out.update(Permission("TOPIC", name, "PREFIXED", "READ", "DENY") for name in TELEMETRY_NAMESPACES)
    return frozenset(out)


def permits(rights: Iterable[Permission], resource: str, name: str, operation: str) -> bool:
    """Whether ALLOW bindings ``rights`` let ``operation`` on ``resource`` ``name`` through, as Kafka's
    ``StandardAuthorizer`` decides: LITERAL matches the name or is ``*``, PREFIXED matches a name starting with
    it; READ, WRITE, DELETE and ALTER imply DESCRIBE; a matching DENY of the operation itself (or ALL) wins."""
    rights = tuple(rights)
    for right in rights:
        if right.permission == "DENY" and right.resource == resource and right.operation in (operation, "ALL") \
                and _names(right, name):
            return False
    for right in rights:
        if right.permission != "ALLOW" or right.resource != resource:
            continue
        if right.operation != operation and not (operation == "DESCRIBE" and right.operation in _IMPLY_DESCRIBE):
            continue
        if _names(right, name):
            return True
    return False


def _names(right: Permission, name: str) -> bool:
    return (right.pattern == "LITERAL" and right.name in (name, "*")) or \
        (right.pattern == "PREFIXED" and name.startswith(right.name))


def may_read_config(acl: Mapping[str, Iterable[str]], kind: str, name: str = "",
                    clusters: Iterable[str] = ()) -> bool:
    """Whether an app with ``acl`` may read the hot-config namespace of scope ``kind`` (``global``, ``cluster``,
    ``group``, ``topic``; ``ykafka.catalog.ScopeKind``) ``name``: the config service's check of a per-app access
    key (metaserver/configcenter/keyscope.py). The same decision as the broker's: a topic the app may produce
    or consume (its group's retry and dead-letter topics too), a group it may join, a cluster it can reach
    (``clusters``, from its grant); ``global`` is everyone's."""
    if kind == "global":
        return True
    if kind == "cluster":
        return name in set(clusters)
    if kind == "topic":
        return check(acl, "produce", name) or check(acl, "consume", name)
    if kind == "group":
        return check(acl, "group", name)
    return False


def topic_pattern_problem(pattern: str) -> str | None:
    """Why a produce or consume pattern may not be saved, or None: besides :func:`pattern_problem`, no pattern
    but ``*`` may reach into :data:`RETRY_NAMESPACE` (a consume ``_*`` would read every group's retries) or
    into the telemetry topics (:data:`TELEMETRY_NAMESPACES`: a produce ``__ykafka_clients.billing`` would
    speak for app ``billing``)."""
    problem = pattern_problem(pattern)
    if problem is not None or pattern == "*":
        return problem
    name, kind = resource_pattern(pattern)

    def inside(namespace: str) -> bool:
        return name.startswith(namespace) or (kind == "PREFIXED" and namespace.startswith(name))

    if inside(RETRY_NAMESPACE):
        return f"reaches into {RETRY_NAMESPACE}*, the consumer groups' retry and dead-letter topics"
    reached = next((namespace for namespace in TELEMETRY_NAMESPACES if inside(namespace)), None)
    if reached is not None:
        return f"reaches into {reached}*, the apps' telemetry topics (each app writes only its own)"
    return None
