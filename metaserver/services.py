"""What one MetaServer process holds: the engine, the shared token key, and clients of the config center.

None of it is state a peer could miss: the key is read from the database, the auth switch is a short
cache of the config center, the rest is connection plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet
from fastapi import Request
from sqlalchemy import Engine

from .apollo import ApolloOpenApi
from .authswitch import AuthSwitch
from .reach import RouteBook
from .settings import Settings
from .tokens import TokenCodec

if TYPE_CHECKING:
    from .reconciler import Reconciler


@dataclass
class Services:
    settings: Settings
    engine: Engine
    tokens: TokenCodec
    auth_switch: AuthSwitch
    apollo: ApolloOpenApi | None
    routes: RouteBook
    issuer: str  # the deployment's id, derived from the shared token key: the same on every peer
    box: Fernet  # seals the apps' Kafka passwords (metaserver/credentials.py)
    reconciler: Reconciler = None  # type: ignore[assignment]  # set right after construction (it needs us)


def services(request: Request) -> Services:
    """FastAPI dependency: the process's services."""
    return request.app.state.services
