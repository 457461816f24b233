"""On-disk caches (grants, config namespaces): one private folder per server, never shared between servers.

A grant or a config namespace cached from one MetaServer / config center must never seed a client pointed
at another one, so every cache lives under a folder named after the server's URLs, and the folder records
the id the server reports (the MetaServer's ``issuer``); a different id behind the same URLs empties the
folder. Folders are 0700 and files 0600: a grant holds a bearer token and maybe broker credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

ID_FILE = "server.id"


def server_dir(cache_dir: Path, kind: str, urls: Iterable[str]) -> Path:
    """``cache_dir/kind/<digest of the server's URLs>``: the same servers in any order give the same folder."""
    normalized = sorted({url.strip().rstrip("/").lower() for url in urls if url.strip()})
    digest = hashlib.sha256("\n".join(normalized).encode()).hexdigest()[:16]
    return cache_dir / kind / digest


def safe_name(name: str) -> str:
    """A file name for ``name``: unchanged when it is already safe, else cleaned plus a digest (no clashes)."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    if cleaned != name or cleaned in ("", ".", ".."):
        cleaned += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return cleaned


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) readable by the owner only; an existing folder is narrowed too."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True)
    for folder in [path, *missing]:
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only, in a 0700 folder."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def bind_server_id(folder: Path, server_id: str) -> None:
    """Record the id of the server behind ``folder``; if another server answered before, drop its caches."""
    if not server_id:
        return
    id_file = folder / ID_FILE
    try:
        known = id_file.read_text().strip()
    except OSError:
        known = ""
    if known == server_id:
        return
    if known:
        log.warning("ykafka.cache.server_changed", folder=str(folder), was=known, now=server_id)
        for entry in folder.iterdir():
            if entry.name != ID_FILE:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        entry.unlink()
    try:
        write_private(id_file, server_id)
    except OSError as exc:
        log.warning("ykafka.cache.write_failed", path=str(id_file), error=str(exc))
