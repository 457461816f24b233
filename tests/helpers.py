"""Helpers every test module shares: unique names, waiting for a condition, creating a topic on a real broker."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """The predicate's first truthy value; checked once more at the deadline, then an AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def create_topic(bootstrap: str, topic: str, partitions: int = 3, exact: bool = True, replication: int = 1) -> None:
    """Create ``topic`` and wait until it is visible with ``partitions`` partitions; ``exact=False`` also accepts
    it already there with another count (auto-created first by a producer, with the broker's default)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication)],
                                      operation_timeout=10).values():
        try:
            future.result(15)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def visible() -> bool:
        found = admin.list_topics(topic, timeout=5).topics.get(topic)
        return (found is not None and found.error is None and bool(found.partitions)
                and (not exact or len(found.partitions) == partitions))

    wait_until(visible, timeout=15, interval=0.1, message=f"topic {topic} with {partitions} partitions")


class TcpRelay:
    """A loopback TCP relay to ``upstream`` ("host:port"): a server address a test can take down and bring back
    (``close`` / ``open``) without stopping a server other tests share."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.port = 0
        self.open()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        """Refuse new connections and cut the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        for sock in [listener, *conns]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
