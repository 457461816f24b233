"""Scale of one client: a Producer over 1,000 topics spread on 10 clusters holds 10 librdkafka producers
(not one per topic), its long polls stay within an 8 KB request line, and a release still reaches it fast.

Starts its own stack on free ports (Tansu broker, config service, MetaServer; stopped by pid at the end),
registers 10 clusters in the MetaServer (all on the one broker: the client cannot tell), publishes one
``ykafka.topic.<t>`` namespace per topic with ``route.cluster`` = topic ``i`` → cluster ``i % 10``, then one
Producer sends a message to every topic. Measured: librdkafka producers held, the long poll's parts and
longest request line, and the time from publishing a release of the last topic's namespace to the client
holding it (best of ``--releases``).

    python bench/scale_client.py [--topics 1000] [--clusters 10] [--releases 3] [--quick]

Last line: RESULT {"topics": ..., "rdkafka_producers": ..., "longest_request_line": ..., "release_ms": ...}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metaserver.domain.apollo import ApolloOpenApi  # noqa: E402
from tests.support import local_stack  # noqa: E402
from ykafka import Producer  # noqa: E402
from ykafka.admin.client import AdminClient  # noqa: E402
from ykafka.apollo import MAX_REQUEST_LINE  # noqa: E402
from ykafka.logs import configure  # noqa: E402

RELEASE_TARGET_MS = 1000


def publish(api: ApolloOpenApi, namespace: str, items: dict[str, str]) -> None:
    api.ensure_namespace(namespace)
    for key, value in items.items():
        api.set_item(namespace, key, value)
    api.release(namespace, f"bench-{uuid.uuid4().hex[:6]}", "bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="150 topics over 10 clusters, 1 release")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.releases = 150, 1
    configure("warning")
    with local_stack(["dc-a", "control"]) as bench:
        admin = AdminClient(bench.cfg.metaserver_url, bench.cfg.admin_token)
        clusters = [f"scale-{c:02d}" for c in range(args.clusters)]
        for name in clusters:
            admin.set_cluster(name, bootstrap_servers=bench.bootstrap(), dc="a")
        api = ApolloOpenApi(bench.cfg.configcenter_url, bench.cfg.openapi_token)
        api.ensure_app()
        run = uuid.uuid4().hex[:6]
        topics = [f"scale-{run}-{i:04d}" for i in range(args.topics)]
        started = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: publish(api, f"ykafka.topic.{topics[i]}",
                                            {"route.cluster": clusters[i % len(clusters)]}), range(len(topics))))
        setup_s = time.perf_counter() - started

        producer = Producer(bench.client_config())
        try:
            started = time.perf_counter()
            for topic in topics:  # first send of each topic: its namespace fetched, its cluster resolved
                producer.produce(topic, b"x" * 100)
                producer.poll(0)
            left = producer.flush(60)
            first_sends_s = time.perf_counter() - started
            held = producer.clients()
            apollo = producer.runtime.apollo
            assert apollo is not None
            watched = len(apollo.namespaces)
            time.sleep(1.0)  # every part of the long poll parked
            releases: list[float] = []
            target = f"ykafka.topic.{topics[-1]}"
            for r in range(args.releases):
                before = apollo.release_keys().get(target)
                pushed = time.perf_counter()
                publish(api, target, {"route.cluster": clusters[-1], "producer.linger.ms": str(6 + r)})
                deadline = time.monotonic() + 10
                while apollo.release_keys().get(target) == before and time.monotonic() < deadline:
                    time.sleep(0.002)
                releases.append((time.perf_counter() - pushed) * 1000)
                time.sleep(0.5)
            parts = len(apollo._split(dict.fromkeys(apollo.namespaces, 1)))
            result: dict[str, Any] = {
                "topics": len(topics), "clusters": len(clusters), "unacked": left,
                "rdkafka_producers": len(held), "producers_by_cluster": sorted({c["cluster"] for c in held}),
                "namespaces_watched": watched, "longpoll_parts": parts,
                "longest_request_line": apollo.longest_request_line, "request_line_limit": MAX_REQUEST_LINE,
                "release_ms": round(min(releases), 1), "release_ms_all": [round(x, 1) for x in releases],
                "release_target_ms": RELEASE_TARGET_MS, "first_sends_s": round(first_sends_s, 2),
                "first_send_ms_per_topic": round(first_sends_s * 1000 / len(topics), 2),
                "setup_s": round(setup_s, 1)}
        finally:
            producer.close()
    result["producers_by_cluster"] = len(result["producers_by_cluster"])
    result["met"] = (result["rdkafka_producers"] <= len(clusters) and
                     result["longest_request_line"] <= MAX_REQUEST_LINE and result["release_ms"] <= RELEASE_TARGET_MS)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
