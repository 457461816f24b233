"""Small network helpers of the SDK."""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit


def local_ip(towards: str | None = None) -> str:
    """The local address used to reach ``towards`` (a URL or host:port); what gray-release rules match.

    A UDP ``connect`` sends nothing; it only asks the kernel which interface would be used.
    """
    host, port = "8.8.8.8", 80
    if towards:
        parts = urlsplit(towards if "//" in towards else f"//{towards}")
        host = parts.hostname or host
        with contextlib.suppress(ValueError):
            port = parts.port or port
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        return str(sock.getsockname()[0])
    with contextlib.suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"
