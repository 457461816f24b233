"""Which clusters a grant may name: the app's default, its topics' and groups' routes, and their standbys.

A grant used to list every registered cluster with its SASL password, so an app allowed only ``orders``
received the credentials of clusters it never uses. Now a grant carries only the clusters the app can
reach (docs/metaserver.md, "What a grant carries"):

* the app's default cluster;
* ``route.cluster`` / ``route.standby`` values in the config center's namespaces that apply to the app:
  global, topics its produce / consume ACL matches, groups its group ACL matches, and the cluster scope
  of a cluster already reachable;
* the registry's standby of every reachable cluster (and so on, to a fixed point);
* a cluster a client *wants* because a route value in force names it (a gray release the main copy does
  not show, or a route released a moment ago): granted only once that namespace, read from the config
  center, confirms it and the namespace applies to the app.

Route values come from one Open API call listing every namespace with its items, cached for
``route_cache_s`` and shared by all grants; a want the cache cannot confirm forces one re-read (at most one
per second) and then reads that namespace's released and gray values. Until the config center has
answered once the MetaServer cannot know the routes, and grants list every cluster, as before (logged).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
from cachetools import TTLCache

from ykafka import acl as acl_patterns
from ykafka.catalog import NAMESPACE_PREFIX, Scope, ScopeKind

from .apollo import ApolloError, ApolloOpenApi
from .hotconfig import current

log = structlog.get_logger("metaserver.domain.reach")

ROUTE_KEYS = ("route.cluster", "route.standby")
PLACEMENT = "placement:"  # a want's "namespace" naming a topic's placement instead of a config namespace
Routes = dict[str, dict[str, str]]  # namespace -> {route key: cluster}
#: after a failed read of the route values, grants go on without them (every cluster) for this long
RETRY_S = 5.0
#: the read of every namespace's route values may take this long (a grant may be waiting on it)
READ_TIMEOUT_S = 3.0


class RouteBook:
    """The config center's route values per namespace, read in one call and shared by every grant."""

    def __init__(self, api: ApolloOpenApi | None, max_age_s: float = 30.0, prefix: str = NAMESPACE_PREFIX) -> None:
        self.api = api
        self.max_age_s = max_age_s
        self.prefix = prefix
        self._routes: Routes | None = None
        self._loaded_at = 0.0
        self._failed_at = -RETRY_S
        self._lock = threading.Lock()
        self._refreshing = False
        # confirmations are trusted like the route values; a refusal only for a second (a release may follow)
        self._confirmed: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=10_000, ttl=max(1.0, max_age_s))
        self._refused: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=10_000, ttl=1.0)

    def routes(self) -> Routes | None:
        """Current route values; ``None`` while the config center has never answered (or there is none).

        Until the first answer a grant waits for one read, but after a failed read the next synchronous try
        comes only ``RETRY_S`` later: a config center that is down must not make every grant wait for it."""
        if self.api is None:
            return None
        if self._routes is None:
            if time.monotonic() - self._failed_at >= RETRY_S:
                self.refresh()
        elif time.monotonic() - self._loaded_at > self.max_age_s:
            self._refresh_in_background()
        return self._routes

    def refresh(self, min_interval_s: float = 0.0) -> None:
        """Re-read every namespace's route values (skipped if the last read is younger than ``min_interval_s``)."""
        if self.api is None or (self._routes is not None and time.monotonic() - self._loaded_at < min_interval_s):
            return
        try:
            listed = self.api.namespaces(timeout_s=READ_TIMEOUT_S)
        except ApolloError as exc:
            self._failed_at = time.monotonic()
            log.warning("route values unavailable", error=str(exc), cached=self._routes is not None)
            return
        routes: Routes = {}
        for ns in listed:
            name = str(ns.get("namespaceName") or "")
            values = {str(item.get("key")): str(item.get("value") or "") for item in ns.get("items") or []
                      if item.get("key") in ROUTE_KEYS}
            if name.startswith(self.prefix + ".") and values:
                routes[name] = values
        with self._lock:
            self._routes = routes
            self._loaded_at = time.monotonic()

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def run() -> None:
            try:
                self.refresh()
            finally:
                self._refreshing = False

        threading.Thread(target=run, name="route-book", daemon=True).start()

    def confirms(self, namespace: str, cluster: str) -> bool:
        """Does ``namespace`` hold a route value naming ``cluster`` (main copy, release or gray release)?"""
        routes = self.routes()
        if routes is not None and cluster in routes.get(namespace, {}).values():
            return True
        if (namespace, cluster) in self._confirmed:
            return True
        if (namespace, cluster) in self._refused:
            return False
        self.refresh(min_interval_s=1.0)
        found = cluster in (self._routes or {}).get(namespace, {}).values()
        if not found and self.api is not None:
            found = cluster in _released_routes(self.api, namespace, self.prefix)
        (self._confirmed if found else self._refused)[(namespace, cluster)] = True
        return found


def _released_routes(api: ApolloOpenApi, namespace: str, prefix: str) -> set[str]:
    """Route values of the namespace's latest release and of its live gray release."""
    scope = scope_of(namespace, prefix)
    if scope is None:
        return set()
    try:
        now = current(api, scope)
    except ApolloError as exc:
        log.warning("route confirmation unavailable", namespace=namespace, error=str(exc))
        return set()
    found = {str(now["released"].get(key)) for key in ROUTE_KEYS if now["released"].get(key)}
    gray = now.get("gray") or {}
    found |= {str(gray["released"].get(key)) for key in ROUTE_KEYS if gray and gray["released"].get(key)}
    return found


def scope_of(namespace: str, prefix: str = NAMESPACE_PREFIX) -> Scope | None:
    return Scope.from_namespace(namespace, prefix)


def applies_to(scope: Scope, acl: Mapping[str, Iterable[str]], reachable: set[str]) -> bool:
    """Does a namespace of this scope take part in resolving routes for an app with this ACL?"""
    if scope.kind is ScopeKind.GLOBAL:
        return True
    if scope.kind is ScopeKind.TOPIC:
        return acl_patterns.check(acl, "produce", scope.name) or acl_patterns.check(acl, "consume", scope.name)
    if scope.kind is ScopeKind.GROUP:
        return acl_patterns.check(acl, "group", scope.name)
    return scope.name in reachable  # a cluster's own namespace (its route.standby)


def reachable(acl: Mapping[str, Iterable[str]], default: str | None, registry: Mapping[str, Mapping[str, Any]],
              routes: Routes, wanted: Iterable[str] = (), prefix: str = NAMESPACE_PREFIX) -> set[str]:
    """The registered clusters an app can reach, closed over standbys and cluster-scope routes."""
    found = {name for name in [default, *wanted] if name and name in registry}
    scoped = [(scope, values) for ns, values in routes.items() if (scope := scope_of(ns, prefix)) is not None]
    while True:
        before = len(found)
        for scope, values in scoped:
            if applies_to(scope, acl, found):
                found |= {value for value in values.values() if value in registry}
        found |= {str(registry[name]["standby"]) for name in list(found)
                  if registry[name].get("standby") in registry}
        if len(found) == before:
            return found


def grant_clusters(book: RouteBook, acl: Mapping[str, Iterable[str]], default: str | None,
                   registry: dict[str, dict[str, Any]], wants: Iterable[tuple[str, str]],
                   placed: Callable[[str], str | None] = lambda _topic: None) -> dict[str, dict[str, Any]]:
    """The part of the registry a grant carries (all of it while the routes cannot be known).

    A want ``("placement:<topic>", cluster)`` is confirmed by the topic's placement (metaserver/domain/placements.py)
    when the app's ACL covers the topic."""
    routes = book.routes()
    if routes is None:
        if book.api is not None:
            log.warning("grant lists every cluster: the config center's routes are not known yet")
        return registry
    confirmed = []
    for namespace, cluster in wants:
        if namespace.startswith(PLACEMENT):
            topic = namespace[len(PLACEMENT):]
            if cluster in registry and (acl_patterns.check(acl, "produce", topic)
                                        or acl_patterns.check(acl, "consume", topic)) and placed(topic) == cluster:
                confirmed.append(cluster)
            continue
        scope = scope_of(namespace, book.prefix)
        if (cluster in registry and scope is not None and applies_to(scope, acl, set(registry))
                and book.confirms(namespace, cluster)):
            confirmed.append(cluster)
    names = reachable(acl, default, registry, routes, confirmed, book.prefix)
    return {name: spec for name, spec in registry.items() if name in names}
