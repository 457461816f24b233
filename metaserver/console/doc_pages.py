"""The two handlers of a console page over an edited YAML document (guard rules, alert notifications):
everyone with a session reads it; an admin's POSTed text is saved by the document's own ``save`` (checked
first, audited) or the page is shown again with the reason (422) and nothing is saved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from .views import _form, _signed_in, _svc

#: (request, session) -> the page; ``status_code``, ``body`` (the refused text) and the error as keywords
Render = Callable[..., Response]


def show(request: Request, render: Render) -> Response:
    return render(request, _signed_in(request))


async def save(request: Request, store: Callable[[Any, str, str], Any], invalid: type[Exception],
               render: Render, url: str) -> Response:
    """Save the form's ``body`` as ``console:<user>``; ``invalid`` raised by ``store`` re-renders with 422."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    body = form.get("body", "")[:200_000]
    try:
        await run_in_threadpool(store, _svc(request).engine, body, f"console:{sess.username}")
    except invalid as exc:
        return render(request, sess, status_code=422, body=body, error=exc)
    return RedirectResponse(f"{url}?saved=1", status_code=303)


