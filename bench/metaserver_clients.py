"""The MetaServer under a fleet: N clients reporting every 30 s (and renewing their grants), on SQLite and
PostgreSQL: p99 of the report and grant calls, and the server's CPU per 1,000 clients.

Starts its own MetaServer per backend (the helpers of ``bench/metaserver_auth.py``: free port, own
PostgreSQL schema, stopped by its process group). The fleet is simulated open-loop at its steady rate:
``clients / 30`` reports per second (each a distinct client id with a realistic body) plus ``clients /
renew`` signed grants per second, paced on a schedule by a few keep-alive threads; a call's latency runs
from its *scheduled* time to its answer, so a stalled server is not hidden by the driver waiting on it. CPU
is the utime + stime of the server's process group over the window (``/proc``).

    python bench/metaserver_clients.py [--clients 10000] [--seconds 20] [--renew-s 600] [--quick]

Last line: RESULT {"sqlite": {"report_p99_ms": ..., "grant_p99_ms": ..., "cpu_per_1000_clients": ...}, ...}
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

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
from ykafka import signing  # noqa: E402

REPORT_EVERY_S = 30.0
TARGET_P99_MS = 50.0
THREADS = 6


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by every live process of a process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def grant(conn: http.client.HTTPConnection, app_id: str, key: bytes, client_id: str) -> tuple[bool, str]:
    body = json.dumps({"app_id": app_id, "client_id": client_id, "ip": "127.0.0.1"}).encode()
    headers = signing.signed_headers(app_id, key, "POST", "/v1/auth/grant", body)
    headers["Content-Type"] = "application/json"
    conn.request("POST", "/v1/auth/grant", body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        return False, ""
    return True, str(json.loads(data)["token"])


def report_body(app_id: str, client_id: str, n: int) -> bytes:
    return json.dumps({
        "client_id": client_id, "app_id": app_id, "ip": f"10.0.{n // 250 % 250}.{n % 250}",
        "hostname": f"host-{n}", "pid": 1000 + n, "language": "python",
        "versions": {"ykafka": "0.1", "confluent_kafka": "2.6", "librdkafka": "2.6"}, "role": "producer",
        "topics": [f"orders-{n % 50}", f"events-{n % 7}"], "cluster": "dc-a",
        "config_release_keys": {"ykafka.global": "r1", f"ykafka.topic.orders-{n % 50}": "r2"},
        "state": "running", "errors": []}).encode()


def drive(port: int, app_id: str, key: bytes, token: str, clients: int, seconds: float, renew_s: float,
          start_at: float, thread: int, out: dict[str, list[float]], errors: list[str]) -> None:
    """One driver thread: its share of the schedule (every THREADS-th call), latencies from schedule."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    report_rate = clients / REPORT_EVERY_S
    grant_rate = clients / renew_s
    calls: list[tuple[float, str, int]] = []
    for kind, rate in (("report", report_rate), ("grant", grant_rate)):
        count = int(rate * seconds)
        calls += [(start_at + i / rate, kind, i) for i in range(count) if i % THREADS == thread]
    calls.sort()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for due, kind, i in calls:
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        client_id = f"client-{i % clients}"
        try:
            if kind == "report":
                conn.request("POST", "/v1/clients/report", body=report_body(app_id, client_id, i), headers=headers)
                response = conn.getresponse()
                response.read()
                ok = response.status == 204
            else:
                ok, _ = grant(conn, app_id, key, client_id)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            errors.append(repr(exc))
            continue
        out[kind].append((time.time() - due) * 1000)
        if not ok:
            errors.append(kind)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run_backend(db_url: str, clients: int, seconds: float, renew_s: float, workers: int) -> dict[str, Any]:
    proc, port = start_server(db_url, workers)
    try:
        admin(port, "PUT", "/v1/admin/clusters/dc-a", {"bootstrap_servers": "127.0.0.1:9092", "dc": "a"})
        app_id = f"bench-{uuid.uuid4().hex[:6]}"
        created = admin(port, "POST", "/v1/admin/apps", {"app_id": app_id, "acl": {"produce": ["*"]}})
        key = signing.derive_key(app_id, created["secret"])
        ok, token = grant(http.client.HTTPConnection("127.0.0.1", port, timeout=10), app_id, key, "bench")
        if not ok:
            raise RuntimeError("no grant for the bench app")
        out: dict[str, list[float]] = {"report": [], "grant": []}
        errors: list[str] = []
        start_at = time.time() + 0.5
        cpu_before = group_cpu_s(proc.pid)
        threads = [threading.Thread(target=drive, args=(port, app_id, key, token, clients, seconds, renew_s,
                                                         start_at, t, out, errors)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - start_at
        cpu = group_cpu_s(proc.pid) - cpu_before
    finally:
        stop_server(proc)
    cpu_share = cpu / elapsed  # cores busy on average
    return {"reports": len(out["report"]), "grants": len(out["grant"]), "errors": len(errors),
            "report_p50_ms": pct(out["report"], 0.5), "report_p99_ms": pct(out["report"], 0.99),
            "grant_p50_ms": pct(out["grant"], 0.5), "grant_p99_ms": pct(out["grant"], 0.99),
            "server_cpu_cores": round(cpu_share, 3), "cpu_per_1000_clients": round(cpu_share * 1000 / clients, 4),
            "calls_s": round((len(out["report"]) + len(out["grant"])) / elapsed, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--renew-s", type=float, default=600.0, help="each client's grant renewal interval")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    parser.add_argument("--pg-dsn", default=None, help="default: YKAFKA_TEST_PG_DSN or a private server")
    parser.add_argument("--quick", action="store_true", help="3 s per backend")
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    result: dict[str, Any] = {"clients": args.clients, "seconds": seconds,
                              "reports_s": round(args.clients / REPORT_EVERY_S, 1),
                              "grants_s": round(args.clients / args.renew_s, 1)}
    with tempfile.TemporaryDirectory(prefix="ms-fleet-") as tmp:
        result["sqlite"] = run_backend(f"sqlite:///{tmp}/ms.db", args.clients, seconds, args.renew_s, args.workers)
    print(f"sqlite:   {result['sqlite']}", flush=True)
    args.pg_dsn = args.pg_dsn or pg_dsn()
    reason = pg_reachable(args.pg_dsn)
    if reason is None:
        schema_dsn = pg_fresh_schema(args.pg_dsn)
        try:
            result["postgres"] = run_backend(schema_dsn, args.clients, seconds, args.renew_s, args.workers)
        finally:
            pg_drop_schema(args.pg_dsn, schema_dsn)
        print(f"postgres: {result['postgres']}", flush=True)
    else:
        result["postgres"] = None
        result["postgres_skipped"] = reason
    result["target_p99_ms"] = TARGET_P99_MS
    result["met"] = all(r is None or (r["errors"] == 0 and (r["report_p99_ms"] or 0) <= TARGET_P99_MS
                                      and (r["grant_p99_ms"] or 0) <= TARGET_P99_MS)
                        for r in (result["sqlite"], result["postgres"]))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
