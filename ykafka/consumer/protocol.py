"""The group protocol a consumer joins with, and what hot config may set under it.

Under the new consumer protocol (KIP-848, ``group.protocol=consumer``) the broker owns the session timeout, the
heartbeat interval and the assignor, and librdkafka refuses a consumer that sets them. So such a consumer builds
its handle without those keys' values, and a value hot config sets for them is refused with that reason (reported
once per release, like any rejected value); the MetaServer refuses it before it is written for a group whose
members report this protocol (``metaserver/domain/hotconfig.py``). A value the user sets in the local config is theirs:
librdkafka refuses it with its own error, as confluent-kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from ykafka import catalog
from ykafka.errors import InvalidConfigValue
from ykafka.hotconfig import DEFAULT, LOCAL
from ykafka.runtime import Runtime

log = structlog.get_logger(__name__)


class GroupProtocol:
    """``classic`` or ``consumer`` for one consumer, from its local librdkafka settings."""

    def __init__(self, rdkafka: Mapping[str, Any], runtime: Runtime) -> None:
        self.consumer = catalog.consumer_protocol(rdkafka)
        self.name = "consumer" if self.consumer else "classic"
        self._runtime = runtime
        self._reported: set[tuple[str, str, str, str | None]] = set()

    def effective(self, effective: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, Any]:
        """``effective`` without the broker-owned keys under the consumer protocol (a local value stays, for
        librdkafka to refuse); each one a hot-config namespace sets is reported refused."""
        if not self.consumer:
            return dict(effective)
        out = dict(effective)
        release_keys: dict[str, str] | None = None
        for name in catalog.BROKER_OWNED:
            source = sources.get(name, DEFAULT)
            if source == LOCAL:
                continue
            value = out.pop(name, None)
            if source == DEFAULT:
                continue
            if release_keys is None:
                release_keys = self._runtime.release_keys()
            self._report(source, name, value, release_keys.get(source))
        return out

    def refuse(self, changes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, InvalidConfigValue]]:
        """Split raw changes (``Consumer.apply``) into those to apply and the broker-owned ones refused."""
        if not self.consumer:
            return dict(changes), {}
        refused = {name: InvalidConfigValue(name, value, catalog.BROKER_OWNED_REASON)
                   for name, value in changes.items() if name in catalog.BROKER_OWNED}
        return {k: v for k, v in changes.items() if k not in refused}, refused

    def _report(self, namespace: str, name: str, value: Any, release_key: str | None) -> None:
        shown = catalog.render(name, value)
        if (namespace, name, shown, release_key) in self._reported:
            return
        self._reported.add((namespace, name, shown, release_key))
        log.warning("ykafka.config.rejected", namespace=namespace, key=name, value=shown,
                    reason=catalog.BROKER_OWNED_REASON)
        self._runtime.record_error({"type": "config_rejected", "namespace": namespace, "key": name, "value": shown,
                                    "reason": catalog.BROKER_OWNED_REASON, "release_key": release_key})
