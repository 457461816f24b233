"""Every console page that needs a session answers a request without one with a redirect to the login page (a
303, nothing rendered, nothing written), whatever its method: the guard is one call, ``views._signed_in``."""

from __future__ import annotations

import inspect
import re

import requests
from fastapi.routing import APIRoute

from metaserver.console import views
from metaserver.rollouts import console_views  # noqa: F401 - registers the rollout pages on the console router
from tests.console_fixtures import Console


def test_every_signed_in_page_redirects_a_request_without_a_session_to_login(console: Console) -> None:
    guarded = [(method, route.path) for route in views.router.routes if isinstance(route, APIRoute)
               and re.search(r"_signed_in\(request\)|doc_pages\.(show|save)\(", inspect.getsource(route.endpoint))
               for method in sorted(route.methods)]
    assert len(guarded) >= 43
    for method, path in guarded:
        url = console.url + re.sub(r"\{[^}]+\}", "1", path)
        resp = requests.request(method, url, data={"csrf": "x"}, timeout=30, allow_redirects=False)
        assert (resp.status_code, resp.headers.get("location")) == (303, "/console/login"), f"{method} {path}"
