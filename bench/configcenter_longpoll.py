"""Long-poll fan-out of the config center: N parked `/notifications/v2` polls, one release, time to answer.

Starts the service itself on a free port (subprocess, temp DB, stopped by its own pid), parks N pollers on
one namespace with raw asyncio HTTP/1.1 (so the client side stays cheap), publishes one release through the
Open API, and measures for every poller the time from sending the publish request to receiving its answer.

    python bench/configcenter_longpoll.py [--pollers 2000] [--timeout 90] [--quick]

Last line: RESULT {"pollers": N, "p50_ms": ..., "p99_ms": ..., "max_ms": ...}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ykafka.devstack import free_port  # noqa: E402

TOKEN = "bench-token"
APP = "bench"
NS = "bench.longpoll"


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < needed:
        print(f"warning: fd limit {want} is below the {needed} this run needs", file=sys.stderr)


async def http(host: str, port: int, method: str, target: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 request on its own connection; returns (status, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        head = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json;charset=UTF-8")
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return status, (await reader.readexactly(length) if length else b"")


async def api(host: str, port: int, method: str, path: str, body: Any = None) -> Any:
    status, data = await http(host, port, method, "/openapi/v1" + path, body, {"Authorization": TOKEN})
    if status != 200:
        raise RuntimeError(f"{method} {path}: {status} {data!r}")
    return json.loads(data) if data else None


async def poller(host: str, port: int, target: bytes, connected: asyncio.Semaphore,
                 results: list[float], errors: list[str]) -> None:
    try:
        async with connected:
            reader, writer = await asyncio.open_connection(host, port)
        writer.write(target)
        await writer.drain()
        status, body = await read_response(reader)
        results.append(time.perf_counter())
        if status != 200 or b"notificationId" not in body:
            errors.append(f"{status} {body[:80]!r}")
        writer.close()
    except Exception as exc:  # a failed poller is reported, not fatal
        errors.append(repr(exc))


async def run(pollers: int, longpoll_timeout: float) -> dict[str, Any]:
    raise_fd_limit(pollers * 2 + 256)
    port = free_port()
    host = "127.0.0.1"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "metaserver.configcenter", "serve", "--host", host, "--port", str(port),
             "--db", str(Path(tmp) / "cc.db"), "--longpoll-timeout", str(longpoll_timeout),
             "--openapi-token", TOKEN, "--log-level", "warning"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            return await measure(host, port, pollers)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def measure(host: str, port: int, pollers: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        try:
            if (await http(host, port, "GET", "/health"))[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("service did not start")
        await asyncio.sleep(0.1)

    await api(host, port, "POST", "/apps", {"app": {"appId": APP, "name": APP, "orgId": "bench", "orgName": "bench",
                                                     "ownerName": "bench"}, "admins": ["bench"]})
    await api(host, port, "POST", f"/apps/{APP}/appnamespaces", {"name": NS, "appId": APP, "format": "properties",
                                                                 "isPublic": False, "dataChangeCreatedBy": "bench"})
    ns_path = f"/envs/DEV/apps/{APP}/clusters/default/namespaces/{NS}"
    await api(host, port, "POST", f"{ns_path}/items", {"key": "k", "value": "0", "dataChangeCreatedBy": "bench"})
    await api(host, port, "POST", f"{ns_path}/releases", {"releaseTitle": "r0", "releasedBy": "bench"})
    query = urlencode({"appId": APP, "cluster": "default",
                       "notifications": json.dumps([{"namespaceName": NS, "notificationId": -1}])}, quote_via=quote)
    status, body = await http(host, port, "GET", "/notifications/v2?" + query)
    current = json.loads(body)[0]["notificationId"]

    query = urlencode({"appId": APP, "cluster": "default", "ip": "10.0.0.1",
                       "notifications": json.dumps([{"namespaceName": NS, "notificationId": current}])},
                      quote_via=quote)
    target = (f"GET /notifications/v2?{query} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n").encode()
    results: list[float] = []
    errors: list[str] = []
    connected = asyncio.Semaphore(256)  # pace connects so the accept backlog never overflows
    tasks = [asyncio.create_task(poller(host, port, target, connected, results, errors)) for _ in range(pollers)]

    parked_by = time.monotonic() + 60
    while True:
        _, stats = await http(host, port, "GET", "/stats")
        parked = json.loads(stats)["longPolls"]
        if parked >= pollers:
            break
        if time.monotonic() > parked_by:
            raise RuntimeError(f"only {parked} of {pollers} polls parked")
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)

    await api(host, port, "PUT", f"{ns_path}/items/k?createIfNotExists=true",
              {"key": "k", "value": "1", "dataChangeLastModifiedBy": "bench"})
    released_at = time.perf_counter()
    await api(host, port, "POST", f"{ns_path}/releases", {"releaseTitle": "r1", "releasedBy": "bench"})
    publish_ms = (time.perf_counter() - released_at) * 1000
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)

    latencies = sorted((t - released_at) * 1000 for t in results)
    if not latencies:
        raise RuntimeError(f"no poller answered: {errors[:3]}")

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1)

    return {"pollers": pollers, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": round(latencies[-1], 1),
            "answered": len(latencies), "errors": len(errors), "within_1s": sum(1 for x in latencies if x <= 1000),
            "publish_ms": round(publish_ms, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pollers", type=int, default=2000, help="concurrent long polls (default 2000)")
    parser.add_argument("--timeout", type=float, default=90.0, help="server long-poll timeout, seconds")
    parser.add_argument("--quick", action="store_true", help="500 pollers")
    args = parser.parse_args()
    if args.quick:
        args.pollers = 500
    result = asyncio.run(run(args.pollers, args.timeout))
    print("RESULT " + json.dumps(result))
    return 0 if result["errors"] == 0 and result["answered"] == args.pollers else 1


if __name__ == "__main__":
    sys.exit(main())
