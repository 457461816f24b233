"""The control plane as the fleet grows: 3 config services and 3 MetaServers on PostgreSQL, at N clients each size.

Starts, per size, a fresh pair of PostgreSQL schemas (a private server, tests.pg_server, unless
``YKAFKA_TEST_PG_DSN`` names one), 3 config services and 3 MetaServers on them (as ``ykafka dev up --replicas 3``
does, on free ports, each in its own process group, stopped by pid), seeds the client inventory with N clients
over N/10 topics and N/50 groups, then measures with load generators in their own processes (spawned, asyncio
over keep-alive HTTP/1.1 connections, open loop: a call's latency runs from its *scheduled* time):

1. ``report_*`` / ``renew_*``: N clients' client reports (one per 30 s each) and grant renewals (one per
   ``--renew-s``) spread over the 3 MetaServers for ``--seconds``: p50 / p99 / errors and the rate reached;
2. ``release_*``: min(N, the fd limit allows) long polls parked over the 3 config services, one release through
   one of them: p99 from the release call to each poll answered, ``missed`` = polls not answered in 30 s;
   ``after_kill_*``: one config service SIGKILLed, its polls re-park on the others (``repark_s``), those that
   find no room are refused for ``--age-s`` (``unparked_after_kill``, ``refused_per_s_while_aging``), a
   release: the same figures. Each config service parks at most its cap (``--cc-max-parked``, default from its
   open-file limit; ``cc_max_parked``): polls beyond it get 503 + Retry-After (``cc_poll_retry_after_s``) and
   move on and wait as the SDK's client does (``ykafka.endpoints.Endpoints``) (``parked``,
   ``refused_before_release``, ``refused``);
3. ``console_*``: the console's pages over HTTP on a MetaServer (logged in as an admin) with the N-client
   inventory: p95 per page and of the clients page's filters, each page's first view apart (``console_first_ms``,
   and its MetaServer + PostgreSQL CPU ``console_first_cpu_ms``: the summaries over every live client it needs
   were read by the MetaServer when it started, metaserver/console/warm.py, so it does not scan them);
4. ``week_*``: a simulated week of the inventory (every client reporting through ``clients.store`` with a clock
   moved forward, a share restarting as new processes each day, the retention pruning run daily): rows and
   bytes of the inventory tables at the end, against what a history of every heartbeat would hold;
5. cost: CPU cores the MetaServers used per 1,000 clients during (1) (and seconds per request), peak RSS per
   server, rows and bytes in PostgreSQL (the client state, its history and the held release keys); the
   generators' own CPU is reported apart (``gen_cpu_s``), so the servers' cost is read from
   ``/proc/<pid>/stat`` of the servers alone, not from wall time on shared cores.

Each figure is plotted against the client count into ``--png`` (matplotlib). The machine's per-process fd limit
caps the parked polls (each a socket on both ends): ``watchers`` says how many were parked at each size.

    python bench/control_plane_scale.py [--sizes 1000,10000,100000] [--seconds 10] [--png docs/img/...] [--quick]
        [--max-rate 350] [--max-watchers 18000] [--phases fleet,console,fanout,week] [--plot-from OUT ...]

Last line: RESULT {"sizes": [...], "by_size": {"1000": {...}, ...}, "targets": {...}}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import math
import multiprocessing
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench.metaserver_auth import pg_dsn, pg_reachable  # noqa: E402
from ykafka.devstack import free_port  # noqa: E402

ADMIN = "bench-admin"
CC_TOKEN = "bench-cc-token"
APP = "bench-scale"
NS = "bench.scale"
REPORT_EVERY_S = 30.0
TARGETS = {"report_p99_ms": 50.0, "renew_p99_ms": 50.0, "release_p99_ms": 2000.0, "after_kill_p99_ms": 2000.0,
           "console_p95_max_ms": 150.0, "console_filter_p95_ms": 100.0}
#: a report or renewal still queued in the generator this long after its scheduled time is dropped and
#: counted (``fleet_shed``): the server is past its capacity, and a backlog would only stretch the run
SHED_AFTER_S = 10.0
#: parked polls per process (server or generator): each is one socket, under the machine's open-file limit
FD_HEADROOM = 1500


def fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one process and its reaped children so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def children(ppid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def pct(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile: the 19th of 20 values for p95 (the index ``int(q * n)`` taken before read
    one rank high: the slowest of 20 page views as their p95)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(round(q * len(ordered), 9)) - 1))], 1)


# --- the servers -------------------------------------------------------------------------------------------------

class Stack:
    """3 config services and 3 MetaServers on two fresh schemas of one PostgreSQL database."""

    def __init__(self, dsn: str, home: Path, cc_max_parked: int = 0) -> None:
        import sqlalchemy as sa

        self.dsn = dsn
        self.tag = uuid.uuid4().hex[:8]
        self.schemas = {"ms": f"scale_ms_{self.tag}", "cc": f"scale_cc_{self.tag}"}
        engine = sa.create_engine(dsn)
        with engine.begin() as conn:
            for schema in self.schemas.values():
                conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
            backend = int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
            self.postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1]) \
                if Path(f"/proc/{backend}").exists() else None  # PostgreSQL on this machine: its CPU is read
        engine.dispose()
        sep = "&" if "?" in dsn else "?"
        self.urls = {k: f"{dsn}{sep}options=-csearch_path%3D{s}" for k, s in self.schemas.items()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.cc_ports = [free_port() for _ in range(3)]
        self.ms_ports = [free_port() for _ in range(3)]
        self.home = home
        env = {**os.environ, "PYTHONPATH": str(ROOT), "YKAFKA_CC_OPENAPI_TOKEN": CC_TOKEN,
               "YKAFKA_MS_CONFIGCENTER_OPENAPI_TOKEN": CC_TOKEN, "YKAFKA_MS_ADMIN_TOKEN": ADMIN,
               "YKAFKA_CC_MAX_PARKED_POLLS": str(cc_max_parked)}  # 0: each derives it from its open-file limit
        cc_urls = ",".join(f"http://127.0.0.1:{p}" for p in self.cc_ports)
        for i, port in enumerate(self.cc_ports):
            self._start(f"cc{i}", [sys.executable, "-P", "-m", "metaserver.configcenter", "serve", "--host",
                                   "127.0.0.1", "--port", str(port), "--db", self.urls["cc"],
                                   "--longpoll-timeout", "120", "--log-level", "warning"], env, port)
        for i, port in enumerate(self.ms_ports):
            self._start(f"ms{i}", [sys.executable, "-P", "-m", "metaserver", "serve", "--host", "127.0.0.1",
                                   "--port", str(port), "--db-url", self.urls["ms"], "--configcenter-url", cc_urls,
                                   "--auth-fail-limit", "1000000", "--log-level", "warning"], env, port)
        try:
            self._wait()
        except BaseException:
            self.stop()  # every server started so far, by pid, and the schemas
            raise

    def _start(self, name: str, argv: list[str], env: dict[str, str], port: int) -> None:
        """Start one server; :meth:`_wait` for all of them together (six one after another took minutes)."""
        with open(self.home / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        self.ports[name] = port

    def _wait(self) -> None:
        deadline = time.monotonic() + 180
        for name, port in self.ports.items():
            while True:
                if self.procs[name].poll() is not None:
                    raise RuntimeError(f"{name} exited: {(self.home / f'{name}.log').read_text()[-1500:]}")
                try:
                    if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer /health")
                time.sleep(0.2)

    def pids(self, kind: str) -> list[int]:
        return [p.pid for n, p in self.procs.items() if n.startswith(kind) and p.poll() is None]

    def postgres_pids(self) -> list[int]:
        """The postmaster's processes (the backends serving every server, and its own workers)."""
        return [] if self.postmaster is None else [self.postmaster, *children(self.postmaster)]

    def stop(self) -> None:
        import sqlalchemy as sa

        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        engine = sa.create_engine(self.dsn)
        with engine.begin() as conn:
            for schema in self.schemas.values():
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def ms_admin(port: int, method: str, path: str, body: Any = None) -> Any:
    resp = requests.request(method, f"http://127.0.0.1:{port}{path}", json=body, timeout=30,
                            headers={"Authorization": f"Bearer {ADMIN}"})
    if resp.status_code >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status_code} {resp.text[:300]}")
    return resp.json() if resp.content else None


# --- the inventory -----------------------------------------------------------------------------------------------

def client_row(i: int, n_topics: int, n_groups: int) -> dict[str, Any]:
    """Client ``i``'s report columns, the same every time (so an unchanged report is recognised as such)."""
    rng = random.Random(i)
    consumer = i % 3 == 0
    topics = sorted({f"topic-{rng.randrange(n_topics):05d}" for _ in range(2)})
    return {"app_id": f"app-{i % 50:02d}", "client_id": f"client-{i:06d}", "ip": f"10.{i // 62500}.{i // 250 % 250}."
            f"{i % 250}", "hostname": f"host-{i // 8}", "pid": 1000 + i % 8, "process_started": 1.7e9 + i,
            "language": "python", "ykafka_version": "0.1.0", "confluent_kafka_version": "2.16.1",
            "librdkafka_version": "2.16.0" if i % 4 else "1.9.2", "role": "consumer" if consumer else "producer",
            "topics": topics, "group_id": f"group-{i % n_groups:04d}" if consumer else None, "cluster": "dc-a",
            "config_release_keys": {f"ykafka.topic.{t}": "r1" for t in topics}, "state": "running", "errors": [],
            "extra": {"dr": None, "errors": []}}


def seed(stack: Stack, n: int) -> dict[str, Any]:
    """N clients in the inventory (each reported within the last 2 minutes), 50 apps, a console admin."""
    from sqlalchemy import text

    from metaserver.console import users
    from metaserver.domain import sealing
    from metaserver.domain.clients import release_key_rows
    from metaserver.routes.admin import insert_app
    from metaserver.settings import Settings
    from metaserver.storage import db
    from metaserver.storage.models import client_release_keys, client_state

    engine = db.make_engine(stack.urls["ms"])
    now = time.time()
    rng = random.Random(7)
    n_topics, n_groups = max(10, n // 10), max(2, n // 50)
    started = time.monotonic()
    with db.write(engine) as conn:
        batch: list[dict[str, Any]] = []
        held: list[dict[str, str]] = []  # the release keys each holds, as a report writes them (clients.store)
        for i in range(n):
            row = client_row(i, n_topics, n_groups)
            batch.append({**row, "first_seen": now - 3600, "last_seen": now - rng.random() * 120})
            held += release_key_rows(row["app_id"], row["client_id"], row["config_release_keys"])
            if len(batch) == 5000:
                conn.execute(client_state.insert(), batch)
                conn.execute(client_release_keys.insert(), held)
                batch, held = [], []
        if batch:
            conn.execute(client_state.insert(), batch)
            conn.execute(client_release_keys.insert(), held)
        for a in range(min(50, max(2, n // 100))):
            insert_app(conn, "bench", f"app-{a:02d}", acl={"produce": ["*"], "consume": ["*"], "group": ["*"]},
                       sealer=sealing.load(Settings(), b""))  # no sealing key: stored as the MetaServer reads it
    users.create(engine, "bench", "bench-password", "admin")
    # analysed now, as a running inventory's tables are: else autovacuum analyses the fresh rows (100,000
    # clients, 200,000 held keys) while the console is timed, and a page's plan and PostgreSQL CPU with it (the
    # clients page's second page at 100,000 read 110-367 ms of PostgreSQL a view in --phases console runs,
    # 9 ms after the fleet phase had given autovacuum that time)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("ms_client_state", "ms_client_release_keys"):
            conn.execute(text(f"VACUUM ANALYZE {table}"))
    engine.dispose()
    return {"topics": n_topics, "groups": n_groups, "seed_s": round(time.monotonic() - started, 1)}


# --- load generator: reports and renewals -----------------------------------------------------------------------

async def _request(streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], head: bytes,
                   body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange on a kept-alive connection: status and body (and the response headers, lower-cased
    names, into ``headers`` when given)."""
    reader, writer = streams
    writer.write(head + body)
    await writer.drain()
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if headers is not None:
            headers[name.strip().lower()] = value.strip()
        if name.strip().lower() == "content-length":
            length = int(value)
    data = await reader.readexactly(length) if length else b""
    return int(lines[0].split(" ", 2)[1]), data


def report_body(app_id: str, i: int) -> bytes:
    return json.dumps({
        "client_id": f"client-{i:06d}", "app_id": app_id, "ip": f"10.0.{i // 250 % 250}.{i % 250}",
        "hostname": f"host-{i // 8}", "pid": 1000 + i % 8, "language": "python",
        "versions": {"ykafka": "0.1.0", "confluent_kafka": "2.16.1", "librdkafka": "2.16.0"},
        "role": "producer", "topics": [f"topic-{i % 997:05d}"], "cluster": "dc-a",
        "config_release_keys": {"ykafka.global": "r1"}, "state": "running", "errors": []}).encode()


def fleet_worker(pipe: Connection, ports: list[int], token: str, calls: list[tuple[float, str, int]],
                 conns: int) -> None:
    """One generator process: its share of the schedule over ``conns`` keep-alive connections (round robin over
    the MetaServers); latency from each call's scheduled time to its answer."""
    import uvloop

    async def run() -> dict[str, Any]:
        queue: asyncio.Queue[tuple[float, str, int] | None] = asyncio.Queue()
        lat: dict[str, list[float]] = {"report": [], "renew": []}
        errors: list[str] = []
        shed: list[str] = []

        async def connection(k: int) -> None:
            port = ports[k % len(ports)]
            streams = await asyncio.open_connection("127.0.0.1", port)
            while (item := await queue.get()) is not None:
                due, kind, i = item
                if time.time() - due > SHED_AFTER_S:  # a client would have given up: counted, not sent
                    shed.append(kind)
                    continue
                path = "/v1/clients/report" if kind == "report" else "/v1/auth/renew"
                body = report_body(APP, i) if kind == "report" else b"{}"
                head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                try:
                    status, _ = await _request(streams, head, body)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    errors.append(repr(exc)[:100])
                    streams[1].close()
                    streams = await asyncio.open_connection("127.0.0.1", port)
                    continue
                lat[kind].append((time.time() - due) * 1000)
                if status not in (200, 204):
                    errors.append(f"{kind} HTTP {status}")
            streams[1].close()

        workers = [asyncio.create_task(connection(k)) for k in range(conns)]
        for item in calls:
            wait = item[0] - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            queue.put_nowait(item)
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.gather(*workers)
        return {"lat": lat, "errors": errors, "shed": len(shed)}

    result = uvloop.run(run())
    result["cpu_s"] = time.process_time()
    pipe.send(result)


def fleet(stack: Stack, n: int, seconds: float, renew_s: float, procs: int, max_rate: float | None = None
          ) -> dict[str, Any]:
    """N clients' reports and renewals for ``seconds``. With ``max_rate`` below the fleet's rate, that rate is
    sent instead (spread over all N clients' ids, against the N-client inventory) and the cores the full rate
    needs are derived from the CPU per call measured (``*_derived``): what a generator sharing the cores can
    drive is the limit, not the servers' design."""
    created = ms_admin(stack.ms_ports[0], "POST", "/v1/admin/apps", {"app_id": APP, "acl": {"produce": ["*"]}})
    from ykafka import signing

    key = signing.derive_key(APP, created["secret"])
    body = json.dumps({"app_id": APP, "client_id": "bench", "ip": "127.0.0.1"}).encode()
    headers = {**signing.signed_headers(APP, key, "POST", "/v1/auth/grant", body), "Content-Type": "application/json"}
    token = requests.post(f"http://127.0.0.1:{stack.ms_ports[0]}/v1/auth/grant", data=body, headers=headers,
                          timeout=10).json()["token"]
    start_at = time.time() + 2.0
    report_rate, renew_rate = n / REPORT_EVERY_S, n / renew_s
    scale = min(1.0, max_rate / (report_rate + renew_rate)) if max_rate else 1.0
    sent_report, sent_renew = report_rate * scale, renew_rate * scale
    count = int(sent_report * seconds)
    stride = max(1, n // max(1, count))  # a capped rate still reports for clients all over the inventory
    schedule = [(start_at + i / sent_report, "report", (i * stride) % n) for i in range(count)]
    schedule += [(start_at + i / sent_renew, "renew", i) for i in range(int(sent_renew * seconds))]
    schedule.sort()
    # enough connections for the rate at ~20 ms a call (Little's law), at least 4 per process
    conns = max(4, math.ceil((sent_report + sent_renew) * 0.02 / procs) + 2)
    spawn = multiprocessing.get_context("spawn")
    pipes, workers = [], []
    for w in range(procs):
        ours, theirs = spawn.Pipe()
        proc = spawn.Process(target=fleet_worker, args=(theirs, stack.ms_ports, token, schedule[w::procs], conns),
                             daemon=True)
        proc.start()
        pipes.append(ours)
        workers.append(proc)
    ms_pids, pg_pids = stack.pids("ms"), stack.postgres_pids()
    time.sleep(max(0.0, start_at - time.time()))
    ms_cpu0, pg_cpu0 = sum(cpu_s(p) for p in ms_pids), sum(cpu_s(p) for p in pg_pids)
    results = [pipe.recv() for pipe in pipes]
    elapsed = time.time() - start_at
    ms_cpu, pg_cpu = sum(cpu_s(p) for p in ms_pids) - ms_cpu0, sum(cpu_s(p) for p in pg_pids) - pg_cpu0
    for proc in workers:
        proc.join(10)
    lat = {k: [x for r in results for x in r["lat"][k]] for k in ("report", "renew")}
    errors = [e for r in results for e in r["errors"]]
    calls = len(lat["report"]) + len(lat["renew"])
    full_rate = report_rate + renew_rate
    gen_cpu = sum(r["cpu_s"] for r in results)
    return {"report_rate_s": round(report_rate, 1), "renew_rate_s": round(renew_rate, 2),
            "fleet_rate_s": round(full_rate, 1), "offered_calls_s": round(sent_report + sent_renew, 1),
            "fleet_rate_capped": scale < 1.0,
            "reached_calls_s": round(calls / elapsed, 1), "fleet_window_s": round(elapsed, 1),
            "report_p50_ms": pct(lat["report"], 0.5), "report_p99_ms": pct(lat["report"], 0.99),
            "renew_p50_ms": pct(lat["renew"], 0.5), "renew_p99_ms": pct(lat["renew"], 0.99),
            "fleet_errors": len(errors), "fleet_error_sample": errors[:3],
            "fleet_shed": sum(r["shed"] for r in results),
            "ms_cpu_s": round(ms_cpu, 2), "ms_cpu_ms_per_call": round(ms_cpu * 1000 / max(1, calls), 3),
            "ms_cores": round(ms_cpu / elapsed, 3), "ms_cores_per_1000_clients": round(ms_cpu / elapsed * 1000 / n, 4),
            "pg_cpu_ms_per_call": round(pg_cpu * 1000 / max(1, calls), 3),
            "pg_cores_per_1000_clients": round(pg_cpu / elapsed * 1000 / n, 4),
            # the cores the fleet's full rate needs, from the CPU per call measured (equal to the measured
            # cores when the rate was not capped and every call was sent)
            "ms_cores_full_rate_derived": round(ms_cpu / max(1, calls) * full_rate, 2),
            "pg_cores_full_rate_derived": round(pg_cpu / max(1, calls) * full_rate, 2),
            "ms_cores_per_1000_clients_derived": round(ms_cpu / max(1, calls) * full_rate * 1000 / n, 4),
            "pg_cores_per_1000_clients_derived": round(pg_cpu / max(1, calls) * full_rate * 1000 / n, 4),
            "gen_cpu_s": round(gen_cpu, 2), "gen_cpu_ms_per_call": round(gen_cpu * 1000 / max(1, calls), 3),
            "gen_procs": procs, "gen_conns": conns * procs,
            "load_1m": round(os.getloadavg()[0], 2)}


# --- load generator: parked long polls ---------------------------------------------------------------------------

def watch_worker(pipe: Connection, ports: list[int], first: int, count: int, notification_id: int) -> None:
    """``count`` watchers, each starting on a config service at random; each moves between the instances
    and waits as the SDK's client does (its own ``ykafka.endpoints.Endpoints``: every instance once a round, then
    the Retry-After an instance said, else a growing back-off) and re-polls with the id it was answered. Answers
    the parent's ("wait", id, timeout): when each of its watchers first held an id >= ``id`` (monotonic seconds;
    None if not within the timeout)."""
    import uvloop

    from ykafka.endpoints import Endpoints, retry_after_s

    fd_limit()

    async def run() -> None:
        held = [notification_id] * count
        answered_at: list[list[tuple[float, int]]] = [[] for _ in range(count)]
        stop = asyncio.Event()

        urls = [f"http://127.0.0.1:{port}" for port in ports]

        async def watcher(j: int) -> None:
            endpoints = Endpoints(urls)  # a random start, as the SDK's
            streams = None
            while not stop.is_set():
                url = endpoints.current
                port = ports[urls.index(url)]
                query = urlencode({"appId": APP, "cluster": "default", "notifications": json.dumps(
                    [{"namespaceName": NS, "notificationId": held[j]}])}, quote_via=quote)
                head = f"GET /notifications/v2?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
                headers: dict[str, str] = {}
                try:
                    if streams is None:
                        streams = await asyncio.open_connection("127.0.0.1", port)
                    status, body = await _request(streams, head, b"", headers)
                except (OSError, asyncio.IncompleteReadError):
                    status = 0
                if status in (0, 503):  # gone, or full (503 + Connection: close, the cap on parked polls)
                    if streams is not None:
                        streams[1].close()
                        streams = None
                    wait = endpoints.failed(url, retry_after_s(headers.get("retry-after")) if status else None)
                    if wait:
                        await asyncio.sleep(wait)
                    continue
                endpoints.succeeded()
                if status == 200:
                    held[j] = int(json.loads(body)[0]["notificationId"])
                    answered_at[j].append((time.monotonic(), held[j]))
                elif status != 304:
                    await asyncio.sleep(0.5)

        tasks = []
        for j in range(count):
            tasks.append(asyncio.create_task(watcher(j)))
            if j % 200 == 199:
                await asyncio.sleep(0.01)  # pace the connects: the servers' accept backlog
        loop = asyncio.get_running_loop()
        while True:
            msg = await loop.run_in_executor(None, pipe.recv)
            if msg[0] == "stop":
                break
            _, target, timeout = msg
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and any(h < target for h in held):
                await asyncio.sleep(0.02)
            pipe.send([next((at for at, nid in a if nid >= target), None) for a in answered_at])
        stop.set()
        for task in tasks:
            task.cancel()
        pipe.send(time.process_time())

    uvloop.run(run())


def parked(stack: Stack, ports: list[int], key: str = "longPolls") -> int:
    """The sum of one ``/stats`` counter over ``ports``: polls parked now, the cap, or polls refused at it."""
    total = 0
    for port in ports:
        with contextlib.suppress(requests.RequestException):
            total += int(requests.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()[key])
    return total


def fanout(stack: Stack, n: int, per_proc: int, max_watchers: int | None = None, age_s: float = 30.0
           ) -> dict[str, Any]:
    from metaserver.domain.apollo import ApolloOpenApi

    cc = [f"http://127.0.0.1:{p}" for p in stack.cc_ports]
    api = ApolloOpenApi(cc[0], CC_TOKEN, app_id=APP)
    api.ensure_app()
    api.ensure_namespace(NS)
    api.set_item(NS, "v", "0")
    api.release(NS, "v0", "bench")
    current = requests.get(f"{cc[0]}/notifications/v2", timeout=10, params={
        "appId": APP, "cluster": "default",
        "notifications": json.dumps([{"namespaceName": NS, "notificationId": -1}])}).json()[0]["notificationId"]
    # each parked poll is a socket in a config service: after the kill the two survivors hold them all
    watchers = min(n, 2 * per_proc, max_watchers or n)
    procs = max(1, math.ceil(watchers / per_proc))
    spawn = multiprocessing.get_context("spawn")
    pipes, workers = [], []
    for w in range(procs):
        first, count = watchers * w // procs, watchers * (w + 1) // procs - watchers * w // procs
        ours, theirs = spawn.Pipe()
        proc = spawn.Process(target=watch_worker, args=(theirs, stack.cc_ports, first, count, current), daemon=True)
        proc.start()
        pipes.append(ours)
        workers.append(proc)
    out: dict[str, Any] = {"watchers": watchers, "watch_procs": procs}
    cc_pids = stack.pids("cc")
    caps = [parked(stack, [p], "maxLongPolls") for p in stack.cc_ports]  # beyond: 503, the watcher moves on
    out["cc_max_parked"] = min(caps)
    out["cc_poll_retry_after_s"] = parked(stack, stack.cc_ports[:1], "pollRetryAfter")  # the refused's bound
    try:
        started = time.monotonic()
        while parked(stack, stack.cc_ports) < min(watchers, sum(caps)):
            if time.monotonic() - started > 120 + watchers / 200:
                raise RuntimeError(f"only {parked(stack, stack.cc_ports)} of {watchers} polls parked")
            time.sleep(0.2)
        out["park_s"] = round(time.monotonic() - started, 1)
        out["parked"] = parked(stack, stack.cc_ports)
        time.sleep(1.0)
        out["cc_rss_parked_mb"] = max(rss_mb(p) for p in cc_pids)

        def release(value: str, through: str) -> tuple[list[float | None], float]:
            api_ = ApolloOpenApi(through, CC_TOKEN, app_id=APP, timeout_s=120)  # a busy survivor still answers
            api_.set_item(NS, "v", value)
            cpu0 = sum(cpu_s(p) for p in stack.pids("cc"))
            gen0 = sum(cpu_s(w.pid) for w in workers if w.pid)  # the watchers' own share of the 2 cores
            t0 = time.monotonic()
            api_.release(NS, value, "bench")
            # the id to wait for, from the instance that released (busy waking polls: a generous timeout)
            target = requests.get(f"{through}/notifications/v2", timeout=120, params={
                "appId": APP, "cluster": "default", "notifications": json.dumps(
                    [{"namespaceName": NS, "notificationId": -1}])}).json()[0]["notificationId"]
            for pipe in pipes:
                pipe.send(("wait", target, 30.0))
            seen = [at for pipe in pipes for at in pipe.recv()]
            cpu = sum(cpu_s(p) for p in stack.pids("cc")) - cpu0
            out[f"release_{value}_gen_cpu_s"] = round(sum(cpu_s(w.pid) for w in workers if w.pid) - gen0, 2)
            out[f"release_{value}_cc_cpu_s"] = round(cpu, 2)
            return [None if at is None else (at - t0) * 1000 for at in seen], cpu

        seen, cpu = release("1", cc[0])
        got = [x for x in seen if x is not None]
        out.update({"release_p50_ms": pct(got, 0.5), "release_p99_ms": pct(got, 0.99),
                    "release_max_ms": pct(got, 1.0), "missed": len(seen) - len(got),
                    "cc_cpu_ms_per_1000_woken": round(cpu * 1e6 / max(1, len(got)), 1)})
        victim = stack.procs["cc2"]
        killed = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        while parked(stack, stack.cc_ports[:2]) < min(watchers, sum(caps[:2])):
            if time.monotonic() - killed > 120:
                break
            time.sleep(0.1)
        out["repark_s"] = round(time.monotonic() - killed, 2)
        out["reparked"] = parked(stack, stack.cc_ports[:2])
        # the dead one's polls that found no room: each refused at least once, then refused again every
        # Retry-After for age_s (an outage that lasts; before the fix their back-off had grown to 15-30 s)
        unparked = watchers - out["reparked"]
        refused0 = parked(stack, stack.cc_ports[:2], "longPollsRefused")
        while parked(stack, stack.cc_ports[:2], "longPollsRefused") - refused0 < unparked:
            if time.monotonic() - killed > 120:
                break
            time.sleep(0.2)
        aged = time.monotonic()
        refused1 = parked(stack, stack.cc_ports[:2], "longPollsRefused")
        time.sleep(age_s)
        out["refused_per_s_while_aging"] = round(
            (parked(stack, stack.cc_ports[:2], "longPollsRefused") - refused1) / (time.monotonic() - aged), 1)
        out["unparked_after_kill"] = unparked
        out["refused_before_release"] = parked(stack, stack.cc_ports[:2], "longPollsRefused")
        try:
            seen, _ = release("2", cc[0])
        except Exception as exc:  # noqa: BLE001 - the figures before the kill still count; the reason is shown
            out["after_kill_error"] = repr(exc)[:300]
            return out
        got = [x for x in seen if x is not None]
        out.update({"after_kill_p50_ms": pct(got, 0.5), "after_kill_p99_ms": pct(got, 0.99),
                    "after_kill_max_ms": pct(got, 1.0),
                    "after_kill_missed": len(seen) - len(got),
                    "refused": parked(stack, stack.cc_ports[:2], "longPollsRefused"),
                    "cc_rss_survivor_mb": max(rss_mb(p) for p in stack.pids("cc"))})
    finally:
        for pipe in pipes:
            pipe.send(("stop",))
        gen_cpu = 0.0
        for pipe in pipes:
            if pipe.poll(15):
                gen_cpu += float(pipe.recv())
        for proc in workers:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    out["watch_gen_cpu_s"] = round(gen_cpu, 1)
    return out


# --- console -----------------------------------------------------------------------------------------------------

def keep_live(stack: Stack) -> int:
    """Every seeded client reported within the last 30 s, as its heartbeats (one per 30 s) would leave it: the
    seeding takes minutes at 100,000 clients, and the console counts only clients seen within 3 heartbeats, so
    without this its pages would look at a mostly offline inventory. Returns the rows moved."""
    import sqlalchemy as sa

    engine = sa.create_engine(stack.urls["ms"])
    with engine.begin() as conn:
        moved = conn.execute(sa.text("UPDATE ms_client_state SET last_seen = :now - random() * 30"),
                             {"now": time.time()}).rowcount
    # vacuumed at once: else autovacuum cleans the 100,000 dead row versions while the pages are timed, and
    # its CPU counted as the pages' (the filters' 145 ms of CPU per request at 100,000 clients was mostly that)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE ms_client_state"))
        # the tables the fleet phase wrote too (held keys, history), and no autovacuum worker left running: a
        # worker's CPU is added to the postmaster's when it exits, so one that exits while pages are timed lands in
        # their PostgreSQL CPU, and it takes a core meanwhile (two full runs' filters read 121 ms of server CPU a
        # filter and p95 315-328 ms at 100,000 clients, against 32-38 ms and 62-77 ms in runs without the fleet
        # phase's writes before them)
        conn.execute(sa.text("VACUUM ANALYZE ms_client_release_keys"))
        conn.execute(sa.text("VACUUM ANALYZE ms_client_reports"))
        quiet_by = time.monotonic() + 30
        while time.monotonic() < quiet_by and int(conn.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")).scalar_one()):
            time.sleep(0.2)
        backend = int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    engine.dispose()
    # its CPU (seconds, at 100,000 clients) is added to the postmaster's when the backend is reaped: wait for
    # that here, or it lands in whichever page's PostgreSQL CPU is read next
    deadline = time.monotonic() + 10
    while Path(f"/proc/{backend}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(moved)


def console(stack: Stack, n: int, repeats: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{stack.ms_ports[1]}"
    started = time.time()
    live, refreshed = keep_live(stack), time.monotonic()
    sess = requests.Session()
    # not following the redirect to the overview: that would read its summaries before its "first view" is timed
    resp = sess.post(base + "/console/login", data={"username": "bench", "password": "bench-password"}, timeout=30,
                     allow_redirects=False)
    resp.raise_for_status()
    topic, group = "topic-00001", "group-0007"
    urls = {"overview": "/console/", "clients": "/console/clients", "client": "/console/clients/app-01/client-000001",
            "topics": "/console/topics", "topic": f"/console/topics/{topic}",
            "config_panel": "/console/config/panel?scope=global",
            "topic_panel": f"/console/config/panel?scope=topic:{topic}",
            "group_panel": f"/console/config/panel?scope=group:{group}",
            "apps": f"/console/apps?op=produce&name={topic}", "app": "/console/apps/app-01",
            "alerts": "/console/alerts", "audit": "/console/audit"}
    filters = [f"/console/clients?topic={topic}", f"/console/clients?group={group}",
               "/console/clients?app=app-03&role=producer", "/console/clients?ip=10.0.7.",
               "/console/clients?version=1.9"]
    # the clients page's second page, through the first's Next link (not in --quick: the suite's run stays short)
    found = re.search(r'<a id="next" href="([^"]+)"', sess.get(base + "/console/clients", timeout=120).text
                      ) if n >= 1000 else None
    if found:
        urls["clients_page2"] = html.unescape(found.group(1))
    pids, pg_pids = stack.pids("ms"), stack.postgres_pids()
    out: dict[str, float | None] = {}
    cpu: dict[str, float] = {}
    pg_cpu: dict[str, float] = {}  # PostgreSQL's share of a page (a scan is its CPU, not the MetaServer's)
    failed: dict[str, int] = {}
    first_cpu: dict[str, float] = {}  # its MetaServer + PostgreSQL CPU (ms)
    first: dict[str, float] = {}  # each page's first view, apart: it reads the summaries over every live client
    # (queries.reuse_when_slow) that later views are answered from while they are read again in the background
    for name, url in urls.items():
        if time.monotonic() - refreshed > 30:  # still every client live (seen within 3 heartbeats) page after page
            keep_live(stack)
            refreshed = time.monotonic()
        # the page's first view in this process: the summaries it needs were read by the MetaServer's warmer
        # when it started (metaserver/console/warm.py); its CPU (MetaServer + PostgreSQL) says whether it
        # scanned anyway, which its wall clock on a loaded machine cannot
        t0, fcpu0 = time.perf_counter(), sum(cpu_s(p) for p in pids) + sum(cpu_s(p) for p in pg_pids)
        if sess.get(base + url, timeout=120).status_code != 200:
            failed[name] = -1
        first[name] = round((time.perf_counter() - t0) * 1000, 1)
        first_cpu[name] = round((sum(cpu_s(p) for p in pids) + sum(cpu_s(p) for p in pg_pids) - fcpu0) * 1000, 1)
        times = []
        cpu0, pg0 = sum(cpu_s(p) for p in pids), sum(cpu_s(p) for p in pg_pids)
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = sess.get(base + url, timeout=120)
            times.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                failed[name] = r.status_code
        out[name] = pct(times, 0.95)
        cpu[name] = round((sum(cpu_s(p) for p in pids) - cpu0) * 1000 / repeats, 1)
        pg_cpu[name] = round((sum(cpu_s(p) for p in pg_pids) - pg0) * 1000 / repeats, 1)
    ftimes = []
    each: dict[str, list[float]] = {url: [] for url in filters}  # per filter: which one is slow
    keep_live(stack)
    fcpu0 = sum(cpu_s(p) for p in pids) + sum(cpu_s(p) for p in pg_pids)
    for _ in range(repeats):
        for url in filters:
            t0 = time.perf_counter()
            if sess.get(base + url, timeout=120).status_code != 200:
                failed[url] = 1
            ftimes.append((time.perf_counter() - t0) * 1000)
            each[url].append(ftimes[-1])
    filter_cpu = (sum(cpu_s(p) for p in pids) + sum(cpu_s(p) for p in pg_pids) - fcpu0) * 1000 / max(1, len(ftimes))
    worst = max(out, key=lambda k: out[k] or 0)
    return {"console_live_clients": live, "console_s": round(time.time() - started, 1),
            "console_p95_ms": out, "console_server_cpu_ms": cpu, "console_pg_cpu_ms": pg_cpu,
            "console_cpu_max_ms": max(cpu[k] + pg_cpu[k] for k in cpu), "console_filter_cpu_ms": round(filter_cpu, 1),
            "console_p95_max_ms": out[worst], "console_first_ms": first, "console_first_cpu_ms": first_cpu,
            "console_first_max_ms": max(first.values()), "console_first_slowest": max(first, key=lambda k: first[k]),
            "console_slowest": worst, "console_filter_p95_ms": pct(ftimes, 0.95),
            "console_filter_p95_each_ms": {url.split("?", 1)[1]: pct(t, 0.95) for url, t in each.items()},
            "console_failed": failed}


# --- a simulated week of the inventory ---------------------------------------------------------------------------

def table_sizes(stack: Stack) -> dict[str, Any]:
    import sqlalchemy as sa

    engine = sa.create_engine(stack.urls["ms"])
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        for table in ("ms_client_state", "ms_client_reports", "ms_client_release_keys"):
            out[f"{table}_rows"] = int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
            out[f"{table}_mb"] = round(int(conn.execute(sa.text(
                f"SELECT pg_total_relation_size('{table}')")).scalar_one()) / 2**20, 2)
        out["ms_schema_mb"] = round(int(conn.execute(sa.text(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace s "
            "ON s.oid = c.relnamespace WHERE s.nspname = :s AND c.relkind = 'r'"),
            {"s": stack.schemas["ms"]}).scalar_one()) / 2**20, 2)
        out["cc_schema_mb"] = round(int(conn.execute(sa.text(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace s "
            "ON s.oid = c.relnamespace WHERE s.nspname = :s AND c.relkind = 'r'"),
            {"s": stack.schemas["cc"]}).scalar_one()) / 2**20, 2)
    engine.dispose()
    return out


def week(stack: Stack, n: int, days: int, churn: float, change: float) -> dict[str, Any]:
    """``days`` simulated days of the N-client inventory through ``clients.store`` (the server's own write) with
    the clock moved a day at a time: each day every live client heartbeats (its ``last_seen`` moved in one
    UPDATE, as 2,880 reports a day would leave it, plus a sample of real unchanged reports through ``store``),
    ``churn`` of them restart as new processes (new client ids; the old ones go offline), ``change`` report
    something new (a state change); then the retention runs (``clients.prune``, the defaults: 7 days)."""
    import sqlalchemy as sa

    from metaserver.domain import clients
    from metaserver.schemas import ClientReport
    from metaserver.settings import Settings
    from metaserver.storage import db
    from metaserver.storage.models import client_state

    keep_live(stack)  # the seeded fleet reporting now (the phases before took minutes at 100,000 clients)
    engine = db.make_engine(stack.urls["ms"])
    settings = Settings()
    rng = random.Random(11)
    alive = list(range(n))
    next_id = n
    t = time.time()
    stored = unchanged_rows = 0
    state_of: dict[int, str] = {}
    started = time.monotonic()
    n_topics, n_groups = max(10, n // 10), max(2, n // 50)

    def report(i: int, state: str) -> ClientReport:
        row = client_row(i, n_topics, n_groups)
        return ClientReport.model_validate({
            "client_id": row["client_id"], "app_id": row["app_id"], "ip": row["ip"], "hostname": row["hostname"],
            "pid": row["pid"], "process_started": row["process_started"], "language": "python",
            "versions": {"ykafka": row["ykafka_version"], "confluent_kafka": row["confluent_kafka_version"],
                         "librdkafka": row["librdkafka_version"]}, "role": row["role"], "topics": row["topics"],
            "group": row["group_id"], "cluster": row["cluster"], "config_release_keys": row["config_release_keys"],
            "state": state, "errors": [], "extra": row["extra"]})

    pruned = {"clients": 0, "history": 0}
    for _day in range(days):
        t += 86400
        with db.write(engine) as conn:  # every live client's heartbeats of the day (seen the day before)
            conn.execute(sa.update(client_state).where(client_state.c.last_seen >= t - 86400 - 600)
                         .values(last_seen=t))
        for i in rng.sample(alive, min(len(alive), 200)):  # unchanged reports: no history row
            unchanged_rows += int(clients.store(engine, report(i, state_of.get(i, "running")), now=t))
        restarted = set(rng.sample(alive, int(len(alive) * churn)))
        alive = [i for i in alive if i not in restarted]
        for _ in restarted:
            clients.store(engine, report(next_id, "running"), now=t)
            alive.append(next_id)
            next_id += 1
            stored += 1
        for i in rng.sample(alive, int(len(alive) * change)):
            state_of[i] = "running" if state_of.get(i) == "degraded" else "degraded"
            clients.store(engine, report(i, state_of[i]), now=t)
            stored += 1
        removed = clients.prune(engine, t, settings.client_retention_days * 86400,
                                settings.client_history_days * 86400)
        for k, v in removed.items():
            pruned[k] += v
    engine.dispose()
    sizes = table_sizes(stack)
    history_row_bytes = sizes["ms_client_reports_mb"] * 2**20 / max(1, sizes["ms_client_reports_rows"])
    every_heartbeat = n * days * 86400 / REPORT_EVERY_S  # what one history row per report would have kept
    return {"week_days": days, "week_churn": churn, "week_change": change, "week_sim_s": round(time.monotonic()
                                                                                                - started, 1),
            "week_stored_changes": stored, "week_unchanged_history_rows": unchanged_rows, "week_pruned": pruned,
            "week_state_rows": sizes["ms_client_state_rows"], "week_history_rows": sizes["ms_client_reports_rows"],
            "week_inventory_mb": round(sizes["ms_client_state_mb"] + sizes["ms_client_reports_mb"], 1),
            "week_every_heartbeat_rows": int(every_heartbeat),
            "week_every_heartbeat_gb": round(every_heartbeat * history_row_bytes / 2**30, 1)}


# --- main --------------------------------------------------------------------------------------------------------

def one_size(dsn: str, n: int, args: argparse.Namespace, per_proc: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"ykafka-scale-{n}-"))
    stack = Stack(dsn, home, args.cc_max_parked)
    try:
        out: dict[str, Any] = {"clients": n}
        phases = set(args.phases.split(","))
        if phases & {"fleet", "console", "week"}:
            out.update(seed(stack, n))
            print(f"[{n}] seeded {out}", file=sys.stderr, flush=True)
        if "fleet" in phases:
            out.update(fleet(stack, n, args.seconds, args.renew_s, args.gen_procs, args.max_rate))
            print(f"[{n}] fleet done", file=sys.stderr, flush=True)
        if "console" in phases:
            out.update(console(stack, n, args.repeats))  # 20 views a page: a p95 of 10 was their slowest
            print(f"[{n}] console done", file=sys.stderr, flush=True)
        out.update(table_sizes(stack))
        out["ms_rss_mb"] = max(rss_mb(p) for p in stack.pids("ms"))
        out["cc_rss_mb"] = max(rss_mb(p) for p in stack.pids("cc"))
        for key in ("missed", "after_kill_missed", "fleet_errors"):
            out.setdefault(key, None)
        if "fanout" in phases:
            try:
                out.update(fanout(stack, n, per_proc, args.max_watchers, args.age_s))
            except Exception as exc:  # noqa: BLE001 - the other figures of this size still count; the reason shown
                out.update({"fanout_error": repr(exc)[:300]})
            print(f"[{n}] fanout done", file=sys.stderr, flush=True)
        if "week" in phases:
            out.update(week(stack, n, args.week_days, args.churn, args.change))
            print(f"[{n}] week done", file=sys.stderr, flush=True)
        out["pg_mb_per_1000_clients"] = round(out["ms_schema_mb"] * 1000 / n, 2)
        out["pg_rows_per_1000_clients"] = round(
            (out.get("ms_client_state_rows", 0) + out.get("ms_client_reports_rows", 0)
             + out.get("ms_client_release_keys_rows", 0)) * 1000 / n, 1)
        return out
    finally:
        stack.stop()


def plot(by_size: dict[str, dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(s) for s in by_size)
    panels = [("latency p99 / p95 (ms)", [("report p99", "report_p99_ms"), ("renew p99", "renew_p99_ms"),
                                         ("console worst page p95", "console_p95_max_ms"),
                                         ("console filter p95", "console_filter_p95_ms")], 50.0),
              ("release reaching parked polls p99 (ms)", [("release", "release_p99_ms"),
                                                          ("after a config service's kill", "after_kill_p99_ms")],
               2000.0),
              ("CPU per report or renewal (ms)", [("MetaServers", "ms_cpu_ms_per_call"),
                                                  ("PostgreSQL", "pg_cpu_ms_per_call"),
                                                  ("load generator (apart)", "gen_cpu_ms_per_call")], None),
              ("cores per 1,000 clients", [("MetaServers", "ms_cores_per_1000_clients_derived"),
                                           ("PostgreSQL", "pg_cores_per_1000_clients_derived")], None),
              ("RSS per server (MB)", [("MetaServer", "ms_rss_mb"), ("config service, polls parked",
                                                                     "cc_rss_parked_mb")], None),
              ("PostgreSQL (MB)", [("MetaServer schema", "ms_schema_mb"),
                                   ("inventory after a week", "week_inventory_mb")], None)]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, (title, series, target) in zip(grid.flat, panels, strict=True):
        for label, key in series:
            xs = [s for s in sizes if by_size[str(s)].get(key) is not None]
            ax.plot(xs, [by_size[str(s)][key] for s in xs], marker="o", label=label)
        if target:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="target")
        ax.set_xscale("log")
        if title.startswith("latency"):  # from tens of ms to a 10 s queue
            ax.set_yscale("log")
        ax.set_xlabel("clients")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--seconds", type=float, default=10.0, help="the report / renewal window per size")
    parser.add_argument("--renew-s", type=float, default=600.0, help="each client's grant renewal interval")
    parser.add_argument("--max-rate", type=float, default=None,
                        help="calls/s the report generator sends at most (the rest derived from CPU per call)")
    parser.add_argument("--gen-procs", type=int, default=2, help="report / renewal generator processes")
    parser.add_argument("--repeats", type=int, default=20, help="requests per console page")
    parser.add_argument("--week-days", type=int, default=7, help="simulated days of the inventory")
    parser.add_argument("--churn", type=float, default=0.03, help="share of clients restarting (new id) a day")
    parser.add_argument("--change", type=float, default=0.02, help="share of clients reporting a change a day")
    parser.add_argument("--phases", default="fleet,console,fanout,week", help="which figures to measure")
    parser.add_argument("--max-watchers", type=int, default=None,
                        help="cap the parked polls (default: what the open-file limit allows on 2 survivors)")
    parser.add_argument("--age-s", type=float, default=30.0,
                        help="after the kill, seconds the polls no survivor parks keep being refused before the "
                             "release (their wait must not grow with it: the release reaches them within "
                             "1.25 x Retry-After)")
    parser.add_argument("--cc-max-parked", type=int, default=0,
                        help="each config service's --max-parked-polls (default 0: from its open-file limit)")
    parser.add_argument("--png", default=str(ROOT / "docs" / "img" / "control_plane_scale.png"))
    parser.add_argument("--quick", action="store_true", help="300 clients, 3 s (the suite's check), no plot")
    parser.add_argument("--plot-from", nargs="+", default=None, metavar="OUTPUT",
                        help="draw --png from earlier runs' output (their `size N: {...}` lines; a later file's "
                             "figures replace an earlier's, so a run of some --phases updates a full run's; "
                             "a figure a run did not measure, None, replaces nothing)")
    args = parser.parse_args()
    if args.plot_from:
        merged: dict[str, dict[str, Any]] = {}
        for name in args.plot_from:
            for line in Path(name).read_text().splitlines():
                if line.startswith("size "):
                    size, figures = line[len("size "):].split(": ", 1)
                    merged.setdefault(size, {}).update(
                        {k: v for k, v in json.loads(figures).items() if v is not None})  # a phase not run: None
        plot(merged, Path(args.png))
        print("RESULT " + json.dumps({"sizes": sorted(int(k) for k in merged), "by_size": merged,
                                      "targets": TARGETS, "plotted_from": args.plot_from}), flush=True)
        return
    if args.quick:
        args.sizes, args.seconds, args.repeats, args.gen_procs, args.week_days = "300", 3.0, 3, 1, 1
        args.age_s = 2.0
    limit = fd_limit()
    per_proc = max(100, limit - FD_HEADROOM)
    dsn = pg_dsn()
    reason = pg_reachable(dsn)
    if reason is not None:
        raise SystemExit(f"PostgreSQL does not answer at {dsn}: {reason}")
    from ykafka.logs import configure

    configure("error")
    sizes = [int(s) for s in args.sizes.split(",")]
    by_size: dict[str, dict[str, Any]] = {}
    for n in sizes:
        by_size[str(n)] = one_size(dsn, n, args, per_proc)
        print(f"size {n}: {json.dumps(by_size[str(n)])}", flush=True)
    if not args.quick and args.phases == parser.get_default("phases"):
        plot(by_size, Path(args.png))
    worst = {k: max((r.get(k) or 0) for r in by_size.values()) for k in TARGETS}
    result: dict[str, Any] = {
        "sizes": sizes, "by_size": by_size, "targets": TARGETS, "fd_limit": limit, "cores": os.cpu_count(),
        "met": {k: worst[k] <= v for k, v in TARGETS.items()},
        "errors": sum(r["fleet_errors"] or 0 for r in by_size.values()),
        "missed": sum((r["missed"] or 0) + (r["after_kill_missed"] or 0) for r in by_size.values()),
        "fanout_failed": [n for n, r in by_size.items() if r.get("fanout_error")]}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
