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


def valid_pattern(pattern: str) -> bool:
    body = pattern[:-1] if pattern.endswith("*") else pattern
    return "*" not in body and len(pattern) <= 249 and (pattern == "*" or bool(body))
