"""The local stack a producer benchmark runs against: a Tansu broker, the config service and the MetaServer (or
several of each) on free ports, seeded with one app, stopped by pid when the ``with`` block ends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ykafka.devstack import Stack, StackConfig, ephemeral_config, replica_name


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
                "ykafka.metaserver": ",".join(self.cfg.metaserver_urls), "ykafka.cache.dir": str(self.home / "client"),
                **extra}


@contextmanager
def bench_stack(replicas: int = 1) -> Iterator[BenchStack]:
    """``replicas``: config services and MetaServers each (``configcenter``, ``configcenter-2``, ...)."""
    home = Path(tempfile.mkdtemp(prefix="ykafka-bench-"))
    cfg = ephemeral_config(home, replicas=replicas)
    stack = Stack(cfg)
    control = [replica_name(service, i) for service in ("configcenter", "metaserver") for i in range(replicas)]
    try:
        stack.up(["dc-a", *control], seed=False)
        yield BenchStack(cfg, home, stack.seed(), stack)
    finally:
        stack.down()
