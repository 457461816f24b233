"""The config service holding 100,000 namespaces: start-up, memory, and release → parked poll answered.

Builds its data itself: the service creates its schema and one namespace through the Open API, is stopped,
and the other namespaces (an item and a release each, with their release messages, as a release through
the Open API writes them) are inserted in bulk into its SQLite database; then it starts again on them.
Pollers park on ``--pollers`` different namespaces (each at its current notification id); ``--releases``
of those namespaces are released one after another through the Open API, and the time from each release
request to its poller's answer is measured. The pollers of namespaces not released must stay parked.

    python bench/configcenter_namespaces.py [--namespaces 100000] [--pollers 200] [--releases 20] [--quick]

Last line: RESULT {"namespaces": ..., "start_s": ..., "rss_mb": ..., "release_p50_ms": ...,
"release_p99_ms": ..., "answered": ..., "wrongly_answered": ..., "errors": ...}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.configcenter_longpoll import APP, TOKEN, api, http, raise_fd_limit, read_response  # noqa: E402
from tests.support import ConfigService, rss_mb  # noqa: E402

HOST = "127.0.0.1"
TARGET_MS = 1000.0


def ns_name(i: int) -> str:
    return f"ykafka.topic.t{i:06d}"


def bulk_insert(db: Path, count: int) -> None:
    """Namespaces 1..count-1 as a release through the Open API leaves them (namespace 0 was made that way)."""
    import sqlalchemy as sa

    from metaserver.configcenter import models as m
    from metaserver.configcenter.readmodel import message_key

    engine = sa.create_engine(f"sqlite:///{db}")
    names = [ns_name(i) for i in range(1, count)]
    with engine.begin() as conn:
        conn.execute(sa.insert(m.AppNamespace), [{"app_id": APP, "name": n, "format": "properties"} for n in names])
        conn.execute(sa.insert(m.Namespace), [{"app_id": APP, "cluster_name": "default", "namespace_name": n}
                                              for n in names])
        ids = dict(conn.execute(sa.select(m.Namespace.namespace_name, m.Namespace.id)
                                .where(m.Namespace.app_id == APP)).all())
        conn.execute(sa.insert(m.Item), [{"namespace_id": ids[n], "key": "producer.linger.ms", "value": "5",
                                          "line_num": 1} for n in names])
        conn.execute(sa.insert(m.Release), [
            {"release_key": uuid.uuid4().hex, "name": "r0", "app_id": APP, "cluster_name": "default",
             "namespace_name": n, "configurations": json.dumps({"producer.linger.ms": "5"})} for n in names])
        conn.execute(sa.insert(m.ReleaseMessage), [{"message": message_key(APP, "default", n)} for n in names])
    engine.dispose()


async def poll(port: int, namespace: str, notification_id: int) -> tuple[float, int, bytes]:
    query = urlencode({"appId": APP, "cluster": "default", "ip": "10.0.0.9",
                       "notifications": json.dumps([{"namespaceName": namespace, "notificationId": notification_id}])},
                      quote_via=quote)
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"GET /notifications/v2?{query} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status, body = await read_response(reader)
        return time.perf_counter(), status, body
    finally:
        writer.close()


async def measure(port: int, pid: int, count: int, pollers: int, releases: int) -> dict[str, Any]:
    rng = random.Random(11)
    watched = [ns_name(i) for i in rng.sample(range(count), pollers)]
    current: dict[str, int] = {}
    for namespace in watched:  # an id of -1 answers at once with the namespace's current id
        _, status, body = await poll(port, namespace, -1)
        if status != 200:
            raise RuntimeError(f"first poll of {namespace}: {status} {body[:100]!r}")
        current[namespace] = json.loads(body)[0]["notificationId"]
    tasks = {namespace: asyncio.create_task(poll(port, namespace, current[namespace])) for namespace in watched}
    deadline = time.monotonic() + 60
    while json.loads((await http(HOST, port, "GET", "/stats"))[1])["longPolls"] < pollers:
        if time.monotonic() > deadline:
            raise RuntimeError("the polls did not all park")
        await asyncio.sleep(0.1)
    latencies: list[float] = []
    errors: list[str] = []
    released = watched[:releases]
    for n, namespace in enumerate(released):
        path = f"/envs/DEV/apps/{APP}/clusters/default/namespaces/{namespace}"
        await api(HOST, port, "PUT", f"{path}/items/producer.linger.ms?createIfNotExists=true",
                  {"key": "producer.linger.ms", "value": str(10 + n), "dataChangeLastModifiedBy": "bench"})
        sent = time.perf_counter()
        await api(HOST, port, "POST", f"{path}/releases", {"releaseTitle": f"r{n + 1}", "releasedBy": "bench"})
        answered_at, status, body = await asyncio.wait_for(tasks[namespace], timeout=30)
        if status != 200 or json.loads(body)[0]["notificationId"] <= current[namespace]:
            errors.append(f"{namespace}: {status} {body[:80]!r}")
        latencies.append((answered_at - sent) * 1000)
    await asyncio.sleep(0.5)
    wrongly = sum(1 for namespace in watched[releases:] if tasks[namespace].done())
    for task in tasks.values():
        task.cancel()
    latencies.sort()
    return {"namespaces": count, "pollers": pollers, "releases": len(latencies),
            "release_p50_ms": round(latencies[len(latencies) // 2], 1),
            "release_p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1),
            "release_max_ms": round(latencies[-1], 1), "target_ms": TARGET_MS, "answered": len(latencies),
            "wrongly_answered": wrongly, "errors": len(errors), "rss_mb": rss_mb(pid)}


async def run(count: int, pollers: int, releases: int) -> dict[str, Any]:
    raise_fd_limit(pollers * 2 + 256)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "cc.db"
        service = ConfigService(db, longpoll_timeout=60, token=TOKEN).start()
        try:
            port = service.port
            await api(HOST, port, "POST", "/apps", {"app": {"appId": APP, "name": APP, "orgId": "bench",
                                                            "orgName": "bench", "ownerName": "bench"},
                                                    "admins": ["bench"]})
            await api(HOST, port, "POST", f"/apps/{APP}/appnamespaces",
                      {"name": ns_name(0), "appId": APP, "format": "properties", "isPublic": False,
                       "dataChangeCreatedBy": "bench"})
            path = f"/envs/DEV/apps/{APP}/clusters/default/namespaces/{ns_name(0)}"
            await api(HOST, port, "POST", f"{path}/items", {"key": "producer.linger.ms", "value": "5",
                                                            "dataChangeCreatedBy": "bench"})
            await api(HOST, port, "POST", f"{path}/releases", {"releaseTitle": "r0", "releasedBy": "bench"})
        finally:
            service.stop()
        loaded = time.perf_counter()
        bulk_insert(db, count)
        load_s = time.perf_counter() - loaded
        service = ConfigService(db, longpoll_timeout=60, token=TOKEN)
        started = time.perf_counter()
        service.start(timeout=300)
        start_s = time.perf_counter() - started
        try:
            assert service.pid is not None
            result = await measure(service.port, service.pid, count, pollers, releases)
        finally:
            service.stop()
    return {**result, "load_s": round(load_s, 1), "start_s": round(start_s, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=100_000)
    parser.add_argument("--pollers", type=int, default=200)
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5,000 namespaces, 40 pollers, 5 releases")
    args = parser.parse_args()
    if args.quick:
        args.namespaces, args.pollers, args.releases = 5_000, 40, 5
    result = asyncio.run(run(args.namespaces, args.pollers, args.releases))
    print("RESULT " + json.dumps(result))
    return 0 if result["errors"] == 0 and result["wrongly_answered"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
