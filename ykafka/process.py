"""This process in client reports: host, pid and start time, and each client instance's own id.

A process may hold several Producers and Consumers; each reports under its own id (``<app>-<host>-<pid>-<n>``,
``n`` counting the instances this process created) and names its process, so the console lists every
instance and groups a process's clients (one id per process made the last report win).
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessInfo:
    host: str
    pid: int
    #: when this process loaded ykafka (epoch seconds); with host and pid it tells a restarted process apart
    started: float


_lock = threading.Lock()
_process = ProcessInfo(socket.gethostname(), os.getpid(), round(time.time(), 3))
_counter = itertools.count(1)
_explicit: dict[str, int] = {}


def _after_fork() -> None:
    global _process, _counter
    _process = ProcessInfo(socket.gethostname(), os.getpid(), round(time.time(), 3))
    _counter = itertools.count(1)
    _explicit.clear()


os.register_at_fork(after_in_child=_after_fork)


def current() -> ProcessInfo:
    return _process


def instance_id(app_id: str, explicit: str | None = None) -> str:
    """A new client instance's id. ``explicit`` (``ykafka.client.id``) is used as given for its first instance
    in this process and suffixed ``-2``, ``-3``... after, so two clients built from one config stay apart."""
    with _lock:
        if explicit:
            n = _explicit.get(explicit, 0) + 1
            _explicit[explicit] = n
            return explicit if n == 1 else f"{explicit}-{n}"
        return f"{app_id}-{_process.host}-{_process.pid}-{next(_counter)}"
