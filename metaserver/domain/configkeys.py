"""Each app's own config-center access key (issue 37).

Before, every grant carried the config service's one shared access-key secret, so any app could read every
app's, cluster's, group's and topic's namespace. Now a grant carries a key minted for that app alone:

* **Minted** on the app's first grant (and again after its secret is rotated or it was disabled), 32 hex
  characters like Apollo's, kept in ``ms_configcenter_keys`` sealed under the sealing key outside the database
  (domain/sealing.py, the same box as the Kafka passwords): a database copy alone does not yield it.
* **Scoped**: the MetaServer puts it on the config service (``PUT /openapi/v1/apps/{apolloAppId}/appkeys/{app}``,
  metaserver/configcenter/openapi/accesskeys.py) with the app's scope: its ACL, the clusters its grants reached
  and the namespace prefix. The config service accepts a signature made with it only for the namespaces
  ``ykafka.acl.may_read_config`` allows (metaserver/configcenter/keyscope.py).
* **Kept in step**: a grant pushes the scope when it differs (a new ACL, a cluster newly reached); every admin
  change of the app (ACL, enable, disable, delete, secret rotation) calls :func:`refresh` at once, and every
  reconciler pass runs :func:`sync` over all apps (retrying what the config service missed while it was down).
* **Retired** when the app is disabled, deleted or its secret rotated: deleted from the config service at the
  admin call (its other replicas on the same database drop it within their credential refresh, 1 s), and the
  row with it, so enabling the app again mints a new key.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from cryptography.fernet import InvalidToken
from sqlalchemy import delete, select, update

from ykafka import acl as acl_rules
from ykafka.catalog import NAMESPACE_PREFIX

from ..services import Services
from ..storage import db
from ..storage.models import apps, clusters, configcenter_keys
from .apollo import ApolloError

log = structlog.get_logger("metaserver.domain.configkeys")


def enabled(svc: Services) -> bool:
    return svc.settings.app_keys and svc.apollo is not None


def scope_of(acl: Mapping[str, Iterable[str]], reached: Iterable[str]) -> dict[str, Any]:
    """The scope as the config service stores it (keyscope.scope_json builds the same)."""
    return {"prefix": NAMESPACE_PREFIX, "acl": {op: list(acl.get(op) or ()) for op in acl_rules.OPERATIONS},
            "clusters": sorted(set(reached))}


def _unseal(svc: Services, sealed: str) -> str | None:
    try:
        return svc.box.decrypt(sealed.encode()).decode()
    except InvalidToken:  # sealed under a key this MetaServer lacks: minted again
        return None


def for_grant(svc: Services, app: Mapping[str, Any], reached: Iterable[str]) -> str | None:
    """The app's own key for a grant reaching ``reached``; None when per-app keys are off or the config service
    could not take a new one (the grant goes out without it; the next grant or pass retries)."""
    if not enabled(svc):
        return None
    app_id, generation = str(app["app_id"]), int(app["key_generation"])
    with db.read(svc.engine) as conn:
        found = conn.execute(select(configcenter_keys).where(configcenter_keys.c.app_id == app_id)).mappings().first()
    row: Mapping[str, Any] | None = dict(found) if found is not None else None
    secret = _unseal(svc, row["secret"]) if row is not None and row["key_generation"] == generation else None
    if row is None or secret is None:
        row = _mint(svc, app_id, generation)
        secret = _unseal(svc, row["secret"])
        if secret is None:
            return None
    kept = set(row["scope"]["clusters"]) if row["scope"] else set()
    want = scope_of(app.get("acl") or {}, kept | set(reached))
    if row["scope"] != want and not _push(svc, app_id, row["secret"], secret, want):
        return secret if row["scope"] is not None else None  # an older scope is on the service: still usable
    return secret


def _mint(svc: Services, app_id: str, generation: int) -> Mapping[str, Any]:
    """A new sealed key for (app, generation) unless another request or peer made one first; the row."""
    with db.write(svc.engine) as conn:
        row = conn.execute(select(configcenter_keys).where(configcenter_keys.c.app_id == app_id)).mappings().first()
        if row is None or row["key_generation"] != generation or _unseal(svc, row["secret"]) is None:
            sealed = svc.box.encrypt(secrets.token_hex(16).encode()).decode()
            values = {"secret": sealed, "key_generation": generation, "scope": None, "created_at": time.time()}
            db.upsert(conn, configcenter_keys, {"app_id": app_id, **values}, ["app_id"])
            row = conn.execute(select(configcenter_keys).where(configcenter_keys.c.app_id == app_id)).mappings().one()
            log.info("configcenter key minted", app_id=app_id, key_generation=generation)
        return dict(row)


def _push(svc: Services, app_id: str, sealed: str, secret: str, scope: dict[str, Any]) -> bool:
    assert svc.apollo is not None
    try:
        svc.apollo.put_app_key(app_id, secret, scope)
    except ApolloError as exc:
        log.warning("cannot put an app's config-center key; retried at the next grant or pass", app_id=app_id,
                    error=str(exc)[:300])
        return False
    with db.write(svc.engine) as conn:  # only if the key is still the one pushed (a peer may have re-minted)
        conn.execute(update(configcenter_keys).where(configcenter_keys.c.app_id == app_id,
                                                     configcenter_keys.c.secret == sealed).values(scope=scope))
    return True


def _retire(svc: Services, app_id: str, sealed: str) -> bool:
    """Delete the app's key on the config service, then the row holding ``sealed``. A key a grant minted in
    between (after a rotation) was deleted on the service too: its row is marked unpushed, so it goes back."""
    assert svc.apollo is not None
    try:
        svc.apollo.delete_app_key(app_id)
    except ApolloError as exc:
        log.warning("cannot retire an app's config-center key; retried at the next pass", app_id=app_id,
                    error=str(exc)[:300])
        return False
    with db.write(svc.engine) as conn:
        conn.execute(delete(configcenter_keys).where(configcenter_keys.c.app_id == app_id,
                                                     configcenter_keys.c.secret == sealed))
        conn.execute(update(configcenter_keys).where(configcenter_keys.c.app_id == app_id).values(scope=None))
    log.info("configcenter key retired", app_id=app_id)
    return True


def refresh(svc: Services, app_id: str) -> None:
    """After an admin change of ``app_id``: retire its key (disabled, deleted, secret rotated) or push its new
    scope, now. Never raises (the reconciler's pass retries)."""
    if enabled(svc):
        try:
            sync(svc, only=app_id)
        except Exception as exc:  # noqa: BLE001 - the database or the config service went away: the pass retries
            log.warning("config-center key refresh failed", app_id=app_id, error=str(exc)[:300])


def sync(svc: Services, only: str | None = None) -> dict[str, int]:
    """Bring the config service's per-app keys in line with the apps: retire those of disabled, deleted or
    rotated apps, push changed scopes, and (over all apps) delete keys on the service that no app owns."""
    counts = {"pushed": 0, "retired": 0}
    if not enabled(svc):
        return counts
    with db.read(svc.engine) as conn:
        query = select(configcenter_keys)
        app_query = select(apps.c.app_id, apps.c.enabled, apps.c.key_generation, apps.c.acl)
        if only is not None:
            query = query.where(configcenter_keys.c.app_id == only)
            app_query = app_query.where(apps.c.app_id == only)
        rows = [dict(r) for r in conn.execute(query).mappings()]
        known = {r["app_id"]: dict(r) for r in conn.execute(app_query).mappings()}
        registered = set(conn.execute(select(clusters.c.name)).scalars())
    for row in rows:
        app = known.get(row["app_id"])
        if app is None or not app["enabled"] or app["key_generation"] != row["key_generation"]:
            counts["retired"] += _retire(svc, row["app_id"], row["secret"])
            continue
        reached = set(row["scope"]["clusters"]) & registered if row["scope"] else set()
        want = scope_of(app["acl"] or {}, reached)
        secret = _unseal(svc, row["secret"])
        if row["scope"] != want and secret is not None:
            counts["pushed"] += _push(svc, row["app_id"], row["secret"], secret, want)
    if only is None:
        assert svc.apollo is not None
        try:
            listed = set(svc.apollo.app_keys())
            with db.read(svc.engine) as conn:  # read after listing: a key is stored before it is put there
                owned = set(conn.execute(select(configcenter_keys.c.app_id)).scalars())
            for owner in listed - owned:  # e.g. a database restored from before a delete
                svc.apollo.delete_app_key(owner)
                counts["retired"] += 1
                log.warning("config-center key no app owns deleted", owner=owner)
        except ApolloError as exc:
            log.warning("cannot list the config service's app keys", error=str(exc)[:300])
    return counts
