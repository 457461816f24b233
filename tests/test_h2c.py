"""Stock HTTP clients of other languages (issue 37): Java's ``HttpClient`` sends ``Connection: Upgrade,
HTTP2-Settings`` and ``Upgrade: h2c`` with its first request. Both servers answer it as the HTTP/1.1 request it
also is (``metaserver/httpproto.py``); before, the body was lost and ``POST /v1/auth/grant`` answered 422
"body: Field required". Sent here on a raw socket exactly as Java sends it, then a second request on the same
connection, which must be parsed afresh.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

from tests.ms_fixtures import OPENAPI_TOKEN, MetaServer, new_app
from tests.support import ConfigService
from ykafka.auth import GRANT_PATH
from ykafka.signing import derive_key, signed_headers

JAVA_UPGRADE = {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c",
                "HTTP2-Settings": "AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA", "User-Agent": "Java-http-client/17.0.9"}


def _request(method: str, path: str, host: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses (status, body) read off ``sock`` (Content-Length framed, as uvicorn answers)."""
    buffer, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} response(s)"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        length = next(int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                      if k.strip().lower() == "content-length")
        while len(buffer) < length:
            chunk = sock.recv(65536)
            assert chunk
            buffer += chunk
        out.append((int(lines[0].split()[1]), buffer[:length]))
        buffer = buffer[length:]
    return out


def _exchange(url: str, *requests: bytes) -> list[tuple[int, bytes]]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=15) as sock:
        sock.sendall(b"".join(requests))  # pipelined: the second must be parsed after the first's body
        return _responses(sock, len(requests))


def test_the_metaserver_answers_a_signed_grant_sent_with_upgrade_h2c(ms_factory: Callable[..., MetaServer]) -> None:
    server = ms_factory()
    app = new_app(server, acl={"produce": ["h2c.*"], "consume": [], "group": []})
    body = json.dumps({"app_id": app.app_id, "client_id": "java-1", "ip": "10.0.0.7"}).encode()
    signed = signed_headers(app.app_id, derive_key(app.app_id, app.secret), "POST", GRANT_PATH, body)
    host = urlsplit(server.url).netloc
    grant, health = _exchange(server.url,
                              _request("POST", GRANT_PATH, host, {**JAVA_UPGRADE, **signed,
                                                                  "Content-Type": "application/json"}, body),
                              _request("GET", "/health", host, {}))
    assert grant[0] == 200, grant
    answer = json.loads(grant[1])
    assert answer["app_id"] == app.app_id and answer["token"] and answer["acl"]["produce"] == ["h2c.*"]
    assert health[0] == 200


def test_the_config_service_answers_an_open_api_write_sent_with_upgrade_h2c(ms_cc: ConfigService) -> None:
    # the config service alone (the one ms_factory's MetaServers use): no MetaServer of its own to start
    app_id = f"h2c-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"app": {"appId": app_id, "name": app_id, "ownerName": "apollo"},
                       "admins": ["apollo"]}).encode()
    host = urlsplit(ms_cc.url).netloc
    auth = {"Authorization": OPENAPI_TOKEN}
    created, listed = _exchange(ms_cc.url,
                                _request("POST", "/openapi/v1/apps", host,
                                         {**JAVA_UPGRADE, **auth, "Content-Type": "application/json;charset=UTF-8"},
                                         body),
                                _request("GET", f"/openapi/v1/apps?appIds={app_id}", host, auth))
    assert created[0] == 200, created
    assert listed[0] == 200 and [a["appId"] for a in json.loads(listed[1])] == [app_id]
