"""Local ``ykafka.*`` options are declared once, in their feature's ``OPTIONS`` table, and every table is collected
(``ykafka.config.OPTION_MODULES``): a module under ykafka/ that declares options the registry does not load would
make them unknown to a client that never imported it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from ykafka import config
from ykafka.config import Option, option, options_of, settings_from
from ykafka.consumer.settings import ConsumerSettings
from ykafka.dr.engine import DrOptions
from ykafka.dr.queue import SpillQueue
from ykafka.dr.spilldir import SPILL_DEFAULTS, SpillSettings
from ykafka.errors import ConfigError


def _declaring_modules() -> set[str]:
    """Modules under ykafka/ that import ``Option`` / ``option`` from ykafka.config or assign a module-level
    ``OPTIONS``, read from the source (no import decides it)."""
    found = set()
    for path in sorted((ROOT / "ykafka").rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == "OPTIONS" for t in targets):
                found.add(module)
            if (isinstance(node, ast.ImportFrom) and node.module == "ykafka.config"
                    and {a.name for a in node.names} & {"Option", "option"}):
                found.add(module)
    return found


def test_every_module_declaring_options_is_collected() -> None:
    assert _declaring_modules() == {"ykafka.config", *config.OPTION_MODULES}


def test_a_fresh_process_knows_every_option_before_importing_a_feature() -> None:
    probe = ("import sys, ykafka.config as c; names = sorted(c.options()); "
             "print(len(names), 'ykafka.spill.fsync' in names, 'ykafka.consumer.batch.size' in names, "
             "'ykafka.trace.linger.ms' in names, 'ykafka.message.id' in names)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         check=True).stdout.split()
    assert out == [str(len(config.options())), "True", "True", "True", "True"]
    declared = [o.name for module in config.OPTION_MODULES for o in sys.modules[module].OPTIONS]
    assert sorted(config.options()) == sorted([o.name for o in config.OPTIONS] + declared)


def test_spill_defaults_have_one_source() -> None:
    queue = inspect.signature(SpillQueue).parameters
    assert (queue["max_bytes"].default, queue["commit"].default, queue["fsync"].default,
            queue["async_max_pending"].default) == (1 << 30, "sync", False, 100_000)
    assert dataclasses.astuple(SPILL_DEFAULTS) == (1 << 30, "sync", 100_000, False)
    dr = DrOptions(Path("/nowhere"))
    assert (dr.spill_max_bytes, dr.spill_commit, dr.spill_fsync, dr.spill_async_max_pending) == (
        SPILL_DEFAULTS.max_bytes, SPILL_DEFAULTS.commit, SPILL_DEFAULTS.fsync, SPILL_DEFAULTS.async_max_pending)
    loaded = config.load({"bootstrap.servers": "x:1"}, "producer")
    assert settings_from(SpillSettings, loaded.options) == SPILL_DEFAULTS
    given = config.load({"bootstrap.servers": "x:1", "ykafka.spill.max.bytes": "5000", "ykafka.spill.commit": "async"},
                        "producer")
    assert settings_from(SpillSettings, given.options) == SpillSettings(max_bytes=5000, commit="async")


def test_a_settings_dataclass_is_its_option_table() -> None:
    names = [o.name for o in options_of(ConsumerSettings)]
    fields = [f for f in dataclasses.fields(ConsumerSettings) if f.init]
    assert names[0] == "ykafka.consumer.max.inflight.per.partition" and len(names) == len(fields) >= 9, names
    assert all(config.options()[o.name] == o for o in options_of(ConsumerSettings))
    assert ConsumerSettings().batch_size == 500
    assert ConsumerSettings.from_options({"ykafka.consumer.batch.size": 7}).batch_size == 7


def test_unknown_and_bad_options_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown ykafka option 'ykafka\.spill\.maxbytes' \(known: .*"
                                          r"ykafka\.spill\.max\.bytes"):
        config.load({"bootstrap.servers": "x:1", "ykafka.spill.maxbytes": "1"}, "producer")
    with pytest.raises(ConfigError, match=r"invalid value 'soon' for ykafka\.consumer\.batch\.size"):
        config.load({"bootstrap.servers": "x:1", "ykafka.consumer.batch.size": "soon"}, "consumer")


def test_an_option_declared_twice_or_outside_ykafka_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class Twice:
        a: int = option("ykafka.consumer.batch.size", int, 1, "again")

    assert options_of(Twice) == (Option("ykafka.consumer.batch.size", int, 1, "again"),)
    base = config.OPTIONS
    monkeypatch.setattr(config, "OPTIONS", (*base, *options_of(Twice)))
    config._registry.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"option 'ykafka\.consumer\.batch\.size' is declared twice"):
            config.options()
        monkeypatch.setattr(config, "OPTIONS", (*base, Option("kafka.typo", int, 1, "outside")))
        config._registry.cache_clear()
        with pytest.raises(ValueError, match=r"option 'kafka\.typo': ykafka options start with 'ykafka\.'"):
            config.options()
    finally:
        monkeypatch.undo()
        config._registry.cache_clear()
    assert "ykafka.consumer.batch.size" in config.options()
