"""Scoped hot-config layers: validation against the catalog, precedence, change events, rejections.

One :class:`HotConfig` per client holds the good (validated, typed) values of every subscribed namespace.
A new namespace content is validated key by key; a rejected value is logged, remembered for the client
report, and the previous good value of that key stays in force. Resolution per key, most specific first:

``ykafka.topic.<t>`` > ``ykafka.group.<g>`` > ``ykafka.cluster.<c>`` > ``ykafka.global`` > local config >
built-in defaults (grade defaults sit just above the built-in ones, see ``catalog.resolve``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from ykafka import catalog
from ykafka.catalog import Scope
from ykafka.errors import InvalidConfigValue

log = structlog.get_logger(__name__)

LOCAL = "local"
DEFAULT = "default"


@dataclass(frozen=True)
class Rejection:
    """An invalid value the client refused; reported to the MetaServer in the client report's ``errors``."""

    namespace: str
    key: str
    value: Any
    reason: str
    release_key: str | None
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {"type": "config_rejected", "namespace": self.namespace, "key": self.key,
                "value": str(self.value), "reason": self.reason, "release_key": self.release_key,
                "at": self.at}


@dataclass(frozen=True)
class ConfigChange:
    """What a namespace update changed (only keys whose good value changed) and what it rejected."""

    namespace: str
    scope: Scope
    changed: dict[str, tuple[Any, Any]]  # key -> (old, new); None when absent
    rejected: list[Rejection]
    release_key: str | None
    version: int


@dataclass
class Layer:
    namespace: str
    scope: Scope
    values: dict[str, Any] = field(default_factory=dict)
    release_key: str | None = None


Listener = Callable[[ConfigChange], None]
#: extra validation beyond the catalog: returns a reason to reject, or None (e.g. unknown cluster names)
Validator = Callable[[str, Any], "str | None"]
#: a check against live things, knowing the scope (e.g. partitions a topic has): None when the value is fine,
#: else (reason, the valid part to apply instead), so the rejection is reported and the rest still applies
ScopedValidator = Callable[[Scope, str, Any], "tuple[str, Any] | None"]


class HotConfig:
    """The layers of one client, thread-safe; ``version`` bumps whenever any effective value may change."""

    def __init__(self, local_defaults: Mapping[str, Any] | None = None,
                 prefix: str = catalog.NAMESPACE_PREFIX, max_rejections: int = 100) -> None:
        self.prefix = prefix
        self.local: dict[str, Any] = dict(local_defaults or {})
        self._layers: dict[str, Layer] = {}
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._rejections: deque[Rejection] = deque(maxlen=max_rejections)
        self._validators: list[Validator] = []
        self._scoped_validators: list[ScopedValidator] = []
        self._version_listeners: list[Callable[[int], None]] = []
        self.version = 0

    # --- namespaces ---------------------------------------------------------------------------------

    def namespace(self, scope: Scope) -> str:
        return scope.namespace(self.prefix)

    def scope_of(self, namespace: str) -> Scope | None:
        return Scope.from_namespace(namespace, self.prefix)

    # --- updates ------------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def add_validator(self, validator: Validator) -> None:
        self._validators.append(validator)

    def add_scoped_validator(self, validator: ScopedValidator) -> None:
        self._scoped_validators.append(validator)

    def add_version_listener(self, listener: Callable[[int], None]) -> None:
        """Called (with the new version) after every change that may alter a resolution; must be cheap."""
        self._version_listeners.append(listener)

    def _version_moved(self, version: int) -> None:
        for listener in list(self._version_listeners):
            try:
                listener(version)
            except Exception:
                log.exception("ykafka.config.version_listener_failed")

    def bump(self) -> None:
        """Force every cached resolution stale (e.g. the grant changed)."""
        with self._lock:
            self.version += 1
            version = self.version
        self._version_moved(version)

    def apply(self, namespace: str, raw: Mapping[str, Any], release_key: str | None = None) -> ConfigChange | None:
        """Validate and install a namespace's new content; notify listeners if a good value changed."""
        scope = self.scope_of(namespace)
        if scope is None:
            log.warning("ykafka.config.unknown_namespace", namespace=namespace)
            return None
        with self._lock:
            layer = self._layers.get(namespace) or Layer(namespace, scope)
            previous = dict(layer.values)
            update = catalog.validate_layer(raw, previous, scope)
            rejected_errs = dict(update.rejected)
            values = dict(update.values)
            for name, value in list(values.items()):
                if name in rejected_errs:
                    continue
                for validator in self._validators:
                    reason = validator(name, value)
                    if reason:
                        rejected_errs[name] = InvalidConfigValue(name, raw.get(name, value), reason)
                        if name in previous:
                            values[name] = previous[name]
                        else:
                            del values[name]
                        break
                else:
                    for check in self._scoped_validators:
                        partial = check(scope, name, value)
                        if partial:
                            rejected_errs[name] = InvalidConfigValue(name, raw.get(name, value), partial[0])
                            values[name] = partial[1]
                            break
            now = time.time()
            rejections = [Rejection(namespace, name, exc.value, exc.reason, release_key, now)
                          for name, exc in rejected_errs.items()]
            for rej in rejections:
                self._rejections.append(rej)
                log.warning("ykafka.config.rejected", namespace=namespace, key=rej.key, value=str(rej.value),
                            reason=rej.reason, kept=_show(previous.get(rej.key)))
            if update.unknown:
                log.info("ykafka.config.unknown_keys_ignored", namespace=namespace, keys=sorted(update.unknown))
            changed = {name: (previous.get(name), values.get(name))
                       for name in set(previous) | set(values) if previous.get(name) != values.get(name)}
            layer.values = values
            layer.release_key = release_key
            self._layers[namespace] = layer
            if changed:
                self.version += 1
                log.info("ykafka.config.changed", namespace=namespace, release_key=release_key,
                         changed={k: _show(v[1]) for k, v in changed.items()})
            event = ConfigChange(namespace, scope, changed, rejections, release_key, self.version)
            listeners = list(self._listeners)
        if changed:
            self._version_moved(event.version)
        if changed or rejections:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("ykafka.config.listener_failed", namespace=namespace)
        return event

    # --- reading ------------------------------------------------------------------------------------

    def layer(self, scope: Scope) -> dict[str, Any]:
        with self._lock:
            found = self._layers.get(self.namespace(scope))
            return dict(found.values) if found else {}

    def release_keys(self) -> dict[str, str]:
        with self._lock:
            return {ns: layer.release_key for ns, layer in self._layers.items() if layer.release_key}

    def rejections(self) -> list[Rejection]:
        with self._lock:
            return list(self._rejections)

    def _chain(self, topic: str | None, group: str | None, cluster: str | None) -> list[tuple[str, Mapping[str, Any]]]:
        chain: list[tuple[str, Mapping[str, Any]]] = []
        for scope in catalog.precedence(topic, group, cluster):
            ns = self.namespace(scope)
            found = self._layers.get(ns)
            if found is not None and found.values:
                chain.append((ns, found.values))
        chain.append((LOCAL, self.local))
        return chain

    def resolve(self, topic: str | None = None, group: str | None = None, cluster: str | None = None,
                names: Iterable[str] | None = None) -> dict[str, Any]:
        """Effective typed values for (topic, group, cluster), per key most specific first."""
        with self._lock:
            return catalog.resolve([values for _, values in self._chain(topic, group, cluster)], names)

    def sources(self, topic: str | None = None, group: str | None = None, cluster: str | None = None,
                names: Iterable[str] | None = None) -> dict[str, str]:
        """Which layer supplies each key: a namespace name, ``local`` or ``default``."""
        with self._lock:
            chain = self._chain(topic, group, cluster)
        out: dict[str, str] = {}
        for name in names if names is not None else catalog.KEYS:
            out[name] = next((source for source, values in chain if name in values), DEFAULT)
        return out


def _show(value: Any) -> Any:
    return catalog.render("", value) if value is not None else None
