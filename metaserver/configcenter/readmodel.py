"""The in-memory read model the config service answers from.

Clients poll hard (every app instance, every namespace, plus a long poll each), so `/configs` and
`/notifications/v2` never touch SQLite: they read immutable snapshots held here. The store rebuilds the
snapshot of one (app, namespace) after each committed write, and the event loop swaps it in before any
long poll is woken, so a woken client always reads the new release.

All lookups are case-insensitive, like Apollo on MySQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .keyscope import KeyScope

CLUSTER_DEFAULT = "default"
NAMESPACE_APPLICATION = "application"
NO_APPID_PLACEHOLDER = "ApolloNoAppIdPlaceHolder"
SEPARATOR = "+"
ALL = "*"


def message_key(app_id: str, cluster: str, namespace: str) -> str:
    """Apollo's release-message key, `appId+cluster+namespace`."""
    return SEPARATOR.join((app_id, cluster, namespace))


def strip_properties_suffix(namespace: str) -> str:
    """NamespaceUtil.filterNamespaceName: `application.properties` is `application`."""
    if namespace.lower().endswith(".properties"):
        return namespace[: namespace.rfind(".")]
    return namespace


@dataclass(frozen=True)
class ReleaseView:
    id: int
    release_key: str
    app_id: str
    cluster_name: str
    namespace_name: str
    configurations: dict[str, str]


#: the label a client sends (Apollo's ``label``), or several: a ykafka client adds its instance's own label
#: (``ykafka-client:<client id>``, sent as ``ykafkaInstance``), which a rollout step's gray rule may list
Labels = str | tuple[str, ...] | None
INSTANCE_LABEL = "ykafka-client:"


@dataclass(frozen=True)
class RuleItem:
    """GrayReleaseRuleItemDTO: matches a client by app id plus IP or label (`*` matches all)."""

    client_app_id: str
    ips: frozenset[str]
    labels: frozenset[str]

    def matches(self, client_app_id: str, client_ip: str | None, client_label: Labels) -> bool:
        if self.client_app_id.lower() != (client_app_id or "").lower():
            return False
        if ALL in self.ips or (client_ip is not None and client_ip in self.ips):
            return True
        if ALL in self.labels or client_label is None:
            return ALL in self.labels
        return any(x in self.labels for x in ((client_label,) if isinstance(client_label, str) else client_label))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RuleItem:
        return cls(str(raw.get("clientAppId") or ""), frozenset(str(x) for x in raw.get("clientIpList") or ()),
                   frozenset(str(x) for x in raw.get("clientLabelList") or ()))


@dataclass(frozen=True)
class GrayRuleView:
    branch_name: str
    release_id: int
    active: bool
    items: tuple[RuleItem, ...]

    def matches(self, client_app_id: str, client_ip: str | None, client_label: Labels) -> bool:
        return any(item.matches(client_app_id, client_ip, client_label) for item in self.items)


@dataclass(frozen=True)
class AppNamespaceView:
    app_id: str
    name: str
    format: str
    is_public: bool


@dataclass
class NamespaceState:
    """Everything clients can be served for one (app, namespace), across its clusters and branches."""

    latest: dict[str, ReleaseView] = field(default_factory=dict)  # cluster (lower) -> latest active release
    releases: dict[int, ReleaseView] = field(default_factory=dict)  # releases gray rules point at
    gray: dict[str, tuple[GrayRuleView, ...]] = field(default_factory=dict)  # parent cluster (lower) -> rules
    notifications: dict[str, int] = field(default_factory=dict)  # cluster (lower) -> latest notification id


@dataclass(frozen=True)
class TokenView:
    token: str
    all_apps: bool
    app_ids: frozenset[str]  # lower-cased

    def may_manage(self, app_id: str) -> bool:
        return self.all_apps or app_id.lower() in self.app_ids


@dataclass(frozen=True)
class ScopedKeyView:
    """An enabled per-app key (keyscope.py): its secret and the namespaces it opens."""

    secret: str
    scope: KeyScope


@dataclass(frozen=True)
class Credentials:
    """Open API tokens and access-key secrets (lower-cased app id -> secrets) the service checks."""

    tokens: dict[str, TokenView] = field(default_factory=dict)
    secrets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # enforced (mode 0, "filter"), whole app
    observed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # checked and logged only (mode 1)
    scoped: dict[str, tuple[ScopedKeyView, ...]] = field(default_factory=dict)  # enforced, per-app scope


class ReadModel:
    """Snapshots of released configuration, gray rules, notification ids, tokens and access keys."""

    def __init__(self) -> None:
        self.namespaces: dict[tuple[str, str], NamespaceState] = {}
        self.app_namespaces: dict[tuple[str, str], AppNamespaceView] = {}
        self.public_namespaces: dict[str, AppNamespaceView] = {}
        self.credentials = Credentials()

    # --- updates (event loop only) -------------------------------------------------------------
    def set_namespace(self, app_id: str, namespace: str, state: NamespaceState) -> None:
        self.namespaces[(app_id.lower(), namespace.lower())] = state

    def set_app_namespaces(self, views: Iterable[AppNamespaceView]) -> None:
        by_key: dict[tuple[str, str], AppNamespaceView] = {}
        public: dict[str, AppNamespaceView] = {}
        for v in views:
            by_key[(v.app_id.lower(), v.name.lower())] = v
            if v.is_public:
                public[v.name.lower()] = v
        self.app_namespaces, self.public_namespaces = by_key, public

    def set_credentials(self, credentials: Credentials) -> None:
        self.credentials = credentials

    # --- namespace names ------------------------------------------------------------------------
    def normalize_namespace(self, app_id: str, namespace: str) -> str:
        """NamespaceUtil.normalizeNamespace: the stored spelling of a namespace name, if it exists."""
        own = self.app_namespaces.get((app_id.lower(), namespace.lower()))
        if own is not None:
            return own.name
        public = self.public_namespaces.get(namespace.lower())
        return public.name if public is not None else namespace

    def belongs_to_app(self, app_id: str, namespace: str) -> bool:
        if namespace == NAMESPACE_APPLICATION:
            return True
        if app_id.lower() == NO_APPID_PLACEHOLDER.lower():
            return False
        return (app_id.lower(), namespace.lower()) in self.app_namespaces

    def public_owner(self, client_app_id: str, namespace: str) -> str | None:
        """The app owning a public namespace a client of another app reads, as ConfigController does."""
        public = self.public_namespaces.get(namespace.lower())
        if public is None or public.app_id.lower() == client_app_id.lower():
            return None
        return public.app_id

    # --- releases ------------------------------------------------------------------------------
    def _find_release(self, client_app_id: str, ip: str | None, label: Labels, config_app_id: str,
                      cluster: str, namespace: str) -> ReleaseView | None:
        state = self.namespaces.get((config_app_id.lower(), namespace.lower()))
        if state is None:
            return None
        for rule in state.gray.get(cluster.lower(), ()):
            if rule.active and rule.release_id and rule.matches(client_app_id, ip, label):
                gray = state.releases.get(rule.release_id)
                if gray is not None:
                    return gray
                break
        return state.latest.get(cluster.lower())

    def load_config(self, client_app_id: str, ip: str | None, label: Labels, config_app_id: str,
                    cluster: str, namespace: str, data_center: str | None) -> ReleaseView | None:
        """AbstractConfigService.loadConfig: the named cluster, then the data center, then `default`."""
        if cluster != CLUSTER_DEFAULT:
            found = self._find_release(client_app_id, ip, label, config_app_id, cluster, namespace)
            if found is not None:
                return found
        if data_center and data_center != cluster:
            found = self._find_release(client_app_id, ip, label, config_app_id, data_center, namespace)
            if found is not None:
                return found
        return self._find_release(client_app_id, ip, label, config_app_id, CLUSTER_DEFAULT, namespace)

    def releases_for(self, app_id: str, cluster: str, namespace: str, ip: str | None, label: Labels,
                     data_center: str | None) -> list[ReleaseView]:
        """The releases `/configs` merges: the app's own, then a public namespace's owner (lower priority)."""
        releases: list[ReleaseView] = []
        if app_id.lower() != NO_APPID_PLACEHOLDER.lower():
            own = self.load_config(app_id, ip, label, app_id, cluster, namespace, data_center)
            if own is not None:
                releases.append(own)
        if not self.belongs_to_app(app_id, namespace):
            owner = self.public_owner(app_id, namespace)
            if owner is not None:
                public = self.load_config(app_id, ip, label, owner, cluster, namespace, data_center)
                if public is not None:
                    releases.append(public)
        return releases

    # --- notifications -------------------------------------------------------------------------
    def watch_keys(self, app_id: str, cluster: str, namespace: str, data_center: str | None) -> list[str]:
        """WatchKeysUtil.assembleAllWatchKeys for one namespace (already normalized)."""
        keys = _assemble(app_id, cluster, namespace, data_center)
        if namespace != NAMESPACE_APPLICATION and not self.belongs_to_app(app_id, namespace):
            owner = self.public_owner(app_id, namespace)
            if owner is not None:
                keys += _assemble(owner, cluster, namespace, data_center)
        return keys

    def notification_id(self, key: str) -> int:
        """The latest notification id of a watch key, -1 when it never had a release message."""
        app_id, cluster, namespace = key.split(SEPARATOR, 2)
        state = self.namespaces.get((app_id.lower(), namespace.lower()))
        if state is None:
            return -1
        return state.notifications.get(cluster.lower(), -1)


def _assemble(app_id: str, cluster: str, namespace: str, data_center: str | None) -> list[str]:
    if app_id.lower() == NO_APPID_PLACEHOLDER.lower():
        return []
    keys: list[str] = []
    if cluster != CLUSTER_DEFAULT:
        keys.append(message_key(app_id, cluster, namespace))
    if data_center and data_center != cluster:
        keys.append(message_key(app_id, data_center, namespace))
    keys.append(message_key(app_id, CLUSTER_DEFAULT, namespace))
    return keys
