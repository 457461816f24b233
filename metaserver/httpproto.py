"""The servers' HTTP/1.1 protocol: uvicorn's httptools protocol, answering a request that offers an upgrade it
will not perform (``Upgrade: h2c``) as the plain HTTP/1.1 request it also is.

Java's built-in ``HttpClient`` (HTTP/2 by default) sends ``Connection: Upgrade, HTTP2-Settings`` and
``Upgrade: h2c`` with every first request on a connection. llhttp stops parsing at the end of such a request's
headers (it expects the connection to switch protocol), so uvicorn's httptools protocol dispatched the request
with an empty body: ``POST /v1/auth/grant`` answered ``422 body: Field required`` (issue 37). RFC 9113 §3.1 and
RFC 9110 §7.8 let a server ignore an upgrade; this protocol does: the bytes after the headers are the request's
body (``Content-Length``; a chunked body with an upgrade offer is refused with 400), then a fresh parser takes
the connection's next request. WebSocket upgrades behave as before. h2c itself is not spoken.
"""

from __future__ import annotations

from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class UpgradeIgnoringProtocol(HttpToolsProtocol):
    """httptools, but an upgrade offer other than WebSocket is ignored instead of losing the body."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._body_left = 0  # body bytes still owed to a request whose upgrade offer was ignored

    def data_received(self, data: bytes) -> None:
        if self._body_left:
            self._unset_keepalive_if_required()
            data = self._take_body(data)
            if not data:
                return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade as upgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
                return
            offset = int(upgrade.args[0]) if upgrade.args else len(data)
            self._ignore_upgrade(data[offset:])

    def _ignore_upgrade(self, rest: bytes) -> None:
        """The request was dispatched at the end of its headers; deliver its body, then parse on afresh."""
        headers = dict(self.headers)
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.send_400_response("Chunked body with an Upgrade offer is not supported; send Content-Length.")
            return
        try:
            self._body_left = int(headers.get(b"content-length", b"0"))
        except ValueError:
            self.send_400_response("Invalid Content-Length.")
            return
        self.parser = httptools.HttpRequestParser(self)
        if self._body_left == 0:
            self.on_message_complete()
        if rest:
            self.data_received(rest)

    def _take_body(self, data: bytes) -> bytes:
        """Feed the owed body from ``data``; what is left over belongs to the next request."""
        chunk, rest = data[:self._body_left], data[self._body_left:]
        self._body_left -= len(chunk)
        if chunk:
            self.on_body(chunk)
        if self._body_left == 0:
            self.on_message_complete()
        return rest
