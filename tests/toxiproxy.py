"""A private Toxiproxy server (Shopify's TCP fault proxy) for network faults between clients and a broker.

The soak (``bench/soak.py``) and the network-fault tests put one proxy in front of a Kafka cluster and make the
cluster advertise the proxy's port on a listener of its own (:func:`proxied_listener`), so every connection a
client makes after the bootstrap goes through the proxy too, while the read-back and the tests' probes use the
cluster's own port. Faults: added latency, a partition (the proxy disabled: every connection cut, new ones
refused), stalled connections (``timeout``: data stops, the connection closes later) and slow closes.

The server is the Go module's binary: ``make toxiproxy`` installs it (``go install``) into
``~/.cache/ykafka/toxiproxy-<version>/toxiproxy-server``; ``YKAFKA_TOXIPROXY`` points elsewhere. Started on a free
loopback port, stopped by its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ykafka.devstack.config import CLIENT, ClusterSpec, KafkaListener
from ykafka.devstack.procs import free_port

VERSION = "v2.5.0"
CACHED = Path.home() / ".cache" / "ykafka" / f"toxiproxy-{VERSION}" / "toxiproxy-server"
HINT = (f"Toxiproxy not found: `make toxiproxy` (go install github.com/Shopify/toxiproxy/v2/cmd/server@{VERSION} "
        f"into {CACHED}) or YKAFKA_TOXIPROXY=/path/to/toxiproxy-server")
PROXIED = "PROXIED"  # the Kafka listener whose advertised port is the proxy's


def binary() -> str | None:
    """The toxiproxy-server to run, or None (then say :data:`HINT`)."""
    named = os.environ.get("YKAFKA_TOXIPROXY")
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    return str(CACHED) if os.access(CACHED, os.X_OK) else None


def proxied_listener(spec: ClusterSpec, host: str = "127.0.0.1") -> tuple[int, int]:
    """Give a one-node Kafka cluster a second listener whose advertised address is a proxy's (before it starts).

    Kafka answers metadata with the addresses of the listener a client connected through, so a client bootstrapping
    at the proxy (``outer``) is told the proxy's address and stays behind it; the cluster's own port keeps
    advertising itself. Returns ``(inner, outer)``: the listener's real port and the port the proxy listens on."""
    assert spec.brokers == 1, "one node: one advertised address per listener"
    inner, outer = free_port(host), free_port(host)
    spec.kafka.listeners.append(KafkaListener(PROXIED, "PLAINTEXT", [inner]))
    spec.kafka.properties["advertised.listeners"] = f"{CLIENT}://{host}:{spec.port},{PROXIED}://{host}:{outer}"
    return inner, outer


class Toxiproxy:
    """One toxiproxy-server process and its REST API (``http://127.0.0.1:<port>``)."""

    def __init__(self, path: str, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log_path.open("w") as log:
            self.proc = subprocess.Popen([path, "-host", "127.0.0.1", "-port", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "LOG_LEVEL": "info"})  # not a line per connection
        deadline = time.monotonic() + 15
        while True:
            try:
                self._call("GET", "/proxies")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"toxiproxy-server did not start (log: {log_path})") from None
                time.sleep(0.1)
            except BaseException:
                self.close()
                raise

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            text = reply.read()
        return json.loads(text) if text else None

    def proxy(self, name: str, listen: int, upstream: str) -> None:
        """A proxy ``name`` on 127.0.0.1:``listen`` to ``upstream`` (host:port), enabled."""
        self._call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{listen}", "upstream": upstream,
                                        "enabled": True})

    def toxic(self, proxy: str, kind: str, attributes: dict[str, int], stream: str = "downstream",
              toxicity: float = 1.0) -> str:
        """Add a toxic (``latency``, ``timeout``, ``slow_close``, ``reset_peer``...) to one direction of every
        connection (``toxicity``: the share of connections it applies to); returns its name."""
        name = f"{kind}-{stream}"
        self._call("POST", f"/proxies/{proxy}/toxics", {"name": name, "type": kind, "stream": stream,
                                                        "toxicity": toxicity, "attributes": attributes})
        return name

    def clear(self, proxy: str) -> None:
        """Remove every toxic of ``proxy``."""
        for toxic in self._call("GET", f"/proxies/{proxy}/toxics") or []:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic['name']}")

    def enable(self, proxy: str, enabled: bool) -> None:
        """Disabled: every open connection is cut and new ones are refused (a partition); enabled again: heal."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
