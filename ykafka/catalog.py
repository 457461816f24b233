"""The hot-config key catalog: names, types, ranges, scopes and how each key is applied.

This module is the contract between operators, the MetaServer (which validates before it writes to the
config center) and the SDK (which validates again before it applies). Both import it; nothing else
defines a key. Values arrive from Apollo as strings, from local config as strings or native values;
``parse`` turns either into the typed value or raises :class:`InvalidConfigValue` with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ykafka.errors import InvalidConfigValue, UnknownConfigKey

NAMESPACE_PREFIX = "ykafka"


class Apply(StrEnum):
    """How a change of the key reaches a running client."""

    IN_PLACE = "in_place"  # next produce / next message sees it
    REBUILD = "rebuild"  # a new librdkafka client is built and swapped in gracefully
    REJOIN = "rejoin"  # the consumer leaves and rejoins its group
    SWITCH = "switch"  # routing moves to another cluster


class ScopeKind(StrEnum):
    GLOBAL = "global"
    CLUSTER = "cluster"
    GROUP = "group"
    TOPIC = "topic"


ALL_SCOPES = frozenset(ScopeKind)
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class Scope:
    """Where a value is set; maps one-to-one onto an Apollo namespace."""

    kind: ScopeKind
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``global``, ``cluster:<c>``, ``group:<g>`` or ``topic:<t>``."""
        if text == "global":
            return cls(ScopeKind.GLOBAL)
        kind, sep, name = text.partition(":")
        try:
            scope_kind = ScopeKind(kind)
        except ValueError:
            scope_kind = None
        if not sep or scope_kind is None or scope_kind is ScopeKind.GLOBAL:
            raise ValueError(f"invalid scope {text!r}: use global, cluster:<name>, group:<name> or topic:<name>")
        if not _NAME_RE.match(name):
            raise ValueError(f"invalid scope name {name!r}: 1-200 characters of letters, digits, '.', '_', '-'")
        return cls(scope_kind, name)

    @classmethod
    def from_namespace(cls, namespace: str, prefix: str = NAMESPACE_PREFIX) -> Scope | None:
        """Inverse of :meth:`namespace`; names may contain dots (``ykafka.topic.orders.eu``)."""
        if namespace == f"{prefix}.global":
            return cls(ScopeKind.GLOBAL)
        for kind in (ScopeKind.TOPIC, ScopeKind.GROUP, ScopeKind.CLUSTER):
            head = f"{prefix}.{kind.value}."
            if namespace.startswith(head) and len(namespace) > len(head):
                return cls(kind, namespace[len(head):])
        return None

    def namespace(self, prefix: str = NAMESPACE_PREFIX) -> str:
        """The Apollo namespace holding this scope's keys."""
        if self.kind is ScopeKind.GLOBAL:
            return f"{prefix}.global"
        return f"{prefix}.{self.kind.value}.{self.name}"

    def __str__(self) -> str:
        return "global" if self.kind is ScopeKind.GLOBAL else f"{self.kind.value}:{self.name}"


GLOBAL = Scope(ScopeKind.GLOBAL)


def precedence(topic: str | None = None, group: str | None = None, cluster: str | None = None) -> list[Scope]:
    """The scopes a value for (topic, group, cluster) is looked up in, most specific first, ending at global."""
    scopes = [Scope(kind, name) for kind, name in
              ((ScopeKind.TOPIC, topic), (ScopeKind.GROUP, group), (ScopeKind.CLUSTER, cluster)) if name]
    scopes.append(GLOBAL)
    return scopes


# --- value parsers -------------------------------------------------------------------------------

Parser = Callable[[Any], Any]


def boolean(value: Any) -> bool:
    """Parse true/false/1/0/yes/no/on/off (value parsers are shared with ykafka.config)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected a boolean (true / false)")


def optional_text(value: Any) -> str | None:
    """A string option that may be unset: None or blank -> None, else the stripped text."""
    text = "" if value is None else str(value).strip()
    return text or None


def optional(parse: Parser) -> Parser:
    """``parse``, except that None or blank text means unset (None)."""

    def parse_optional(value: Any) -> Any:
        return None if optional_text(value) is None else parse(value)

    return parse_optional


def int_range(lo: int, hi: int | None = None) -> Parser:
    """Integers from ``lo`` to ``hi`` (no upper bound when None)."""

    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError("expected an integer")
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        if hi is None and number < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and not lo <= number <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return number

    return parse


def float_range(lo: float, hi: float) -> Parser:
    def parse(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError("expected a number")
        try:
            number = float(str(value).strip())
        except ValueError:
            raise ValueError("expected a number") from None
        if number != number or not lo <= number <= hi:  # NaN check first
            raise ValueError(f"must be between {lo:g} and {hi:g}")
        return number

    return parse


def choice(*options: str, aliases: Mapping[str, str] | None = None) -> Parser:
    def parse(value: Any) -> str:
        text = str(value).strip()
        text = (aliases or {}).get(text, text)
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text

    return parse


def _int_list(lo: int, hi: int, allow_empty: bool) -> Parser:
    item = int_range(lo, hi)

    def parse(value: Any) -> tuple[int, ...]:
        if isinstance(value, list | tuple):
            parts = [str(v) for v in value]
        else:
            parts = [p for p in str(value).replace(" ", "").split(",") if p]
        if not parts and not allow_empty:
            raise ValueError("expected a comma-separated list with at least one integer")
        try:
            return tuple(item(p) for p in parts)
        except ValueError as exc:
            raise ValueError(f"list item {exc}") from None

    return parse


def _cluster_name(value: Any) -> str:
    text = str(value).strip()
    if not _NAME_RE.match(text):
        raise ValueError("expected a cluster name (letters, digits, '.', '_', '-')")
    return text


# --- the catalog -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    name: str
    parse: Parser
    applies: Apply
    default: Any
    help: str
    scopes: frozenset[ScopeKind] = ALL_SCOPES
    rdkafka: str | None = None  # the librdkafka property this key sets, if any
    rdkafka_aliases: tuple[str, ...] = ()  # older librdkafka names of that property, read from a local config
    #: a security switch (its change weakens enforcement): never taken from a config namespace, changed only
    #: through the MetaServer's admin API (``PUT /v1/admin/security``, audited) - issue 37
    locked: bool = False


_PRODUCER_SCOPES = frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})
_CONSUMER_SCOPES = frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.GROUP, ScopeKind.TOPIC})
_BYTES = 100_000_000

_KEYS: list[Key] = [
    Key("route.cluster", _cluster_name, Apply.SWITCH, None, "cluster the topic is written to / read from",
        frozenset({ScopeKind.GLOBAL, ScopeKind.TOPIC, ScopeKind.GROUP})),
    Key("route.standby", _cluster_name, Apply.IN_PLACE, None, "standby cluster for dual-DC failover",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})),
    Key("route.failover", choice("auto", "manual"), Apply.IN_PLACE, "manual",
        "whether writes fail over to the standby automatically",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})),
    Key("route.failback.order", choice("writes-first", "strict"), Apply.IN_PLACE, "writes-first",
        "at failback, new writes first (the outage's records synced back behind them) or strict per-key order "
        "(new writes spilled until the sync is done)",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})),
    Key("route.failback.hold.ms", int_range(0, 3_600_000), Apply.IN_PLACE, 120_000,
        "strict failback order: the longest new writes are held in the spill for the sync; then they go on, "
        "out of order", frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})),
    Key("producer.acks", choice("0", "1", "all", aliases={"-1": "all"}), Apply.REBUILD, "all",
        "broker acknowledgements required", _PRODUCER_SCOPES, "acks", ("request.required.acks",)),
    Key("producer.idempotence", boolean, Apply.REBUILD, True, "idempotent producer (needs acks=all)",
        _PRODUCER_SCOPES, "enable.idempotence"),
    Key("producer.partitioner", choice("murmur2", "consistent", "random", "round_robin", "sticky"),
        Apply.IN_PLACE, "murmur2", "partition choice for messages without an explicit partition",
        _PRODUCER_SCOPES),
    Key("producer.partitions.exclude", _int_list(0, 1_000_000, allow_empty=True), Apply.IN_PLACE, (),
        "partitions no message is sent to; keyed messages re-hash over the rest", _PRODUCER_SCOPES),
    Key("producer.linger.ms", int_range(0, 900_000), Apply.REBUILD, 5, "batching delay", _PRODUCER_SCOPES,
        "linger.ms", ("queue.buffering.max.ms",)),
    Key("producer.batch.size", int_range(1, 2_147_483_647), Apply.REBUILD, 1_000_000, "max batch bytes",
        _PRODUCER_SCOPES, "batch.size"),
    Key("producer.compression", choice("none", "gzip", "snappy", "lz4", "zstd"), Apply.REBUILD, "none",
        "compression codec", _PRODUCER_SCOPES, "compression.type", ("compression.codec",)),
    Key("producer.socket.send.buffer.bytes", int_range(0, _BYTES), Apply.REBUILD, 0, "0 = system default",
        _PRODUCER_SCOPES, "socket.send.buffer.bytes"),
    Key("producer.rate.limit.msgs", float_range(0, 1e9), Apply.IN_PLACE, 0.0,
        "messages per second per process, 0 = unlimited", _PRODUCER_SCOPES),
    Key("producer.rate.limit.bytes", float_range(0, 1e12), Apply.IN_PLACE, 0.0,
        "bytes per second per process, 0 = unlimited", _PRODUCER_SCOPES),
    Key("consumer.socket.receive.buffer.bytes", int_range(0, _BYTES), Apply.REBUILD, 0, "0 = system default",
        _CONSUMER_SCOPES, "socket.receive.buffer.bytes"),
    Key("consumer.assignment.strategy", choice("range", "roundrobin", "cooperative-sticky"), Apply.REJOIN,
        "range", "partition assignment strategy (classic protocol only: refused for a group.protocol=consumer "
        "group, whose broker assigns)", _CONSUMER_SCOPES, "partition.assignment.strategy"),
    Key("consumer.session.timeout.ms", int_range(1, 3_600_000), Apply.REJOIN, 45_000,
        "a member silent this long leaves the group (classic protocol only: refused for a group.protocol=consumer "
        "group, whose broker owns it as group.consumer.session.timeout.ms)", _CONSUMER_SCOPES, "session.timeout.ms"),
    Key("consumer.heartbeat.interval.ms", int_range(1, 3_600_000), Apply.REJOIN, 3000,
        "group heartbeat period (classic protocol only: refused for a group.protocol=consumer group, whose broker "
        "owns it as group.consumer.heartbeat.interval.ms)", _CONSUMER_SCOPES, "heartbeat.interval.ms"),
    Key("consumer.fetch.max.bytes", int_range(1, 2_147_483_135), Apply.REBUILD, 52_428_800,
        "max bytes per fetch response", _CONSUMER_SCOPES, "fetch.max.bytes"),
    Key("consumer.max.partition.fetch.bytes", int_range(1, 1_000_000_000), Apply.REBUILD, 1_048_576,
        "max bytes per partition per fetch", _CONSUMER_SCOPES, "max.partition.fetch.bytes"),
    Key("consumer.fetch.wait.max.ms", int_range(0, 300_000), Apply.REBUILD, 500, "max broker wait per fetch",
        _CONSUMER_SCOPES, "fetch.wait.max.ms"),
    Key("consumer.rate.limit.msgs", float_range(0, 1e9), Apply.IN_PLACE, 0.0,
        "messages per second per process, 0 = unlimited", _CONSUMER_SCOPES),
    Key("consumer.workers", int_range(1, 1024), Apply.IN_PLACE, 4, "worker pool size", _CONSUMER_SCOPES),
    Key("consumer.ordering", choice("none", "partition", "key"), Apply.IN_PLACE, "partition",
        "ordering guarantee of the worker pool", _CONSUMER_SCOPES),
    Key("consumer.paused", boolean, Apply.IN_PLACE, False, "pause fetching, stay in the group",
        _CONSUMER_SCOPES),
    Key("consumer.leave", boolean, Apply.IN_PLACE, False, "leave the group gracefully; rejoin when false",
        _CONSUMER_SCOPES),
    Key("consumer.retry.backoff.ms", _int_list(0, 86_400_000, allow_empty=False), Apply.IN_PLACE,
        (1000, 5000, 30000), "delay before each retry attempt", _CONSUMER_SCOPES),
    Key("consumer.retry.max.attempts", int_range(0, 100), Apply.IN_PLACE, 3, "retries before the DLQ",
        _CONSUMER_SCOPES),
    Key("consumer.dlq.enabled", boolean, Apply.IN_PLACE, True, "dead-letter after the last retry",
        _CONSUMER_SCOPES),
    Key("trace.enabled", boolean, Apply.IN_PLACE, False, "emit trace events"),
    Key("trace.sample.rate", float_range(0.0, 1.0), Apply.IN_PLACE, 0.01, "fraction of messages traced"),
    Key("topic.grade", choice("P0", "P1", "P2"), Apply.IN_PLACE, "P2", "grade-level defaults",
        frozenset({ScopeKind.GLOBAL, ScopeKind.TOPIC})),
    Key("auth.enabled", boolean, Apply.IN_PLACE, True, "MetaServer enforcement of app secrets",
        frozenset({ScopeKind.GLOBAL}), locked=True),
    # --- disaster recovery (spill / replay / dual-DC health) ---
    Key("spill.enabled", boolean, Apply.IN_PLACE, True,
        "spill undeliverable messages to the local disk queue (false: report them failed)", _PRODUCER_SCOPES),
    Key("spill.after.ms", int_range(100, 86_400_000), Apply.REBUILD, 10_000,
        "a partition holding messages with none acknowledged this long is a stalled cluster: everything its "
        "client holds is spilled (or sent to the standby) at once, in produce order (docs/disaster-recovery.md)",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER})),
    Key("health.down.failures", int_range(1, 1000), Apply.IN_PLACE, 3,
        "consecutive failed probes / transport errors that mark a cluster down",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER})),
    Key("health.down.after.ms", int_range(0, 3_600_000), Apply.IN_PLACE, 2000,
        "a cluster failing continuously this long is marked down (0 = count only)",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER})),
    Key("health.probe.interval.ms", int_range(50, 600_000), Apply.IN_PLACE, 500,
        "metadata probe period while a cluster is suspect or down (10x while healthy)",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER})),
    Key("route.active", choice("primary", "standby"), Apply.SWITCH, "primary",
        "manual dual-DC switch: standby moves writes to route.standby; back to primary copies the "
        "standby's writes of the window back (failback sync)",
        frozenset({ScopeKind.GLOBAL, ScopeKind.CLUSTER, ScopeKind.TOPIC})),
]

KEYS: dict[str, Key] = {key.name: key for key in _KEYS}

#: The security switches: a config namespace never sets them (the config service refuses to store them in a
#: ``ykafka.*`` namespace, the SDK and the MetaServer refuse them from one); only the MetaServer's admin API does.
LOCKED: frozenset[str] = frozenset(key.name for key in _KEYS if key.locked)
LOCKED_REASON = "a security switch: changed only through the MetaServer's admin API (PUT /v1/admin/security)"

#: Keys the broker owns for a group on the new consumer protocol (KIP-848, ``group.protocol=consumer``): it sets
#: the session timeout and heartbeat interval (``group.consumer.*`` broker settings) and runs the assignor, and
#: librdkafka refuses a consumer that sets them. Hot config setting one of them for such a group is refused.
BROKER_OWNED = ("consumer.assignment.strategy", "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")
BROKER_OWNED_REASON = ("owned by the broker under group.protocol=consumer (KIP-848): set "
                       "group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms or "
                       "group.consumer.assignors on the broker instead")


def consumer_protocol(rdkafka: Mapping[str, Any]) -> bool:
    """Whether librdkafka settings join the group with the new consumer protocol (KIP-848)."""
    return str(rdkafka.get("group.protocol", "classic")).strip().lower() == "consumer"

#: Defaults that a topic's grade switches on, below any explicit value at any scope.
GRADE_DEFAULTS: dict[str, dict[str, Any]] = {
    "P0": {"trace.enabled": True, "trace.sample.rate": 1.0},
    "P1": {"trace.enabled": True, "trace.sample.rate": 0.1},
    "P2": {},
}


def names_cluster(name: str) -> bool:
    """Whether the key's value names a registered cluster (the MetaServer checks it against its registry)."""
    found = KEYS.get(name)
    return found is not None and found.parse is _cluster_name


def key(name: str) -> Key:
    try:
        return KEYS[name]
    except KeyError:
        raise UnknownConfigKey(name) from None


def value(effective: Mapping[str, Any], name: str) -> Any:
    """``name``'s value in ``effective``, else its catalog default (the one place a default is written)."""
    return effective[name] if name in effective else KEYS[name].default


def applies(name: str) -> Apply | None:
    """How a change of ``name`` reaches a running client (None for a name outside the catalog)."""
    spec = KEYS.get(name)
    return None if spec is None else spec.applies


def by_apply(names: Iterable[str], prefix: str = "") -> dict[Apply, list[str]]:
    """Changed key names grouped by how they apply (only catalog keys starting with ``prefix``): what a
    client dispatches on, e.g. ``by_apply(changed, "consumer.")[Apply.REBUILD]``."""
    out: dict[Apply, list[str]] = {kind: [] for kind in Apply}
    for name in names:
        spec = KEYS.get(name)
        if spec is not None and name.startswith(prefix):
            out[spec.applies].append(name)
    return out


def parse(name: str, value: Any, scope: Scope | None = None) -> Any:
    """Validate one value; raise :class:`InvalidConfigValue` with the reason when it is not acceptable."""
    spec = key(name)
    if scope is not None and spec.locked:  # a namespace's value of a security switch is never taken
        raise InvalidConfigValue(name, value, LOCKED_REASON)
    if scope is not None and scope.kind not in spec.scopes:
        allowed = ", ".join(sorted(kind.value for kind in spec.scopes))
        raise InvalidConfigValue(name, value, f"cannot be set at scope {scope} (allowed: {allowed})")
    try:
        return spec.parse(value)
    except ValueError as exc:
        raise InvalidConfigValue(name, value, str(exc)) from None


def render(name: str, value: Any) -> str:
    """The string form stored in the config center (inverse of ``parse`` for typed values)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass
class LayerUpdate:
    """Result of validating a namespace's new contents against its previous good values."""

    values: dict[str, Any]
    rejected: dict[str, InvalidConfigValue]
    unknown: list[str]


def validate_layer(raw: Mapping[str, Any], previous: Mapping[str, Any] | None = None,
                   scope: Scope | None = None) -> LayerUpdate:
    """Validate a whole namespace. Rejected keys keep their previous good value; unknown keys are ignored."""
    values: dict[str, Any] = {}
    rejected: dict[str, InvalidConfigValue] = {}
    unknown: list[str] = []
    for name, value in raw.items():
        if name not in KEYS:
            unknown.append(name)
            continue
        try:
            values[name] = parse(name, value, scope)
        except InvalidConfigValue as exc:
            rejected[name] = exc
            if previous is not None and name in previous:
                values[name] = previous[name]
    return LayerUpdate(values, rejected, unknown)


def resolve(layers: Iterable[Mapping[str, Any]], names: Iterable[str] | None = None) -> dict[str, Any]:
    """Merge typed layers, most specific first, over grade defaults and built-in defaults."""
    ordered = list(layers)
    merged: dict[str, Any] = {}
    for name in names if names is not None else KEYS:
        for layer in ordered:
            if name in layer:
                merged[name] = layer[name]
                break
    grade = merged.get("topic.grade", KEYS["topic.grade"].default)
    for name, value in GRADE_DEFAULTS.get(grade, {}).items():
        merged.setdefault(name, value)
    for name in names if names is not None else KEYS:
        merged.setdefault(name, KEYS[name].default)
    return merged


def rdkafka_aliases(prefix: str) -> dict[str, str]:
    """librdkafka property (and its older names) -> catalog key, for the keys starting with ``prefix``: a
    local config's librdkafka value of one of these becomes that key's local default."""
    out: dict[str, str] = {}
    for spec in _KEYS:
        if spec.rdkafka is not None and spec.name.startswith(prefix):
            out[spec.rdkafka] = spec.name
            out.update(dict.fromkeys(spec.rdkafka_aliases, spec.name))
    return out


def rdkafka_properties(effective: Mapping[str, Any], prefix: str, adjust: bool = True) -> dict[str, Any]:
    """librdkafka properties for the ``producer.`` or ``consumer.`` keys of an effective config; ``adjust=False``:
    as the operator asked, before the adjustments the client makes (what drift reports compare)."""
    props: dict[str, Any] = {}
    for name, value in effective.items():
        spec = KEYS.get(name)
        if spec is None or spec.rdkafka is None or not name.startswith(prefix):
            continue
        if name.endswith("buffer.bytes") and value == 0:
            continue  # 0 means "leave the system default"
        props[spec.rdkafka] = render(name, value) if isinstance(value, bool) else value
    if adjust and prefix == "producer." and props.get("acks", "all") != "all":
        # librdkafka refuses idempotence without acks=all; acks wins because it is the operator's intent.
        props["enable.idempotence"] = False
    return props
