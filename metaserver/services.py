"""What one MetaServer process holds: the engine, the shared token key, and clients of the config center.

None of it is state a peer could miss: the key is read from the database, the auth switch is a short
cache of the config center, the rest is connection plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request
from sqlalchemy import Engine

from .domain.apollo import ApolloOpenApi
from .domain.authswitch import AuthSwitch
from .domain.reach import RouteBook
from .domain.sealing import Box, Sealer
from .domain.tokens import TokenCodec
from .settings import Settings


class Reconciling(Protocol):
    """What the routes and the grant path ask of the reconciler (metaserver/kafka/reconciler.py), which needs
    these services to run: a protocol here, so the two modules do not import each other."""

    def kick(self) -> None: ...

    def retire(self, name: str, spec: dict[str, Any]) -> None: ...

    def kick_and_wait(self, timeout_s: float) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Services:
    settings: Settings
    engine: Engine
    tokens: TokenCodec
    auth_switch: AuthSwitch
    apollo: ApolloOpenApi | None
    routes: RouteBook
    issuer: str  # the deployment's id, derived from the shared token key: the same on every peer
    box: Box  # seals the apps' Kafka passwords (metaserver/domain/credentials.py)
    sealer: Sealer  # the sealing key outside the database, and the signing keys under it (domain/sealing.py)
    reconciler: Reconciling = None  # type: ignore[assignment]  # set right after construction (it needs us)


def services(request: Request) -> Services:
    """FastAPI dependency: the process's services."""
    return request.app.state.services
