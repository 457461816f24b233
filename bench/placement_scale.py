"""A million topics placed over 100 clusters in the MetaServer on PostgreSQL: how fast a client learns an
unseen topic's cluster at first send, and whether the MetaServer's memory stays bounded.

Builds its own data: a MetaServer on a fresh PostgreSQL schema, ``--clusters`` registered clusters and
``--topics`` placements written through the admin API (10,000 per call). Then the SDK's own lookup
(``GrantClient.placement``, what ``Runtime.route`` calls the first time it meets a topic) for ``--lookups``
random topics never asked before: p50 / p99 latency. The MetaServer's RSS is read before the placements,
after them and after the lookups (the table is never held in memory: each lookup is one primary-key read).

    python bench/placement_scale.py [--topics 1000000] [--clusters 100] [--lookups 2000] [--quick]

Last line: RESULT {"topics": ..., "clusters": ..., "load_s": ..., "lookup_p50_ms": ..., "lookup_p99_ms": ...,
"rss_mb": {...}}
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.metaserver_auth import (  # noqa: E402
    admin,
    pg_drop_schema,
    pg_dsn,
    pg_fresh_schema,
    pg_reachable,
    start_server,
    stop_server,
)
from tests.support import rss_mb  # noqa: E402
from ykafka.auth import GrantClient  # noqa: E402

TARGET_P99_MS = 10.0
BATCH = 10_000


def topic_name(i: int) -> str:
    return f"svc-{i % 997:03d}.events-{i:07d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="20,000 topics over 10 clusters, 300 lookups")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.clusters, args.lookups = 20_000, 10, 300
    dsn = pg_dsn()
    reason = pg_reachable(dsn)
    if reason is not None:
        sys.exit(f"PostgreSQL is needed ({reason})")
    db_url = pg_fresh_schema(dsn)
    proc, port = start_server(db_url, workers=1)
    try:
        clusters = [f"c{n:03d}" for n in range(args.clusters)]
        for name in clusters:
            admin(port, "PUT", f"/v1/admin/clusters/{name}", {"bootstrap_servers": f"10.1.{len(name)}.1:9092"})
        created = admin(port, "POST", "/v1/admin/apps", {"app_id": "placer", "acl": {
            "produce": ["svc-*"], "consume": [], "group": []}})
        rss = {"idle": rss_mb(proc.pid)}
        started = time.perf_counter()
        for first in range(0, args.topics, BATCH):
            batch = {topic_name(i): clusters[i % len(clusters)] for i in range(first, min(first + BATCH, args.topics))}
            admin(port, "PUT", "/v1/admin/placements", {"placements": batch})
            if first and first % 100_000 == 0:
                print(f"placed {first:,} topics ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        load_s = time.perf_counter() - started
        rss["after_load"] = rss_mb(proc.pid)
        with tempfile.TemporaryDirectory() as cache:
            client = GrantClient(f"http://127.0.0.1:{port}", "placer", created["secret"], "bench-1", "127.0.0.1",
                                 Path(cache))
            grant = client.authenticate()
            assert grant.placements, "the grant must tell the client to ask for placements"
            picks = random.Random(7).sample(range(args.topics), args.lookups)
            for i in picks[:20]:  # warm the connection and the server's code paths
                client.placement(grant, topic_name(i))
            latencies = []
            for i in picks[20:]:
                t0 = time.perf_counter()
                cluster = client.placement(grant, topic_name(i))
                latencies.append((time.perf_counter() - t0) * 1000)
                assert cluster == clusters[i % len(clusters)], (i, cluster)
            missing = client.placement(grant, "svc-000.never-placed")
            assert missing is None
            client.close()
        rss["after_lookups"] = rss_mb(proc.pid)
        latencies.sort()
        result = {
            "topics": args.topics, "clusters": args.clusters, "load_s": round(load_s, 1),
            "lookups": len(latencies), "lookup_p50_ms": round(statistics.median(latencies), 2),
            "lookup_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2), "target_p99_ms": TARGET_P99_MS,
            "rss_mb": rss,
        }
    finally:
        stop_server(proc)
        pg_drop_schema(dsn, db_url)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
