"""The subset of Apollo's Open API (portal `/openapi/v1`) the MetaServer and operators' scripts use.

Paths, parameters, validation messages and JSON shapes follow apollo-openapi (v0.3.x) and the portal's
openapi controllers, so a script written for a real Apollo portal works here. Env names in paths are
accepted as given (this service is a single environment). Tokens go in `Authorization`, as in Apollo.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import accesskeys, apps, branches, instances, items, releases

router = APIRouter()
for _module in (apps, items, releases, branches, accesskeys, instances):
    router.include_router(_module.router)
