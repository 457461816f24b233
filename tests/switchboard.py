"""A TCP forwarder a test controls connection by connection, for faults Toxiproxy cannot single out.

Toxiproxy's toxics act on a proxy, so every connection through it, new ones too. The fault issue 38's seed-1 soak
left behind was narrower: one client's open connections stopped answering while the cluster answered anyone who
connected anew (as a NAT or load balancer that lost its connection state leaves them). :meth:`Switchboard.wedge`
does that: every connection open now keeps its sockets but moves no more bytes, while connections made afterwards
flow. :meth:`Switchboard.refuse` closes new connections at once (a cluster nobody reaches).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class _Link:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.wedged = False
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.close()


class Switchboard:
    """Listens on ``127.0.0.1:port`` and forwards each connection to ``target`` (host:port)."""

    def __init__(self, port: int, target: str) -> None:
        host, _, tport = target.rpartition(":")
        self.target = (host, int(tport))
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.listener.settimeout(0.2)
        self.links: list[_Link] = []
        self.refusing = False
        self.accepted = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="switchboard", daemon=True)
        self._thread.start()

    def wedge(self) -> int:
        """Every connection open now stops moving bytes (its sockets stay open); returns how many."""
        with self._lock:
            live = [link for link in self.links if not link.closed]
            for link in live:
                link.wedged = True
        return len(live)

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()
        with self._lock:
            for link in self.links:
                link.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self.links.append(link)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(link,), name="switchboard-link", daemon=True).start()

    def _pump(self, link: _Link) -> None:
        pairs = {link.client: link.upstream, link.upstream: link.client}
        try:
            while not self._stop.is_set() and not link.closed:
                if link.wedged:
                    self._stop.wait(0.2)  # bytes stay in the kernel's buffers; nothing is read or closed
                    continue
                ready, _, _ = select.select(list(pairs), [], [], 0.2)
                for sock in ready:
                    if link.wedged:
                        break
                    data = sock.recv(65536)
                    if not data:
                        link.close()
                        return
                    pairs[sock].sendall(data)
        except OSError:
            link.close()
