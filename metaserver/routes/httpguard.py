"""Input guards both servers share: a request-body limit enforced before parsing, validation errors that never
echo the caller's input, and query parameters that must appear once.

Why here and not per route: a 100 MB body to an unauthenticated route must be refused before FastAPI reads
it (413, nothing buffered past the limit), and every check that reads a parameter must read the same value
the handler reads (a repeated ``appId`` once let the access-key check and the handler disagree), so both are
decided once, at the edge. See docs/metaserver.md, "Threat model".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY = 1024 * 1024

ErrorBody = Callable[[int, str], dict[str, Any]]


def plain_error(status: int, message: str) -> dict[str, Any]:
    return {"detail": message}


async def _answer(send: Send, status: int, body: dict[str, Any], extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
                            (b"connection", b"close"), *extra]})
    await send({"type": "http.response.body", "body": raw})


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a streamed body passes the limit: an HTTPException, so FastAPI's body
    parsing passes it through and the app's own error handler renders the 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=f"request body larger than {limit} bytes")


class BodyLimit:
    """413 for a body over ``limit`` bytes: a declared ``Content-Length`` is refused before anything is read,
    a streamed (chunked) body as soon as it passes the limit."""

    def __init__(self, app: ASGIApp, limit: int = DEFAULT_MAX_BODY, error_body: ErrorBody = plain_error) -> None:
        self.app = app
        self.limit = limit
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body larger than {self.limit} bytes"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _answer(send, 413, self.error_body(413, message))
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await _answer(send, 413, self.error_body(413, message))


SINGLE_VALUED = frozenset({"appId", "cluster", "notifications", "dataCenter", "ip", "label", "releaseKey",
                           "messages", "since", "until", "topic", "group", "app", "client_id", "rule",
                           "status", "limit", "offset", "page", "size", "env", "operator", "format"})


class SingleValuedQuery:
    """400 when a single-valued query parameter appears more than once (every check and the handler would
    otherwise be free to pick a different one)."""

    def __init__(self, app: ASGIApp, error_body: ErrorBody = plain_error,
                 names: frozenset[str] = SINGLE_VALUED) -> None:
        self.app = app
        self.error_body = error_body
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            seen: set[str] = set()
            try:
                pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            except ValueError:
                pairs = []
            for name, _ in pairs:
                if name in self.names:
                    if name in seen:
                        await _answer(send, 400, self.error_body(400, f"query parameter {name!r} given more than once"))
                        return
                    seen.add(name)
        await self.app(scope, receive, send)


def validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's field errors without the ``input`` / ``ctx`` it would echo back (a body may be megabytes, and
    reflecting input is how injection reaches a log viewer or a browser)."""
    out = []
    for err in exc.errors():
        out.append({"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "invalid"))[:200],
                    "type": str(err.get("type", ""))})
    return out


class FieldError(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ErrorAnswer(BaseModel):
    """Every error answer: ``detail`` is a sentence, or the field errors of a request that failed validation;
    a rejected hot-config change adds the reason per key in ``errors``."""

    detail: str | list[FieldError]
    errors: dict[str, str] | None = None


#: documented on every route, so the published schema describes the answers clients really get
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorAnswer, "description": text} for status, text in (
        (400, "malformed request (e.g. a single-valued parameter given twice)"),
        (401, "authentication failed (never says which part)"),
        (403, "not allowed"),
        (404, "not found"),
        (409, "conflict with the current state"),
        (413, "request body over the size limit"),
        (422, "invalid input: field errors, or the reason per key of a rejected change"),
        (429, "too many failed authentications; retry after Retry-After seconds"),
        (502, "the config center failed or refused the call"),
    )}
