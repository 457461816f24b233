"""Signed-grant throughput and latency of the MetaServer, on SQLite and on PostgreSQL.

Starts its own MetaServer (``python -m metaserver serve``) per backend on a free loopback port, creates
an app, then drives signed ``POST /v1/auth/grant`` requests from several client processes over
keep-alive connections for a fixed time. PostgreSQL is skipped (null) when none answers.

    .venv/bin/python bench/metaserver_auth.py [--seconds 10] [--clients 3] [--workers 2]

Last line: ``RESULT {"sqlite": {"grants_s": ..., "p99_ms": ...}, "postgres": {...} | null}``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ykafka import signing  # noqa: E402
from ykafka.devstack import free_port  # noqa: E402

ADMIN = "bench-admin-token"


def pg_dsn() -> str:
    """``YKAFKA_TEST_PG_DSN``, else a private server started for this run (tests.pg_server), else a DSN that
    fails (the PostgreSQL figures are then reported as skipped with the reason)."""
    from tests.pg_server import ensure_pg

    dsn, _reason = ensure_pg()
    return dsn or "postgresql+psycopg://postgres@127.0.0.1:1/unavailable"


def pg_reachable(dsn: str) -> str | None:
    """None when PostgreSQL answers, else the reason."""
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(dsn)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "skip PostgreSQL"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def pg_fresh_schema(dsn: str) -> str:
    """A schema of its own so runs do not see each other's rows; returns the DSN using it."""
    import sqlalchemy as sa

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(dsn)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}"


def pg_drop_schema(dsn: str, schema_dsn: str) -> None:
    import sqlalchemy as sa

    schema = schema_dsn.rsplit("search_path%3D", 1)[1]
    engine = sa.create_engine(dsn)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


def start_server(db_url: str, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "metaserver", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--db-url", db_url, "--admin-token", ADMIN, "--workers", str(workers),
         "--log-level", os.environ.get("BENCH_LOG_LEVEL", "warning"),
         "--auth-fail-limit", "1000000"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"metaserver exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("metaserver did not come up")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def admin(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {data!r}")
    return json.loads(data) if data else None


def client_loop(port: int, app_id: str, key: bytes, seconds: float, start_at: float,
                out: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies: list[float] = []
    errors = 0
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    client_id = f"bench-{os.getpid()}"
    while True:
        now = time.perf_counter()
        if time.time() >= end:
            break
        body = json.dumps({"app_id": app_id, "client_id": client_id, "ip": "127.0.0.1"}).encode()
        headers = signing.signed_headers(app_id, key, "POST", "/v1/auth/grant", body)
        headers["Content-Type"] = "application/json"
        conn.request("POST", "/v1/auth/grant", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200 or b'"token"' not in payload:
            errors += 1
        latencies.append(time.perf_counter() - now)
    out.put((latencies, errors))


def run_backend(db_url: str, seconds: float, clients: int, workers: int) -> dict[str, Any]:
    proc, port = start_server(db_url, workers)
    try:
        admin(port, "PUT", "/v1/admin/clusters/dc-a", {"bootstrap_servers": "127.0.0.1:9092", "dc": "a"})
        app_id = f"bench-{uuid.uuid4().hex[:6]}"
        created = admin(port, "POST", "/v1/admin/apps", {"app_id": app_id, "acl": {"produce": ["*"]}})
        key = signing.derive_key(app_id, created["secret"])
        ctx = mp.get_context("fork")
        queue: Any = ctx.Queue()
        start_at = time.time() + 1.0
        procs = [ctx.Process(target=client_loop, args=(port, app_id, key, seconds, start_at, queue))
                 for _ in range(clients)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=seconds + 60) for _ in procs]
        for p in procs:
            p.join(timeout=10)
    finally:
        stop_server(proc)
    latencies = sorted(lat for lats, _ in results for lat in lats)
    errors = sum(err for _, err in results)
    ok = len(latencies) - errors

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 2)

    return {"grants_s": round(ok / seconds, 1), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0),
            "requests": len(latencies), "errors": errors, "clients": clients, "workers": workers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg-dsn", default=None, help="default: YKAFKA_TEST_PG_DSN or a private server")
    parser.add_argument("--quick", action="store_true", help="2 s, 2 clients, 1 worker (the suite's check)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.clients, args.workers = 2.0, 2, 1

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ms-bench-") as tmp:
        sqlite = run_backend(f"sqlite:///{tmp}/ms.db", args.seconds, args.clients, args.workers)
    print(f"sqlite:   {sqlite}")
    result["sqlite"] = sqlite
    args.pg_dsn = args.pg_dsn or pg_dsn()
    reason = pg_reachable(args.pg_dsn)
    if reason is None:
        schema_dsn = pg_fresh_schema(args.pg_dsn)
        try:
            pg = run_backend(schema_dsn, args.seconds, args.clients, args.workers)
        finally:
            pg_drop_schema(args.pg_dsn, schema_dsn)
        print(f"postgres: {pg}")
        result["postgres"] = pg
    else:
        print(f"postgres: skipped ({reason})")
        result["postgres"] = None
        result["postgres_skipped"] = reason
    result["target"] = {"sqlite_grants_s": 1000, "p99_ms": 50}
    print("RESULT " + json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
