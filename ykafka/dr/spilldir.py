"""The ``ykafka.spill.*`` local options (the one place their defaults are written: :class:`SpillSettings`), where
spill queues live, and the exclusive slot a client without a stable id takes in the spill directory (so a restarted
process finds what its predecessor spilled)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ykafka.catalog import boolean, choice, int_range, optional_text
from ykafka.config import Option, option, options_of
from ykafka.dr.journal import CommitMode
from ykafka.errors import ConfigError

_bytes_size = int_range(1_000)
_commit_mode = choice("sync", "async")
_positive_int = int_range(1)


@dataclass(frozen=True)
class SpillSettings:
    """How a spill queue keeps what it holds: the ``ykafka.spill.*`` options, whose defaults are also those of
    :class:`~ykafka.dr.queue.SpillQueue` and :class:`~ykafka.dr.engine.DrOptions`."""

    max_bytes: int = option("ykafka.spill.max.bytes", _bytes_size, 1 << 30,
                            "size cap of one cluster's spill queue; beyond it produce raises SpillFullError")
    commit: CommitMode = option("ykafka.spill.commit", _commit_mode, "sync",
                                "sync: produce returns after its spilled message is on disk (journal); async: "
                                "bounded wait")
    async_max_pending: int = option("ykafka.spill.async.max.pending", _positive_int, 100_000,
                                    "produce blocks while this many spilled messages await their commit to the "
                                    "spill store")
    fsync: bool = option("ykafka.spill.fsync", boolean, False,
                         "spilled messages are fsynced in group commits before they are replayed, so their delivery "
                         "callback means on stable storage and delivered (survives power loss; without it a spilled "
                         "message survives SIGKILL once produce returned); produce never waits for the disk")


#: the defaults of every ``ykafka.spill.*`` option
SPILL_DEFAULTS = SpillSettings()

OPTIONS = (
    Option("ykafka.spill.dir", optional_text, None, "spill queues (default <ykafka.cache.dir>/spill)",
           "YKAFKA_SPILL_DIR"),
    *options_of(SpillSettings),
)


class SpillSlot:
    """An exclusively held sub-directory ``<base>/<n>`` of a spill directory.

    A client without a stable client id takes the first slot no live process holds, so the next run of a
    crashed process finds (and replays) what the crash left in slot 0, and two producers of one app never
    share a queue.
    """

    def __init__(self, base: Path, max_slots: int = 256) -> None:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(max_slots):
            path = base / str(n)
            path.mkdir(exist_ok=True)
            fh = open(path / "slot.lock", "a+")  # noqa: SIM115 - held until release()
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self.path, self._fh = path, fh
            return
        raise ConfigError(f"all {max_slots} spill slots under {base} are in use")

    def release(self) -> None:
        if self._fh.closed:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()


def spill_dir(options: Mapping[str, Any], cache_dir: Path) -> Path:
    """The spill directory from local options: ``ykafka.spill.dir``, else ``<cache dir>/spill``."""
    raw = options.get("ykafka.spill.dir")
    return Path(raw).expanduser() if raw else cache_dir / "spill"
