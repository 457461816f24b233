"""Per-app access keys: what a key the MetaServer issued to one ykafka app may read (issue 37).

Apollo checks a config-service request against every enabled secret of the app id in the path; a secret that
verifies opens the whole app. The MetaServer hands each ykafka app its own secret under the one Apollo app that
holds every hot-config namespace, so here a secret may carry a *scope*: the app's ACL, the clusters it can
reach and the namespace prefix. A request signed with such a secret reads only the namespaces the scope allows,
decided by ``ykafka.acl.may_read_config`` (the same decision as the SDK's check and the broker's bindings):
``<prefix>.global``, the app's clusters, groups and topics. Any other namespace (``application``, another app's
topic) is refused on ``/configs`` and ``/configfiles`` (401, as a bad signature: nothing says whether it
exists) and left out of a ``/notifications/v2`` long poll (``filter_notifications``: see why there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from ykafka import acl as acl_rules
from ykafka.catalog import Scope

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class KeyScope:
    """The namespaces one per-app key opens."""

    owner: str  # the ykafka app id the MetaServer issued the key to (for logs)
    prefix: str
    acl: Mapping[str, tuple[str, ...]]
    clusters: frozenset[str]

    @classmethod
    def parse(cls, owner: str, text: str | None) -> KeyScope:
        """The scope stored with a key; a malformed one opens nothing but ``<prefix>.global`` of no prefix."""
        try:
            raw = json.loads(text or "")
            return cls(owner, str(raw["prefix"]),
                       {op: tuple(str(p) for p in (raw.get("acl") or {}).get(op) or ()) for op in acl_rules.OPERATIONS},
                       frozenset(str(c) for c in raw.get("clusters") or ()))
        except (ValueError, TypeError, KeyError, AttributeError):
            log.warning("configcenter.accesskey_scope_malformed", owner=owner)
            return cls(owner, "", {}, frozenset())

    def allows(self, namespace: str) -> bool:
        """Whether ``namespace`` (its stored spelling) is one this key's app may read."""
        if not self.prefix:
            return False
        scope = Scope.from_namespace(namespace, self.prefix)
        if scope is None:
            return False
        return acl_rules.may_read_config(self.acl, scope.kind.value, scope.name, self.clusters)


def scope_json(prefix: str, acl: Mapping[str, Any], clusters: list[str]) -> str:
    """A scope as it is stored and sent (the MetaServer builds the same dict: metaserver/domain/configkeys.py)."""
    return json.dumps({"prefix": prefix, "acl": {op: list(acl.get(op) or ()) for op in acl_rules.OPERATIONS},
                       "clusters": sorted(clusters)}, sort_keys=True)
