"""Hot-config push: validate against the key catalog first, then write and release through Apollo.

Nothing is written unless every key passes ``ykafka.catalog.parse`` at the target scope, so a rejected
value never reaches the config center. Values are stored in their canonical rendering (``-1`` → ``all``).
With ``ips`` the change goes out as an Apollo gray release of the namespace to just those clients.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import Connection

from ykafka import catalog
from ykafka.catalog import Scope
from ykafka.errors import InvalidConfigValue

from . import clients
from .apollo import ApolloError, ApolloOpenApi

log = structlog.get_logger("metaserver.domain.hotconfig")
#: the config service's answers one read of a scope needs, asked at once (current_with_releases)
_ASK = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hotconfig-read")
_LABEL = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class ConfigRejected(Exception):
    """One or more keys failed validation; ``errors`` maps key → reason."""

    def __init__(self, errors: dict[str, str], message: str = "invalid config values") -> None:
        self.errors = errors
        self.message = message
        super().__init__(f"{message}: {errors}")


@dataclass
class PushPlan:
    scope: Scope
    namespace: str
    set: dict[str, str]
    delete: list[str]
    ips: list[str] | None
    changes: list[dict[str, Any]] = field(default_factory=list)
    labels: list[str] | None = None  # a gray release to clients carrying one of these labels (and/or ``ips``)

    @property
    def gray(self) -> bool:
        return self.ips is not None or self.labels is not None


def parse_scope(text: str) -> Scope:
    try:
        return Scope.parse(text)
    except ValueError as exc:
        raise ConfigRejected({"scope": str(exc)}, "invalid scope") from None


def validate(scope_text: str, values: dict[str, Any], delete: list[str],
             ips: list[str] | None, labels: list[str] | None = None) -> PushPlan:
    """Check every key and value; raise ConfigRejected listing each bad one, before anything is written."""
    scope = parse_scope(scope_text)
    errors: dict[str, str] = {}
    rendered: dict[str, str] = {}
    for name, value in values.items():
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        try:
            rendered[name] = catalog.render(name, catalog.parse(name, value, scope))
        except InvalidConfigValue as exc:
            errors[name] = exc.reason
    for name in delete:
        if name in values:
            errors[name] = "both set and deleted"
    if ips is not None:
        bad = [ip for ip in ips if not _ip_like(ip)]
        if not ips:
            errors["ips"] = "an empty IP list; omit ips for a full release"
        elif bad:
            errors["ips"] = f"invalid client IPs {bad}"
    if labels is not None:
        bad_labels = [label for label in labels if not _LABEL.match(label)]
        if not labels:
            errors["labels"] = "an empty label list; omit labels for a full release"
        elif bad_labels:
            errors["labels"] = f"{len(bad_labels)} invalid label(s): 1-64 letters, digits, '.', '_', '-'"
    if not values and not delete:
        errors["set"] = "nothing to change"
    if errors:
        raise ConfigRejected(errors)
    return PushPlan(scope, scope.namespace(), rendered, sorted(set(delete)), ips, labels=labels)


def check_registered(plan: PushPlan, registered: Iterable[str]) -> None:
    """422 before anything reaches the config center when a value names a cluster the registry lacks."""
    known = sorted(registered)
    errors = {name: f"unknown cluster {value!r}; registered: {', '.join(known) or '(none)'}"
              for name, value in plan.set.items() if catalog.names_cluster(name) and value not in known}
    if errors:
        raise ConfigRejected(errors, "values name unregistered clusters")


def check_group_protocol(plan: PushPlan, conn: Connection, heartbeat_s: int) -> None:
    """422 before anything is written when a group scope sets a key the broker owns for this group: one of its
    online members reports the new consumer protocol (KIP-848), so the broker runs the group's assignor and
    sets its session timeout and heartbeat (``catalog.BROKER_OWNED``)."""
    owned = sorted(name for name in plan.set if name in catalog.BROKER_OWNED)
    if plan.scope.kind is not catalog.ScopeKind.GROUP or not owned:
        return
    members = clients.current(conn, heartbeat_s, group=plan.scope.name, online=True)
    if any((m.get("extra") or {}).get("group_protocol") == "consumer" for m in members):
        raise ConfigRejected({name: f"group {plan.scope.name!r} uses group.protocol=consumer: "
                                    f"{catalog.BROKER_OWNED_REASON}" for name in owned},
                             "values the broker owns for this group")


def _ip_like(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _diff(before: dict[str, str], plan: PushPlan) -> list[dict[str, Any]]:
    changes = []
    for key, value in sorted(plan.set.items()):
        if before.get(key) != value:
            changes.append({"key": key, "before": before.get(key), "after": value})
    for key in plan.delete:
        if key in before:
            changes.append({"key": key, "before": before[key], "after": None})
    return changes


def current(api: ApolloOpenApi, scope: Scope) -> dict[str, Any]:
    """The released values of the scope's namespace, and its gray branch if one is live."""
    return current_with_releases(api, scope)[0]


def current_with_releases(api: ApolloOpenApi, scope: Scope
                          ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """:func:`current`, and the main and gray releases it was read from (their release keys tell which
    clients applied them), without asking the config service twice."""
    namespace = scope.namespace()
    # the release and the gray branch asked at once, then the branch's release and rules at once: a config
    # panel (polled every second) waited for each answer in turn, and under load each is a wait for a core in
    # the config service (a topic's panel p95 177 ms at 100,000 clients, load 7-10, bench/control_plane_scale.py)
    asked = _ASK.submit(api.latest_release, namespace)
    branch = api.find_branch(namespace)
    release = asked.result()
    out: dict[str, Any] = {
        "scope": str(scope), "namespace": namespace,
        "released": dict((release or {}).get("configurations") or {}),
        "release": _release_summary(release),
        "gray": None,
    }
    branch_release = None
    if branch:
        rules = _ASK.submit(api.branch_rules, namespace, branch)
        branch_release = api.branch_latest_release(namespace, branch)
        ips, labels = rules.result()
        out["gray"] = {"branch": branch, "ips": ips, "labels": labels,
                       "released": dict((branch_release or {}).get("configurations") or {}),
                       "release": _release_summary(branch_release)}
    return out, release, branch_release


def _release_summary(release: dict[str, Any] | None) -> dict[str, Any] | None:
    if not release:
        return None
    return {"id": release.get("id"), "name": release.get("name"), "comment": release.get("comment")}


def plan_changes(api: ApolloOpenApi, plan: PushPlan) -> dict[str, str]:
    """Fill ``plan.changes`` (key, before, after) against what is released now; return the 'before' map."""
    release = api.latest_release(plan.namespace)
    before = dict((release or {}).get("configurations") or {})
    if plan.ips is not None:
        branch = api.find_branch(plan.namespace)
        if branch:
            branch_release = api.branch_latest_release(plan.namespace, branch)
            before = {**before, **dict((branch_release or {}).get("configurations") or {})}
    plan.changes = _diff(before, plan)
    return before


class PushFailed(ApolloError):
    """A push failed part-way; ``restored`` says whether every item it had written was put back."""

    def __init__(self, cause: ApolloError, restored: bool) -> None:
        super().__init__(cause.status, cause.message)
        self.args = cause.args
        self.restored = restored


def apply(api: ApolloOpenApi, plan: PushPlan, operator: str, comment: str) -> dict[str, Any]:
    """Write the items and publish: a normal release, or a gray release to ``plan.ips`` / ``plan.labels``.

    All or nothing: when a step fails, the items written are put back as they were (a branch this push opened is
    closed) before the error (:class:`PushFailed`) is raised, so the next release cannot publish them. A main-line
    push first puts back what an earlier push could not (its working copy differing from the release in force,
    ``discarded`` in the result). Run it under the namespace's lock (``configwrites.push``)."""
    title = time.strftime("%Y%m%d%H%M%S") + f"-ykafka-{operator}"[:40]
    note = f"by {operator} via ykafka MetaServer" + (f": {comment}" if comment else "")
    api.ensure_app()
    api.ensure_namespace(plan.namespace)
    if not plan.gray:
        released = dict((api.latest_release(plan.namespace) or {}).get("configurations") or {})
        discarded = _put_back(api, plan.namespace, api.items(plan.namespace), released, None)
        if discarded:
            log.warning("config.unreleased_items_discarded", namespace=plan.namespace, keys=sorted(discarded))
        with _restoring(lambda: _put_back(api, plan.namespace, api.items(plan.namespace), released,
                                          [*plan.set, *plan.delete])):
            for key, value in plan.set.items():
                api.set_item(plan.namespace, key, value)
            for key in plan.delete:
                api.delete_item(plan.namespace, key)
            release = api.release(plan.namespace, title, note)
        return {"release": _release_summary(release), "gray": None,
                **({"discarded": sorted(discarded)} if discarded else {})}
    if api.latest_release(plan.namespace) is None:
        # Apollo branches off a released namespace; publish the (unchanged) main line first
        api.release(plan.namespace, title, f"initial release before gray; {note}")
    branch = api.find_branch(plan.namespace)
    if branch is None:
        branch = api.create_branch(plan.namespace)
        undo = lambda: api.delete_branch(plan.namespace, branch)  # noqa: E731
    else:
        items = api.items(plan.namespace, cluster=branch)
        ips, labels = api.branch_rules(plan.namespace, branch)

        def undo() -> None:
            for key in [*plan.set, *plan.delete]:
                if key in items:
                    api.set_branch_item(plan.namespace, branch, key, items[key])
                else:
                    api.delete_branch_item(plan.namespace, branch, key)
            api.set_branch_rules(plan.namespace, branch, ips, labels or None)
    with _restoring(undo):
        for key, value in plan.set.items():
            api.set_branch_item(plan.namespace, branch, key, value)
        for key in plan.delete:
            api.delete_branch_item(plan.namespace, branch, key)
        api.set_branch_rules(plan.namespace, branch, plan.ips or [], plan.labels)
        release = api.branch_release(plan.namespace, branch, title, note)
    return {"release": _release_summary(release),
            "gray": {"branch": branch, "ips": plan.ips or [], "labels": plan.labels or []}}


def _put_back(api: ApolloOpenApi, namespace: str, working: dict[str, str], released: dict[str, str],
              keys: Iterable[str] | None) -> dict[str, str | None]:
    """Make the working copy's ``keys`` (None: every key) equal the release in force; what was changed."""
    changed: dict[str, str | None] = {}
    for key in sorted(set(working) | set(released) if keys is None else set(keys)):
        if key in released and working.get(key) != released[key]:
            api.set_item(namespace, key, released[key])
            changed[key] = working.get(key)
        elif key not in released and key in working:
            api.delete_item(namespace, key)
            changed[key] = working[key]
    return changed


@contextlib.contextmanager
def _restoring(undo: Callable[[], object]) -> Iterator[None]:
    """On an error inside, run ``undo`` and raise :class:`PushFailed` (ApolloError) or the error itself."""
    try:
        yield
    except Exception as exc:
        try:
            undo()
            restored = True
        except Exception as again:  # the config center may be the reason: say so, keep the first error
            log.error("config.restore_failed", error=str(again))
            restored = False
        if isinstance(exc, ApolloError):
            raise PushFailed(exc, restored) from exc
        raise


def rollback(api: ApolloOpenApi, scope: Scope) -> dict[str, Any]:
    """Roll the namespace back to its previous release; returns the release that was undone."""
    namespace = scope.namespace()
    release = api.latest_release(namespace)
    if not release or release.get("id") is None:
        raise ConfigRejected({"scope": f"{namespace} has no release to roll back"}, "nothing to roll back")
    api.rollback(int(release["id"]))
    return {"rolled_back": _release_summary(release)}


def merge_gray(api: ApolloOpenApi, scope: Scope, operator: str) -> dict[str, Any]:
    namespace = scope.namespace()
    branch = api.find_branch(namespace)
    if not branch:
        raise ConfigRejected({"scope": f"{namespace} has no gray release"}, "no gray release")
    title = time.strftime("%Y%m%d%H%M%S") + "-ykafka-merge"
    release = api.merge_branch(namespace, branch, title, f"gray merged by {operator} via ykafka MetaServer")
    return {"release": _release_summary(release), "branch": branch}


def abandon_gray(api: ApolloOpenApi, scope: Scope) -> dict[str, Any]:
    namespace = scope.namespace()
    branch = api.find_branch(namespace)
    if not branch:
        raise ConfigRejected({"scope": f"{namespace} has no gray release"}, "no gray release")
    api.delete_branch(namespace, branch)
    return {"branch": branch, "deleted": True}
