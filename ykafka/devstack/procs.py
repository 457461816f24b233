"""Processes and ports of the local stack: free ports for stacks on loopback, who holds a port, pid records that
``down`` checks a process against before it signals it, and stopping a process (its peers first) by pid."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    """A stack service could not be started, or a prerequisite is missing."""


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


# Ports handed out for stacks on free ports, below the kernel's ephemeral range: a port taken from that range
# (bind to 0) can be taken again by any outgoing connection before the service binds it, which under load
# (Spark, broker clients) happened within seconds. 20000-28999 also leaves the dev.yaml defaults alone.
FREE_PORTS = range(20000, 29000)
# Ports this process handed out already: nothing listens on them until their service starts, so without the record
# one stack's metaserver and another cluster's controller could be given the same port (seen in CI).
_HANDED_OUT: set[int] = set()
#: ...and claims other processes see (xdist workers, benchmark subprocesses, a second ``ykafka dev up``): a file per
#: port holding the claimer's pid, good while that process lives and for CLAIM_TTL_S (a JVM broker took 10 s and
#: more from its port being handed out to binding it, and CI saw another process's broker bind it first)
CLAIM_TTL_S = 300.0


def _claims_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"ykafka-ports-{os.getuid()}"


def _claim(port: int) -> bool:
    """Claim ``port`` for this process across processes; False when a live process claimed it recently."""
    folder = _claims_dir()
    path = folder / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileNotFoundError:
            folder.mkdir(parents=True, exist_ok=True)
            continue
        except FileExistsError:
            try:
                pid = int(path.read_text() or 0)
                fresh = time.time() - path.stat().st_mtime < CLAIM_TTL_S
            except (OSError, ValueError):
                return False  # being written, or just reclaimed by another process
            if pid == os.getpid() or (fresh and pid and pid_alive(pid)):
                return False
            with contextlib.suppress(OSError):
                path.unlink()  # a dead or old claim: take it over
            continue
        except OSError:
            return True  # no claims folder to be had (read-only temp): this process's own record still holds
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now and no live process of ours was handed recently, chosen at random outside
    the ephemeral range where it can be."""
    candidates = range(FREE_PORTS.start, min(FREE_PORTS.stop, _ephemeral_low()))
    for _ in range(200 if len(candidates) > 1000 else 0):
        port = secrets.choice(candidates)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        if not _claim(port):
            continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    _HANDED_OUT.add(port)
    return port


def port_holder(port: int) -> str | None:
    """Describe the process listening on ``port`` (Linux /proc), or None when it cannot be told."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {pid} ({cmd[:120]})"
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def pid_runs(pid: int, argv: list[str]) -> bool:
    """True if ``pid`` is alive and still runs ``argv`` (guards against a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # not Linux: trust the pid file
    args = [c.decode(errors="replace") for c in cmdline if c]
    return args[1:] == argv[1:]


@dataclass(frozen=True)
class ServiceRecord:
    """What ``up`` started for one service, kept in its pid file: ``down`` and ``status`` check the process
    against this record, not against the command today's settings would build (other ports, other flags)."""

    pid: int
    argv: list[str] | None  # None: a pid file from before records held more than the pid
    port: int | None = None

    def runs(self, fallback: list[str]) -> bool:
        """The recorded process is alive and still runs the recorded command (else ``fallback``)."""
        return pid_runs(self.pid, self.argv if self.argv is not None else fallback)


def read_record(path: Path) -> ServiceRecord | None:
    try:
        raw = json.loads(path.read_text())
        if isinstance(raw, int):
            return ServiceRecord(raw, None)
        return ServiceRecord(int(raw["pid"]), [str(a) for a in raw["argv"]], raw.get("port"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_record(path: Path, svc: Service, pid: int) -> None:
    """Replace the record atomically: a reader sees the old one or the new one, never half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "argv": svc.argv, "port": svc.port}))
    tmp.replace(path)


def write_private(path: Path, text: str) -> None:
    """Write a file of secrets readable by its owner only from its first byte: created 0600 beside ``path``
    (whatever the umask) and renamed over it, so no reader ever sees it world-readable, even when it replaces
    an older file that was."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover keeps its own mode: start from a file this call creates
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


def read_pid(path: Path) -> int | None:
    record = read_record(path)
    return record.pid if record else None


def terminate(pid: int, timeout: float, peers: list[int | None] | None = None) -> None:
    """SIGTERM ``pid`` (and its ``peers``, the other nodes of its Kafka cluster: a quorum stopped one by one would
    leave the last node waiting for the lost majority), then SIGKILL what outlives ``timeout``."""
    for target in {pid, *(p for p in peers or [] if p is not None)}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 5)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


#: what a process's log says when it gave up at start, most telling first (a JVM prints the bind error deep in a
#: stack trace; Python servers end with the exception line)
_REASONS = ("Address already in use", "BindException", "Permission denied", "OutOfMemoryError",
            "Exception", "Error", "FATAL")


def exit_reason(path: Path) -> str | None:
    """The one log line that says why a process exited at start (``Address already in use`` ...), or None."""
    try:
        lines = path.read_text(errors="replace").splitlines()[-400:]
    except OSError:
        return None
    for needle in _REASONS:
        for line in reversed(lines):
            if needle in line:
                return line.strip()[:300]
    return None


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Service:
    """One background process of the stack."""

    name: str
    argv: list[str]
    port: int
    health_url: str | None = None  # HTTP health check; else a TCP connect
    env: dict[str, str] = field(default_factory=dict)  # added to the stack's environment
    prepare: Callable[[], None] | None = None  # run before each start (a Kafka node formats its storage)
    group: str | None = None  # services of one group start together, then are waited for (a KRaft quorum)
    kind: str | None = None  # a broker's kind (kafka, tansu)
    node_id: int | None = None  # a broker's node id
    startup_timeout_s: float | None = None  # longer than the stack's own (a JVM recovering its logs under load)

    def pid_file(self, home: Path) -> Path:
        return home / "run" / f"{self.name}.pid"

    def log_file(self, home: Path) -> Path:
        return home / "logs" / f"{self.name}.log"
