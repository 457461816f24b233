"""Operator tooling: the MetaServer admin HTTP client and the ``ykafka admin`` CLI."""

from __future__ import annotations

from ykafka.admin.client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError"]
