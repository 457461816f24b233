"""Apollo-shaped errors: every failure answers `{"status", "message", "timestamp", "exception"}`.

Apollo's GlobalDefaultExceptionHandler renders this shape for its own exceptions; clients and scripts
written against Apollo parse it, so validation errors (FastAPI's 422) and routing errors use it too.
"""

from __future__ import annotations

import traceback
from datetime import datetime
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = structlog.get_logger(__name__)

_PKG = "com.ctrip.framework.apollo.common.exception."


class ApolloError(Exception):
    """An error with the HTTP status and the Java exception name Apollo would report."""

    status: int = 500
    exception: str = _PKG + "ServiceException"

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(message % args if args else message)
        self.message = str(self)


class BadRequest(ApolloError):
    status = 400
    exception = _PKG + "BadRequestException"


class NotFound(ApolloError):
    status = 404
    exception = _PKG + "NotFoundException"


class Unauthorized(ApolloError):
    status = 401
    exception = "org.springframework.security.authentication.BadCredentialsException"


class Forbidden(ApolloError):
    status = 403
    exception = "org.springframework.security.access.AccessDeniedException"


def error_body(status: int, message: str, exception: str) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "timestamp": datetime.now().isoformat(timespec="milliseconds"),
        "exception": exception,
    }


def error_response(status: int, message: str, exception: str) -> JSONResponse:
    return JSONResponse(error_body(status, message, exception), status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        kind = err.get("type", "")
        if kind == "json_invalid":
            parts.append("JSON parse error: " + str(err.get("ctx", {}).get("error", err.get("msg", ""))))
        elif kind == "missing":
            parts.append(f"{loc or 'request body'} can not be empty")
        else:
            parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg", "invalid")))
    return "; ".join(parts) or "Bad Request"


def install_error_handlers(app: FastAPI) -> None:
    """Route every error path through the Apollo shape; a bug answers 500 but never leaks a traceback."""

    @app.exception_handler(ApolloError)
    async def _apollo(_: Request, exc: ApolloError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.exception)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, _validation_message(exc), _PKG + "BadRequestException")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {404: "NotFoundException", 405: "HttpRequestMethodNotSupportedException"}
        name = _PKG + kinds.get(exc.status_code, "BadRequestException")
        resp = error_response(exc.status_code, str(exc.detail), name)
        if exc.headers:
            resp.headers.update(exc.headers)
        return resp

    @app.exception_handler(DataError)
    async def _data(request: Request, exc: DataError) -> JSONResponse:
        # PostgreSQL checks what SQLite does not (an id beyond the column's range, a value over its length):
        # the request is bad, the value is not echoed back
        log.info("configcenter.bad_value", path=request.url.path, error=type(exc.orig).__name__)
        return error_response(400, "a value is out of range or too long", _PKG + "BadRequestException")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A plain, bounded traceback: rendering locals of a failed request can be slow and huge.
        trace = "".join(traceback.format_exception(exc, limit=-4))[-4000:]
        log.error("configcenter.unhandled", path=request.url.path, error=repr(exc)[:500], traceback=trace)
        return error_response(500, "internal error; see the config service log", "java.lang.RuntimeException")
