"""Many of ykafka's config-service clients (``ykafka.apollo.ApolloClient``, the SDK's own) in one process: the
watchers of tests/test_configcenter_refused_release.py.

Usage: python -m tests.watch_child URLS NAMESPACE FIRST COUNT

Each watcher starts on a random instance of URLS (comma-separated) and watches NAMESPACE with the SDK's
failover and back-off. Prints ``ready`` once every watcher loaded the namespace, then
one line ``got WATCHER VALUE UNIX_TIME`` each time a watcher applies a new value of key ``v``. Runs until
stdin closes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ykafka.apollo import ApolloClient, NamespaceConfig
from ykafka.logs import configure


def main(argv: list[str]) -> int:
    urls, namespace, first, count = argv[0], argv[1], int(argv[2]), int(argv[3])
    configure("warning")  # to stderr: stdout carries the lines the test reads
    out = threading.Lock()

    def watcher(index: int) -> Callable[[NamespaceConfig], None]:
        def on_update(config: NamespaceConfig) -> None:
            value = config.configurations.get("v")
            if value is not None:
                with out:
                    print(f"got {index} {value} {time.time():.3f}", flush=True)
        return on_update

    def start(index: int) -> ApolloClient:
        client = ApolloClient(urls, "ykafka", "default", "127.0.0.1", None, watcher(index))
        client.subscribe(namespace)
        client.start()
        return client

    with ThreadPoolExecutor(8) as pool:  # the first fetches overlap: ready sooner on a busy machine
        clients = list(pool.map(start, range(first, first + count)))
    with out:
        print("ready", flush=True)
    sys.stdin.read()
    for client in clients:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
