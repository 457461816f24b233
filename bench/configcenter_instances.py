"""Cost of instance records on `/configs`: p99 with recording on vs off, N distinct clients fetching.

Starts the config service twice (records on, then `YKAFKA_CC_INSTANCE_RECORDS=0`), each on a free port with
a temp DB, stopped by its own pid. N clients (distinct `ip`) each fetch one namespace `--rounds` times with
at most `--concurrency` requests in flight (raw asyncio HTTP/1.1); every request's latency is kept. The first
round creates every record (the batch writer's heaviest case). Runs alternate off/on `--repeat` times and
the median p99 of each side is compared.

    python bench/configcenter_instances.py [--clients 2000] [--rounds 3] [--repeat 2] [--quick]

Last line: RESULT {"clients": N, "p99_off_ms": ..., "p99_on_ms": ..., "p99_change_pct": ..., "recorded": N}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from configcenter_longpoll import ROOT, TOKEN, api, free_port, http, raise_fd_limit  # noqa: E402

APP = "bench-inst"
NS = "bench.instances"
HOST = "127.0.0.1"


async def _setup(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if (await http(HOST, port, "GET", "/health"))[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("config service did not start")
        await asyncio.sleep(0.1)
    await api(HOST, port, "POST", "/apps", {"app": {"appId": APP, "name": APP, "orgId": "o", "orgName": "O",
                                                     "ownerName": "b"}, "admins": ["b"]})
    await api(HOST, port, "POST", f"/apps/{APP}/appnamespaces", {"name": NS, "appId": APP, "format": "properties",
                                                                  "isPublic": False, "dataChangeCreatedBy": "b"})
    for n in range(20):
        await api(HOST, port, "POST", f"/envs/DEV/apps/{APP}/clusters/default/namespaces/{NS}/items",
                  {"key": f"key.{n}", "value": f"value-{n}", "dataChangeCreatedBy": "b"})
    await api(HOST, port, "POST", f"/envs/DEV/apps/{APP}/clusters/default/namespaces/{NS}/releases",
              {"releaseTitle": "bench", "releasedBy": "b"})


async def _load(port: int, clients: int, rounds: int, concurrency: int) -> tuple[list[float], int]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    errors = 0

    async def fetch(n: int) -> None:
        nonlocal errors
        ip = f"198.{18 + n // 65536 % 2}.{n // 256 % 256}.{n % 256}"  # a label (RFC 2544 range): traffic is loopback
        async with gate:
            start = time.perf_counter()
            status, _ = await http(HOST, port, "GET", f"/configs/{APP}/default/{NS}?ip={ip}&dataCenter=bench")
            latencies.append((time.perf_counter() - start) * 1000)
        if status != 200:
            errors += 1

    for _ in range(rounds):
        await asyncio.gather(*(fetch(n) for n in range(clients)))
    return latencies, errors


async def _recorded(port: int) -> int:
    await asyncio.sleep(2.5)  # two flush intervals
    count: int = await api(HOST, port, "GET", f"/envs/DEV/instances/by-namespace/count?appId={APP}"
                                              f"&clusterName=default&namespaceName={NS}")
    return count


async def one_run(record: bool, clients: int, rounds: int, concurrency: int) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "YKAFKA_CC_INSTANCE_RECORDS": "1" if record else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "metaserver.configcenter", "serve", "--host", HOST, "--port", str(port),
             "--db", str(Path(tmp) / "cc.db"), "--openapi-token", TOKEN, "--log-level", "warning"],
            cwd=ROOT, env=env)
        try:
            await _setup(port)
            latencies, errors = await _load(port, clients, rounds, concurrency)
            recorded = await _recorded(port)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    latencies.sort()
    return {"p50": latencies[len(latencies) // 2], "p99": latencies[int(len(latencies) * 0.99) - 1],
            "errors": errors, "recorded": recorded}


async def run(clients: int, rounds: int, concurrency: int, repeat: int) -> dict[str, Any]:
    raise_fd_limit(concurrency * 2 + 256)
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(repeat):
        for record in (False, True):
            runs[record].append(await one_run(record, clients, rounds, concurrency))
            print(f"records {'on ' if record else 'off'}: {json.dumps(runs[record][-1])}", file=sys.stderr)
    off = statistics.median(r["p99"] for r in runs[False])
    on = statistics.median(r["p99"] for r in runs[True])
    return {"clients": clients, "rounds": rounds, "concurrency": concurrency, "repeat": repeat,
            "p50_off_ms": round(statistics.median(r["p50"] for r in runs[False]), 2),
            "p50_on_ms": round(statistics.median(r["p50"] for r in runs[True]), 2),
            "p99_off_ms": round(off, 2), "p99_on_ms": round(on, 2), "p99_change_pct": round((on - off) / off * 100, 1),
            "recorded": min(r["recorded"] for r in runs[True]),
            "errors": sum(r["errors"] for rs in runs.values() for r in rs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2000, help="distinct clients (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="fetches per client (default 3)")
    parser.add_argument("--concurrency", type=int, default=100, help="requests in flight (default 100)")
    parser.add_argument("--repeat", type=int, default=2, help="off/on pairs (default 2)")
    parser.add_argument("--quick", action="store_true", help="500 clients, 2 rounds, 1 pair")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.rounds, args.repeat = 500, 2, 1
    result = asyncio.run(run(args.clients, args.rounds, args.concurrency, args.repeat))
    print("RESULT " + json.dumps(result))
    return 0 if result["errors"] == 0 and result["recorded"] == args.clients else 1


if __name__ == "__main__":
    sys.exit(main())
