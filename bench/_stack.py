"""The local stack a producer benchmark runs against: a Tansu broker, the config service and the MetaServer on
free ports, seeded with one app, stopped by pid when the ``with`` block ends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ykafka.devstack import Stack, StackConfig, ephemeral_config


@dataclass(frozen=True)
class BenchStack:
    cfg: StackConfig
    home: Path
    env: dict[str, str]
    stack: Stack  # to stop one service mid-run (``stack.down(["metaserver"])``)

    def bootstrap(self) -> str:
        """The default cluster's bootstrap servers (for the raw confluent-kafka peer)."""
        return self.cfg.bootstrap(self.cfg.default_cluster)

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Local config of a ykafka client authenticated as the seeded app."""
        return {"ykafka.app.id": self.env["YKAFKA_APP_ID"], "ykafka.app.secret": self.env["YKAFKA_APP_SECRET"],
                "ykafka.metaserver": self.cfg.metaserver_url, "ykafka.cache.dir": str(self.home / "client"),
                **extra}


@contextmanager
def bench_stack() -> Iterator[BenchStack]:
    home = Path(tempfile.mkdtemp(prefix="ykafka-bench-"))
    cfg = ephemeral_config(home)
    stack = Stack(cfg)
    try:
        stack.up(["dc-a", "configcenter", "metaserver"], seed=False)
        yield BenchStack(cfg, home, stack.seed(), stack)
    finally:
        stack.down()
