"""The local configuration of a ykafka client: identity, ``ykafka.*`` options and librdkafka pass-through.

A client is built from one flat dict, like confluent-kafka's. It holds three kinds of keys:

* ``ykafka.*`` options (identity, MetaServer / config-center coordinates, bounds). Unknown ones are an
  error at construction, because a typo there would silently change behaviour.
* catalog keys (``producer.acks``, ``route.cluster``, ...): local defaults below every hot-config scope.
* everything else: librdkafka properties passed through. Those that a catalog key also sets
  (``acks``, ``linger.ms``, ...) become local defaults of that key, so the config center can override them.

Identity can also come from the environment (``YKAFKA_APP_ID``, ``YKAFKA_APP_SECRET``,
``YKAFKA_METASERVER``, ``YKAFKA_CACHE_DIR``, ``YKAFKA_CONFIGCENTER_URL``).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from itertools import starmap
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from ykafka import catalog, process
from ykafka.endpoints import parse_urls
from ykafka.errors import ConfigError, InvalidConfigValue

Role = Literal["producer", "consumer"]


@dataclass(frozen=True)
class Option:
    """One ``ykafka.*`` local option, declared once in its feature's module-level ``OPTIONS`` table."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    env: str | None = None


T = TypeVar("T")
_OPTION = "ykafka.option"


def option(name: str, parse: Callable[[Any], Any], default: T, help: str, env: str | None = None) -> T:
    """A settings-dataclass field that is also a local option: its name, parser, default and help written once
    (collect them with :func:`options_of`, fill the dataclass with :func:`settings_from`)."""
    declared = Option(name, parse, default, help, env)
    return cast(T, field(default=default, metadata={_OPTION: declared}))


def options_of(cls: type) -> tuple[Option, ...]:
    """The options a settings dataclass declares with :func:`option`, in field order."""
    return tuple(f.metadata[_OPTION] for f in fields(cls) if _OPTION in f.metadata)


def settings_from(cls: type[T], options: Mapping[str, Any]) -> T:
    """A settings dataclass from parsed options (``LocalConfig.options``); missing options keep their defaults."""
    return cls(**{f.name: options[f.metadata[_OPTION].name] for f in fields(cls)  # type: ignore[arg-type]
                  if _OPTION in f.metadata and f.metadata[_OPTION].name in options})


def _str(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


_opt_str = catalog.optional_text


def _url(value: Any) -> str | None:
    text = _opt_str(value)
    if text is None:
        return None
    if not text.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return text.rstrip("/")


def _urls(value: Any) -> str | None:
    """One URL or a comma-separated list of equivalent instances (ykafka.endpoints picks among them)."""
    text = _opt_str(value)
    return None if text is None else ",".join(parse_urls(text))


_ms = catalog.int_range
_bool = catalog.boolean


#: The options of the client's identity, control plane and bounds; features declare theirs beside them.
OPTIONS: tuple[Option, ...] = tuple(starmap(Option, [
    ("ykafka.app.id", _opt_str, None, "application id registered at the MetaServer", "YKAFKA_APP_ID"),
    ("ykafka.app.secret", _opt_str, None, "application secret (never sent; signs requests)", "YKAFKA_APP_SECRET"),
    ("ykafka.metaserver", _urls, None, "MetaServer base URL, or several peer instances comma-separated "
     "(random start, failover); unset = local mode", "YKAFKA_METASERVER"),
    ("ykafka.cache.dir", _opt_str, None, "grant / config disk cache (default ~/.cache/ykafka)", "YKAFKA_CACHE_DIR"),
    ("ykafka.client.id", _opt_str, None, "client id reported to the MetaServer (default app-host-pid-n)", None),
    ("ykafka.client.ip", _opt_str, None, "IP sent to the config center for gray releases (default: detected)",
     "YKAFKA_CLIENT_IP"),
    ("ykafka.client.label", _opt_str, None, "label sent to the config center (Apollo's apollo.label): a gray "
     "release to a label reaches every client carrying it, whatever its IP", "YKAFKA_CLIENT_LABEL"),
    ("ykafka.configcenter.url", _urls, None, "config-center URL, or several instances comma-separated (random "
     "start, failover); overrides the grant's (local mode: enables hot config)", "YKAFKA_CONFIGCENTER_URL"),
    ("ykafka.configcenter.meta", _urls, None, "meta URL(s): the config-service instances are those its "
     "/services/config lists (used when ykafka.configcenter.url is unset)", "YKAFKA_CONFIGCENTER_META"),
    ("ykafka.configcenter.app.id", _str, "ykafka", "Apollo appId of the hot-config namespaces", None),
    ("ykafka.configcenter.cluster", _str, "default", "Apollo cluster", None),
    ("ykafka.configcenter.namespace.prefix", _str, catalog.NAMESPACE_PREFIX, "namespace prefix", None),
    ("ykafka.configcenter.secret", _opt_str, None, "Apollo access-key secret", None),
    ("ykafka.configcenter.longpoll.timeout.ms", _ms(1000, 600_000), 90_000,
     "client read timeout of a long poll (server holds 60 s)", None),
    ("ykafka.configcenter.refresh.interval.ms", _ms(1000, 86_400_000), 300_000,
     "fallback re-fetch of every namespace, as Apollo's own client does", None),
    ("ykafka.configcenter.fetch.timeout.ms", _ms(50, 60_000), 2000,
     "bound of the synchronous fetch of a topic's namespace before its first send", None),
    ("ykafka.metaserver.timeout.ms", _ms(100, 120_000), 5000, "HTTP timeout towards the MetaServer", None),
    ("ykafka.acl.cache.ttl.ms", _ms(0, 86_400_000), 60_000, "how long an ACL decision is cached", None),
    ("ykafka.report.enabled", _bool, True, "post client reports to the MetaServer", None),
    ("ykafka.throttle.max.wait.ms", _ms(0, 3_600_000), 5000,
     "longest a throttled produce waits before ThrottledError", None),
    ("ykafka.metadata.refresh.ms", _ms(100, 3_600_000), 30_000, "partition-count cache lifetime", None),
    ("ykafka.local.clusters", _opt_str, None, "local mode: extra named clusters, 'name=host:port[,host:port];"
     "name2=...'", None),
    ("ykafka.local.default.cluster", _opt_str, None, "local mode: the default cluster name (default 'default' "
     "when bootstrap.servers is set, else the first of ykafka.local.clusters)", None),
    ("ykafka.swap.timeout.ms", _ms(100, 3_600_000), 60_000,
     "longest a rebuild / route switch waits for the old client to drain a topic", None),
]))

#: Every module with an ``OPTIONS`` table besides this one. Each is loaded before a config is parsed, so whether
#: ``ykafka.dr.enabled`` is known never depends on which parts of the SDK an application imported first;
#: tests/test_config_options.py fails when a module under ykafka/ declares a table missing here.
OPTION_MODULES = ("ykafka.consumer.settings", "ykafka.dr.attach", "ykafka.dr.spilldir", "ykafka.metrics",
                  "ykafka.observability", "ykafka.producer.state", "ykafka.sink")


@functools.cache
def _registry() -> dict[str, Option]:
    found: dict[str, Option] = {}
    for table in (OPTIONS, *(importlib.import_module(name).OPTIONS for name in OPTION_MODULES)):
        for declared in table:
            if not declared.name.startswith("ykafka."):
                raise ValueError(f"option {declared.name!r}: ykafka options start with 'ykafka.'")
            if declared.name in found:
                raise ValueError(f"option {declared.name!r} is declared twice")
            found[declared.name] = declared
    return found


def options() -> dict[str, Option]:
    """All known ``ykafka.*`` options (for docs and the CLI)."""
    return dict(_registry())


@dataclass
class LocalConfig:
    """A parsed local configuration. ``options`` holds every ``ykafka.*`` option with defaults filled in."""

    role: Role
    options: dict[str, Any]
    catalog_defaults: dict[str, Any]  # typed catalog values given locally (local layer)
    rdkafka: dict[str, Any]  # librdkafka pass-through (minus what moved into catalog_defaults)
    explicit: frozenset[str] = field(default_factory=frozenset)  # ykafka.* options set by the user / env

    # --- convenient views -------------------------------------------------------------------------

    @property
    def app_id(self) -> str | None:
        return self.options["ykafka.app.id"]

    @property
    def app_secret(self) -> str | None:
        return self.options["ykafka.app.secret"]

    @property
    def metaserver(self) -> str | None:
        return self.options["ykafka.metaserver"]

    @property
    def local_mode(self) -> bool:
        """No MetaServer: local config alone, cluster ``default`` from ``bootstrap.servers``, no ACL."""
        return self.metaserver is None

    @property
    def cache_dir(self) -> Path:
        raw = self.options["ykafka.cache.dir"]
        if raw:
            return Path(raw).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "ykafka"

    def new_client_id(self) -> str:
        """A new client instance's own id (``ykafka.process.instance_id``): each Producer / Consumer has one."""
        explicit = self.options["ykafka.client.id"]
        return process.instance_id(self.app_id or "local", str(explicit) if explicit else None)

    def local_clusters(self) -> dict[str, str]:
        """Local mode: cluster name -> bootstrap servers (``bootstrap.servers`` is cluster ``default``)."""
        out: dict[str, str] = {}
        bootstrap = self.rdkafka.get("bootstrap.servers") or self.rdkafka.get("metadata.broker.list")
        if bootstrap:
            out["default"] = str(bootstrap)
        for part in str(self.options.get("ykafka.local.clusters") or "").split(";"):
            name, sep, servers = part.partition("=")
            if sep and name.strip() and servers.strip():
                out[name.strip()] = servers.strip()
            elif part.strip():
                raise ConfigError(f"ykafka.local.clusters: expected name=host:port, got {part.strip()!r}")
        return out

    @property
    def local_default_cluster(self) -> str:
        explicit = self.options.get("ykafka.local.default.cluster")
        if explicit:
            return str(explicit)
        clusters = self.local_clusters()
        return "default" if "default" in clusters else next(iter(clusters), "default")

    def ms(self, name: str) -> float:
        """An ``*.ms`` option in seconds."""
        return float(self.options[name]) / 1000.0

    def get(self, name: str) -> Any:
        return self.options[name]


def load(conf: Mapping[str, Any] | None, role: Role, env: Mapping[str, str] | None = None) -> LocalConfig:
    """Parse a client config dict (plus env); raise :class:`ConfigError` naming the bad key and why."""
    known_options = _registry()
    env = os.environ if env is None else env
    raw = dict(conf or {})
    values: dict[str, Any] = {}
    explicit: set[str] = set()
    catalog_defaults: dict[str, Any] = {}
    rdkafka: dict[str, Any] = {}
    aliases = catalog.rdkafka_aliases(f"{role}.")

    for name, value in raw.items():
        if not isinstance(name, str):
            raise ConfigError(f"config keys must be strings, got {name!r}")
        if name.startswith("ykafka."):
            declared = known_options.get(name)
            if declared is None:
                known = ", ".join(sorted(known_options))
                raise ConfigError(f"unknown ykafka option {name!r} (known: {known})")
            values[name] = _parse_option(declared, value)
            explicit.add(name)
        elif name in catalog.KEYS:
            try:
                catalog_defaults[name] = catalog.parse(name, value)
            except InvalidConfigValue as exc:
                raise ConfigError(f"invalid local config: {exc}") from None
        elif name in aliases:
            try:
                catalog_defaults.setdefault(aliases[name], catalog.parse(aliases[name], value))
            except InvalidConfigValue as exc:
                raise ConfigError(f"invalid local config {name!r}: {exc}") from None
        else:
            rdkafka[name] = value

    for declared in known_options.values():
        if declared.name in values:
            continue
        if declared.env and env.get(declared.env):
            values[declared.name] = _parse_option(declared, env[declared.env], source=f"env {declared.env}")
            explicit.add(declared.name)
        else:
            values[declared.name] = declared.default

    cfg = LocalConfig(role, values, catalog_defaults, rdkafka, frozenset(explicit))
    if cfg.metaserver is not None:
        if not cfg.app_id or not cfg.app_secret:
            raise ConfigError("ykafka.metaserver is set: ykafka.app.id and ykafka.app.secret are required "
                              "(or YKAFKA_APP_ID / YKAFKA_APP_SECRET)")
    else:
        clusters = cfg.local_clusters()
        if not clusters:
            raise ConfigError("no MetaServer configured (ykafka.metaserver / YKAFKA_METASERVER) and no "
                              "bootstrap.servers: one of them is required")
        default = cfg.local_default_cluster
        if default not in clusters:
            raise ConfigError(f"ykafka.local.default.cluster {default!r} is not a configured cluster "
                              f"({', '.join(sorted(clusters))})")
    return cfg


def _parse_option(option: Option, value: Any, source: str = "") -> Any:
    try:
        return option.parse(value)
    except ValueError as exc:
        where = f" ({source})" if source else ""
        raise ConfigError(f"invalid value {value!r} for {option.name}{where}: {exc}") from None
