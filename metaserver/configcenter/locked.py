"""Security switches are never stored in a ``ykafka.*`` namespace (issue 37).

``auth.enabled`` once lived in ``ykafka.global``, so whoever held the config service's Open API token (on the local
stack a public default) could release ``auth.enabled=false`` and make the MetaServer hand out grants without
checking signatures. The switch now lives in the MetaServer's database (``PUT /v1/admin/security``, audited); this
service refuses to store any of ``ykafka.catalog.LOCKED`` in a namespace the SDK and the MetaServer read, whoever
asks, as an item or inside a release, with a 403 that names the rule and never the value. Other apps' namespaces
are untouched (an unrelated app may well have its own ``auth.enabled``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ykafka import catalog

from .errors import Forbidden

_PREFIX = catalog.NAMESPACE_PREFIX.lower() + "."
_LOCKED = {name.lower() for name in catalog.LOCKED}


def check(namespace: str, keys: Iterable[str]) -> None:
    """Raise :class:`Forbidden` when ``keys`` hold a security switch and ``namespace`` is one of ykafka's."""
    if not namespace.lower().startswith(_PREFIX):
        return
    for key in keys:
        name = key.strip().lower()
        if name in _LOCKED:
            raise Forbidden("%s is %s; a config namespace never holds it", name, catalog.LOCKED_REASON)
