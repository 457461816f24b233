"""A push's targets resolved against the live clients: the gray rule it publishes and the preview it answers
(shared by the admin API, the console and rollout plan steps)."""

from __future__ import annotations

from typing import Any

from ..domain.hotconfig import ConfigRejected, PushPlan
from ..services import Services
from ..storage import db
from . import targets as tg


def resolve(svc: Services, plan: PushPlan, t: tg.Targets | None,
            keep: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Point ``plan`` at the clients ``t`` selects (per-instance targets become the instances' own labels) and
    answer the preview: how many clients in scope, which are reached (split by app / cluster / host /
    version) and which cannot honour the change. A per-instance target reaching no live client is refused."""
    with db.read(svc.engine) as conn:
        clients = tg.in_scope(conn, svc.settings.renew_interval, plan.scope, plan.namespace)
    keys = sorted(set(plan.set) | set(plan.delete))
    if t is not None and not t.empty():
        if t.per_instance():
            found = tg.preview(clients, t, plan.namespace, keys, keep)
            able = [c for c in found["reached"] if not tg.cannot_honour(c, [], True)]
            if not able:
                raise ConfigRejected({"targets": f"{t.describe()} reaches none of the {len(clients)} live "
                                                 "clients in scope"}, "targets reach no client")
            plan.ips, plan.labels = None, tg.instance_labels(sorted(str(c["client_id"]) for c in able))
        else:
            plan.ips, plan.labels = t.ips, t.labels
            found = tg.preview(clients, t, plan.namespace, keys)
    else:
        found = tg.preview(clients, None if not plan.gray else tg.Targets(ips=plan.ips, labels=plan.labels),
                           plan.namespace, keys)
    return summary(found, t)


def summary(found: dict[str, Any], t: tg.Targets | None, limit: int = 200) -> dict[str, Any]:
    """The preview as JSON: counts, the splits, the first ``limit`` clients reached, who cannot honour it."""
    return {"target": t.describe() if t is not None else "every client", "in_scope": found["in_scope"],
            "reached": len(found["reached"]),
            "clients": [{"app_id": c["app_id"], "client_id": c["client_id"], "host": c["hostname"],
                         "cluster": c["cluster"], "ykafka": c["ykafka_version"],
                         "librdkafka": c["librdkafka_version"]} for c in found["reached"][:limit]],
            "by": {k: dict(v) for k, v in found["by"].items()},
            "unable": [{"client_id": u["client"]["client_id"], "reasons": u["reasons"]} for u in found["unable"]]}


def from_form(form: dict[str, str]) -> tg.Targets | None:
    """The console's target fields (``t_percent``, ``t_apps``, ...) as Targets; None when all are empty."""
    def words(name: str) -> list[str] | None:
        return [w for w in form.get(name, "").replace(",", " ").split() if w][:100] or None

    fields = {"apps": words("t_apps"), "hosts": words("t_hosts"), "ykafka": words("t_ykafka"),
              "librdkafka": words("t_librdkafka")}
    percent = form.get("t_percent", "").strip().rstrip("%").strip()
    if not percent and all(v is None for v in fields.values()):
        return None
    try:
        return tg.Targets(percent=float(percent) if percent else None, **fields)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError: one line per field, no input echoed
        errors = getattr(exc, "errors", None)
        shown = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors(include_input=False)
                          ) if callable(errors) else "percent must be a number"
        raise ConfigRejected({"targets": shown}, "invalid targets") from None
