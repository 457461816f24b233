"""ACL patterns shared by the MetaServer (which stores them) and the SDK (which enforces them).

A pattern is an exact name, a prefix ending in ``*`` (``orders.*`` matches ``orders.eu``), or ``*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

Operation = Literal["produce", "consume", "group"]
OPERATIONS: tuple[Operation, ...] = ("produce", "consume", "group")


def matches(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def allowed(patterns: Iterable[str], name: str) -> bool:
    return any(matches(pattern, name) for pattern in patterns)


def check(acl: Mapping[str, Iterable[str]], operation: Operation, name: str) -> bool:
    """Whether ``acl`` (``{"produce": [...], "consume": [...], "group": [...]}``) allows the operation."""
    return allowed(acl.get(operation, ()), name)


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
