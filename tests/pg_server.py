"""A private PostgreSQL server for the tests and benchmarks: Debian's server binaries, ``initdb`` into a temporary
folder, ``postgres`` on a free loopback port, stopped by its pid.

No PostgreSQL runs on the project's machines before a session, so the suite starts its own unless
``YKAFKA_TEST_PG_DSN`` names one. ``ensure_pg()`` starts it once per process tree: it exports the DSN in
``YKAFKA_TEST_PG_DSN`` so pytest-xdist workers, benchmark subprocesses and the servers they start reuse it.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "YKAFKA_TEST_PG_DSN"
#: exported next to the DSN by the process that started the server, so only that process stops it
_OWNER_ENV = "YKAFKA_TEST_PG_OWNER"
INSTALL_HINT = "install Debian's PostgreSQL server (apt-get install postgresql) or set YKAFKA_TEST_PG_DSN"


def server_bindir() -> Path | None:
    """The newest installed server's bin folder (Debian keeps them under /usr/lib/postgresql/<major>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
                   if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


@dataclass
class PrivatePostgres:
    """One server: its data folder, port and the pid of its postmaster."""

    folder: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def dsn(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test"

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: roll back sessions, stop at once
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


def _run_as() -> tuple[str | None, int | None, int | None]:
    """PostgreSQL refuses to run as root: as root, run it as the ``postgres`` user the Debian package creates."""
    if os.geteuid() != 0:
        return None, None, None
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root and there is no 'postgres' user to run PostgreSQL as: "
                           + INSTALL_HINT) from exc
    return "postgres", entry.pw_uid, entry.pw_gid


def start(startup_timeout: float = 30.0) -> PrivatePostgres:
    """initdb + postgres on a free port; raises RuntimeError with the server's log tail when it cannot start."""
    from ykafka.devstack import free_port

    bindir = server_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, postgres) not found: " + INSTALL_HINT)
    user, uid, gid = _run_as()
    folder = Path(tempfile.mkdtemp(prefix="ykafka-pg-"))
    data, sockets, log = folder / "data", folder / "sock", folder / "postgres.log"
    sockets.mkdir()
    if uid is not None and gid is not None:
        for path in (folder, sockets):
            os.chown(path, uid, gid)
    with open(log, "wb") as out:
        if uid is not None and gid is not None:
            os.chown(log, uid, gid)
        subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                        "--locale=C", "--no-sync"], stdout=out, stderr=subprocess.STDOUT, check=True,
                       user=user, group=gid)
    last_error = ""
    for _ in range(5):  # a free port can be taken between the probe and the bind: try another
        port = free_port()
        out = open(log, "ab")  # noqa: SIM115 - the server's own stdout for its whole life
        proc = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
             # a throwaway test database: durability off for speed
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=out, stderr=subprocess.STDOUT, user=user, group=gid, start_new_session=True)
        out.close()
        server = PrivatePostgres(folder, port, proc)
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                _create_database(port)
                return server
            except Exception as exc:  # noqa: BLE001 - not accepting connections yet
                last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"the private PostgreSQL did not start ({last_error}); its log ends:\n" + "\n".join(tail))


def _create_database(port: int) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2,
                         autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'test'").fetchone()
        if not exists:
            conn.execute("CREATE DATABASE test")


_SERVER: list[PrivatePostgres] = []
_FAILED: list[str] = []


def ensure_pg() -> tuple[str | None, str | None]:
    """(DSN, None) once a server answers — the one ``YKAFKA_TEST_PG_DSN`` names, else a private one started
    here (once; stopped at exit) — or (None, reason)."""
    dsn = os.environ.get(ENV)
    if dsn:
        return dsn, None
    if _FAILED:
        return None, _FAILED[0]
    try:
        server = start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        _FAILED.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None, _FAILED[0]
    _SERVER.append(server)
    os.environ[ENV] = server.dsn
    os.environ[_OWNER_ENV] = str(os.getpid())
    atexit.register(stop_owned)
    return server.dsn, None


def stop_owned() -> None:
    """Stop the server this process started (by its pid), if any."""
    while _SERVER:
        server = _SERVER.pop()
        server.stop()
        if os.environ.get(_OWNER_ENV) == str(os.getpid()):
            os.environ.pop(ENV, None)
            os.environ.pop(_OWNER_ENV, None)
