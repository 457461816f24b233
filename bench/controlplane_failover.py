"""Control-plane failover: clients keep producing and stay steerable while a config service or a MetaServer dies.

Starts, on free ports, a Tansu broker, two config services on one database and two MetaServers on another
(``ykafka dev up --replicas 2``), all stopped by pid at the end. Then:

1. ``--producers`` ykafka Producers produce ``k<i>:<seq>`` at ``--rate`` msg/s in total, with both MetaServers
   in ``ykafka.metaserver`` and both config services in their grant;
2. ``--clients`` watchers are parked on config service A: a fifth are the SDK's Apollo clients
   (``ykafka.apollo.ApolloClient``, given both instances), the rest speak the plain Apollo protocol (one asyncio
   long poll each over a keep-alive connection, fetching on a change, moving to the other instance on a
   connection error, as Apollo's Java client does). The watchers run in processes of their own, each kind apart
   (``--sdk-procs`` for the SDK clients, ``--plain-procs`` for the pollers; spawned): in one process, the
   1,000 watchers' own Python (200 SDK threads and 800 pollers behind one GIL) was the bottleneck of the
   measurement, not the survivor, and an SDK client's thread sharing a GIL with a busy event loop waited for
   it at each step of its poll and fetch (docs/benchmarks.md);
3. A is SIGKILLed (by its pid) and ``--releases`` releases are published through B at once:
   ``repark_p99_s`` is the time from the kill to each watcher's poll re-sent to B, ``all_reparked_s`` until the
   last one's (None if one never moved), ``release_after_kill_p99_ms`` from the first release
   returning to each watcher holding it (or a later one), ``missed`` the watchers not ending on the last one.
   Where that time goes, per watcher: ``notified_p99_ms`` from the release to its poll answered by B,
   ``fetch_p99_ms`` from that answer to the fetched release held; ``release_call_ms`` is the release request
   itself; ``survivor_cpu_s`` / ``clients_cpu_s`` / ``bench_cpu_s`` the CPU B, the watchers' processes and this
   one (producers, releases) used from the kill until every watcher held the last release, and ``load_1m``
   the machine's load average at the kill (the cores are shared);
4. a config change is pushed through the MetaServers: ``applied_after_cc_kill_ms`` until every producer has it
   in force; then MetaServer A is SIGKILLed, another change is pushed (``applied_after_ms_kill_ms``) and a new
   Producer starts (its grant through the survivor: ``started_after_ms_kill``);
5. every record is read back from the broker: ``lost`` = sent but not stored (must be 0), ``duplicated``.

``survivor_rss_mb`` is config service B's resident memory after taking A's clients. With PostgreSQL at
``YKAFKA_TEST_PG_DSN`` (default: a private server, tests.pg_server), ``notify_p50_ms`` / ``scan_p50_ms``
compare a release through one config service reaching a poll parked on another that LISTENs and on one that
only scans (every 0.5 s), timed on the same releases.

    python bench/controlplane_failover.py [--clients 1000] [--sdk-procs 4] [--plain-procs 2] [--producers 4]
        [--rate 2000] [--quick]

Last line: RESULT {"clients": 1000, "repark_p99_s": ..., "release_after_kill_p99_ms": ..., "missed": 0,
"lost": 0, ...}
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench.config_propagation import Load, percentile, read_all  # noqa: E402
from bench.configcenter_longpoll import raise_fd_limit  # noqa: E402
from metaserver.domain.apollo import ApolloOpenApi  # noqa: E402
from tests.support import LocalStack, local_stack, rss_mb  # noqa: E402
from ykafka import Producer  # noqa: E402
from ykafka.admin.client import AdminClient  # noqa: E402
from ykafka.apollo import ApolloClient, NamespaceConfig  # noqa: E402
from ykafka.devstack import free_port  # noqa: E402
from ykafka.endpoints import Endpoints  # noqa: E402
from ykafka.logs import configure  # noqa: E402

APP = "bench-cp"
NS = "bench.failover"


class Watcher:
    """What one parked client saw: each value with when it arrived, when its polls were answered with a
    change, and when it moved to another instance (monotonic clock: the same in every process)."""

    def __init__(self) -> None:
        self.values: list[tuple[float, str]] = []
        self.notified: list[float] = []
        self.moves: list[float] = []

    def got(self, value: str) -> None:
        self.values.append((time.monotonic(), value))

    @property
    def last(self) -> str | None:
        return self.values[-1][1] if self.values else None


def first_at_least(values: list[tuple[float, str]], value: int) -> float | None:
    return next((at for at, v in values if v.isdigit() and int(v) >= value), None)


class KeepAlive:
    """One keep-alive HTTP/1.1 connection to one instance (reconnects after an error or a ``Connection: close``)."""

    def __init__(self, url: str) -> None:
        self.host, self.port = urlsplit(url).hostname or "", urlsplit(url).port or 80
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, target: str) -> tuple[int, bytes]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        try:
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode())
            await writer.drain()
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
        except BaseException:
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split(" ", 2)[1]), body

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def plain_client(urls: list[str], notification_id: int, watcher: Watcher, stop: asyncio.Event) -> None:
    """A plain Apollo client: long poll, fetch on a change (the id advances once fetched), move to the next
    instance on a connection error."""
    conns = [KeepAlive(url) for url in urls]
    index = 0
    try:
        while not stop.is_set():
            query = urlencode({"appId": APP, "cluster": "default", "notifications": json.dumps(
                [{"namespaceName": NS, "notificationId": notification_id}])})
            try:
                status, body = await conns[index].get(f"/notifications/v2?{query}")
                if status == 200:
                    watcher.notified.append(time.monotonic())
                    latest = json.loads(body)[0]["notificationId"]
                    status, body = await conns[index].get(f"/configs/{APP}/default/{NS}")
                    if status == 200:
                        watcher.got(json.loads(body)["configurations"]["v"])
                        notification_id = latest
                if status not in (200, 304):
                    raise ConnectionError(f"HTTP {status}")
            except (OSError, asyncio.IncompleteReadError, ConnectionError):
                if stop.is_set():
                    return
                conns[index].close()
                index = (index + 1) % len(urls)
                watcher.moves.append(time.monotonic())
    finally:
        for conn in conns:
            conn.close()


class MovingEndpoints(Endpoints):
    """The SDK client's instance list, noting when the client gave up an instance."""

    def __init__(self, urls: list[str], watcher: Watcher) -> None:
        super().__init__(urls)
        self.watcher = watcher

    def failed(self, url: str, retry_after: float | None = None) -> float:
        self.watcher.moves.append(time.monotonic())
        return super().failed(url, retry_after)


class TimedApolloClient(ApolloClient):
    """The SDK client, noting when a long poll is answered with a change (before it fetches)."""

    watcher: Watcher

    def _long_poll(self, ids: dict[str, int], slot: int = 0) -> list[tuple[str, int]]:
        changed = super()._long_poll(ids, slot)
        if changed:
            self.watcher.notified.append(time.monotonic())
        return changed


def watch(pipe: Connection, a_url: str, b_url: str, sdk_count: int, plain_count: int, notification_id: int,
          last: str) -> None:
    """One watchers' process: park its clients on A, then report what each saw once all hold ``last``
    (or after 60 s), then close them when told."""
    import uvloop  # the plain pollers' loop: the clients' own CPU is not what is measured

    configure("error")
    watchers = [Watcher() for _ in range(sdk_count + plain_count)]
    sdk: list[TimedApolloClient] = []
    for watcher in watchers[:sdk_count]:
        def on_update(config: NamespaceConfig, watcher: Watcher = watcher) -> None:
            if "v" in config.configurations:
                watcher.got(config.configurations["v"])

        client = TimedApolloClient(f"{a_url},{b_url}", APP, "default", "127.0.0.1", None, on_update,
                                   longpoll_timeout_s=30)
        client.watcher = watcher
        client.endpoints = MovingEndpoints([a_url, b_url], watcher)
        while client.endpoints.current != a_url:  # parked on A, moving to B
            client.endpoints.failed(client.endpoints.current)
        client.subscribe(NS)
        client.start()
        sdk.append(client)
    loop = uvloop.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    stop = asyncio.Event()
    futures = [asyncio.run_coroutine_threadsafe(plain_client([a_url, b_url], notification_id, w, stop), loop)
               for w in watchers[sdk_count:]]
    for watcher in watchers:
        watcher.moves.clear()  # the SDK clients' positioning on A above
    pipe.send("parked")
    pipe.recv()  # A was killed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(w.last != last for w in watchers):
        time.sleep(0.02)
    pipe.send([(w.values, w.notified, w.moves) for w in watchers])
    pipe.recv()  # stop
    loop.call_soon_threadsafe(stop.set)
    for client in sdk:
        client.close()
    for future in futures:
        future.cancel()
    time.sleep(0.3)  # the cancelled polls close their connections
    loop.call_soon_threadsafe(loop.stop)


def stats(url: str) -> dict[str, int]:
    return dict(requests.get(url + "/stats", timeout=5).json())


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sched_s(pid: int) -> tuple[float, float]:
    """Seconds a process's main thread ran on a CPU and waited runnable for one (/proc/<pid>/schedstat)."""
    run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def accept_queue(port: int) -> int | None:
    """Connections waiting in the kernel for the listener on ``port`` to accept them (/proc/net/tcp)."""
    local = f":{port:04X}"
    with open("/proc/net/tcp") as table:  # listeners come first: stop there, not at every socket of the machine
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] != "0A":
                return None
            if fields[1].endswith(local):  # LISTEN: rx_queue is the accept backlog
                return int(fields[4].split(":")[1], 16)
    return None


def wait_for(check: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.01)
    return time.monotonic() - start


def push_and_wait(admin: AdminClient, producers: list[Producer], topic: str, linger: int) -> float:
    """Push producer.linger.ms through the MetaServers; ms from sending the push until every producer has it in
    force (they often have it before the admin call returns)."""
    pushed = time.monotonic()
    admin.push_config(f"topic:{topic}", {"producer.linger.ms": str(linger)})
    wait_for(lambda: all((p.in_force(topic) or {}).get("producer.linger.ms") == linger for p in producers), 60,
             f"producer.linger.ms={linger} in force")
    return round((time.monotonic() - pushed) * 1000, 1)


def failover(bench: LocalStack, args: argparse.Namespace) -> dict[str, Any]:
    cfg, stack = bench.cfg, bench.stack
    a_url, b_url = cfg.configcenter_urls
    api = ApolloOpenApi(b_url, cfg.openapi_token, app_id=APP)
    api.ensure_app()
    api.ensure_namespace(NS)
    api.set_item(NS, "v", "0")
    api.release(NS, "v0", "bench")
    admin = AdminClient(",".join(cfg.metaserver_urls), cfg.admin_token)
    topic = f"bench-cp-{uuid.uuid4().hex[:6]}"
    producers = [Producer(bench.client_config()) for _ in range(args.producers)]
    loads = [Load(p, topic, args.rate / len(producers), prefix=f"p{i}-") for i, p in enumerate(producers)]
    for load in loads:
        load.start()
    wait_for(lambda: all(load.sent > 100 for load in loads), 60, "producers started")
    push_and_wait(admin, producers, topic, 5)  # every producer watches the topic's namespace

    sdk_count = max(1, args.clients // 5)
    plain_count = args.clients - sdk_count
    notification_id = json.loads(requests.get(f"{a_url}/notifications/v2", params={
        "appId": APP, "cluster": "default", "notifications": json.dumps([{"namespaceName": NS,
                                                                          "notificationId": -1}])},
        timeout=10).content)[0]["notificationId"]
    last = str(args.releases)
    sdk_procs, plain_procs = max(1, min(args.sdk_procs, sdk_count)), max(1, min(args.plain_procs, plain_count))
    shares = [(sdk_count * (i + 1) // sdk_procs - sdk_count * i // sdk_procs, 0) for i in range(sdk_procs)]
    shares += [(0, plain_count * (i + 1) // plain_procs - plain_count * i // plain_procs) for i in range(plain_procs)]
    spawn = multiprocessing.get_context("spawn")  # this process runs librdkafka threads: no fork
    pipes: list[Connection] = []
    workers = []
    for share in shares:
        ours, theirs = spawn.Pipe()
        worker = spawn.Process(target=watch, args=(theirs, a_url, b_url, *share, notification_id, last), daemon=True)
        worker.start()
        pipes.append(ours)
        workers.append(worker)
    for pipe in pipes:
        if not pipe.poll(120) or pipe.recv() != "parked":
            raise RuntimeError("a watchers' process did not start")
    wait_for(lambda: stats(a_url)["longPolls"] >= args.clients, 60, f"{args.clients} watchers parked on A")
    time.sleep(0.5)  # the count may include a producer's poll it just replaced (answered when its timeout ends)
    b_pid = stack.pid(stack.services(["configcenter-2"])[0])
    assert b_pid is not None
    pids = [b_pid, os.getpid(), *(w.pid for w in workers if w.pid is not None)]
    cpu_before = [cpu_s(pid) for pid in pids]
    b_sched = sched_s(b_pid)
    load_1m = os.getloadavg()[0]
    killed = time.monotonic()
    if stack.kill("configcenter") is None:  # SIGKILL by its pid
        raise RuntimeError("config service A was not running")
    for pipe in pipes:
        pipe.send("killed")
    backlog: list[tuple[float, int]] = []  # the survivor's accept queue while the watchers move in

    def sample_backlog() -> None:
        while len(backlog) < 100 and not all(pipe.poll() for pipe in pipes):
            waiting = accept_queue(urlsplit(b_url).port or 80)
            backlog.append((time.monotonic() - killed, waiting or 0))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample_backlog, daemon=True)
    sampler.start()
    released: float | None = None
    release_call = 0.0
    for n in range(1, args.releases + 1):
        started = time.monotonic()
        api.set_item(NS, "v", str(n))
        api.release(NS, f"v{n}", "bench")
        if released is None:
            released, release_call = time.monotonic(), time.monotonic() - started
            release_sent = started
        time.sleep(0.3)
    seen: list[tuple[list[tuple[float, str]], list[float], list[float]]] = []
    for pipe in pipes:
        if not pipe.poll(90):
            raise RuntimeError("a watchers' process did not report")
        seen.extend(pipe.recv())
    cpu_used = [cpu_s(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    sampler.join(15)
    peak = max(backlog, key=lambda sample: sample[1], default=(0.0, 0))
    drained = next((at for at, waiting in backlog if at > peak[0] and waiting <= 10), None)
    b_ran, b_waited = (after - before for after, before in zip(sched_s(b_pid), b_sched, strict=True))
    assert released is not None
    held_last = [first_at_least(got, args.releases) for got, _, _ in seen]
    settled = max(at for at in held_last if at is not None) - killed if any(held_last) else None
    after_release, notified, fetch = [], [], []
    for got, answers, _ in seen:
        held = first_at_least(got, 1)
        after_release.append(((held or 0) - released) * 1000)
        answer = next((at for at in answers if at > killed), None)
        if held is not None and answer is not None:
            notified.append((answer - released) * 1000)
            fetch.append((held - answer) * 1000)
    repark = [min(at for at in moves if at >= killed) - killed for _, _, moves in seen
              if any(at >= killed for at in moves)]
    missed = sum(1 for got, _, _ in seen if not got or got[-1][1] != last)
    applied_cc = push_and_wait(admin, producers, topic, 6)

    if stack.kill("metaserver") is None:  # SIGKILL by its pid
        raise RuntimeError("MetaServer A was not running")
    applied_ms = push_and_wait(admin, producers, topic, 7)
    late = Producer(bench.client_config(**{"ykafka.metaserver": ",".join(cfg.metaserver_urls)}))
    late_load = Load(late, topic, 200, prefix="late-")
    late_load.start()
    wait_for(lambda: late_load.sent >= 100, 30, "a producer started after the MetaServer kill")
    late_load.stop_event.set()
    late_load.join(30)

    time.sleep(0.5)
    for load in loads:
        load.stop_event.set()
        load.join(30)
    errors = [repr(load.error) for load in [*loads, late_load] if load.error is not None]
    if errors:
        raise RuntimeError(f"producer thread failed: {errors}")
    undelivered = sum(p.flush(60) for p in [*producers, late])
    for p in [*producers, late]:
        p.close()
    survivor_rss = rss_mb(b_pid)
    for pipe in pipes:
        pipe.send("stop")
    for worker in workers:
        worker.join(30)
    sent = sum(load.sent for load in [*loads, late_load])
    values = read_all(cfg.bootstrap(cfg.default_cluster), topic, sent)
    unique = set(values)
    return {
        "clients": args.clients, "sdk_clients": sdk_count, "plain_clients": plain_count,
        "repark_p99_s": round(percentile(repark, 0.99), 3) if repark else None,
        "all_reparked_s": round(max(repark), 3) if len(repark) == len(seen) else None,
        # from the kill to every watcher on the last release: wall time, and the CPU the survivor, this process
        # (producers, releases) and the watchers' processes used meanwhile (all on the same shared cores)
        "settled_s": round(settled, 3) if settled is not None else None, "procs": len(shares),
        "load_1m": round(load_1m, 2), "survivor_cpu_s": round(cpu_used[0], 2),
        # the survivor's event loop: time on a CPU and time runnable but waiting for one (the shared cores)
        "survivor_loop_ran_s": round(b_ran, 2), "survivor_loop_waited_s": round(b_waited, 2),
        "bench_cpu_s": round(cpu_used[1], 2), "clients_cpu_s": round(sum(cpu_used[2:]), 2),
        "release_call_ms": round(release_call * 1000, 1),
        # from sending the first release (its call included), the stricter reading of the same figure
        "release_sent_p99_ms": round(percentile([ms + (released - release_sent) * 1000 for ms in after_release],
                                                0.99), 1),
        # connections waiting for the survivor to accept them: the most seen, and when it was back to <= 10
        "accept_queue_max": peak[1], "accept_queue_drained_s": round(drained, 2) if drained is not None else None,
        "release_after_kill_p50_ms": round(percentile(after_release, 0.5), 1),
        "release_after_kill_p99_ms": round(percentile(after_release, 0.99), 1),
        # the reports come SDK processes first: the same figure per kind of watcher
        "sdk_release_p99_ms": round(percentile(after_release[:sdk_count], 0.99), 1),
        "plain_release_p99_ms": round(percentile(after_release[sdk_count:], 0.99), 1),
        "notified_p50_ms": round(percentile(notified, 0.5), 1) if notified else None,
        "notified_p99_ms": round(percentile(notified, 0.99), 1) if notified else None,
        "fetch_p50_ms": round(percentile(fetch, 0.5), 1) if fetch else None,
        "fetch_p99_ms": round(percentile(fetch, 0.99), 1) if fetch else None,
        "missed": missed, "releases": args.releases,
        "applied_after_cc_kill_ms": applied_cc, "applied_after_ms_kill_ms": applied_ms,
        "started_after_ms_kill": late_load.sent >= 100,
        "producers": args.producers, "sent": sent, "lost": sent - len(unique),
        "duplicated": len(values) - len(unique), "undelivered": undelivered, "survivor_rss_mb": survivor_rss,
    }


def notify_vs_scan(releases: int) -> dict[str, Any]:
    """Release through A -> a poll parked on N (LISTENs) and one parked on S (``--no-notify``: scans only)
    answered, three config services on one PostgreSQL schema; both timed on the same releases."""
    import sqlalchemy as sa

    from bench.metaserver_auth import pg_dsn

    schema = f"cc_bench_{uuid.uuid4().hex[:8]}"
    dsn = pg_dsn()
    try:
        engine = sa.create_engine(dsn, connect_args={"connect_timeout": 3})
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # noqa: BLE001 - no PostgreSQL: the comparison is skipped, said so
        return {"notify_vs_scan": f"skipped: PostgreSQL at {dsn} does not answer ({type(exc).__name__})"}
    url = f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        tmp = tempfile.mkdtemp(prefix="ykafka-bench-cc-")
        for name in ("a", "notify", "scan"):
            port = free_port()
            argv = [sys.executable, "-m", "metaserver.configcenter", "serve", "--host", "127.0.0.1", "--port",
                    str(port), "--db", url, "--longpoll-timeout", "30", "--openapi-token", "bench-token",
                    "--log-level", "warning"] + (["--no-notify"] if name == "scan" else [])
            with open(Path(tmp) / f"{name}.log", "ab") as log:
                procs.append(subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                              stdout=log, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        for u in urls:
            wait_for(lambda u=u: _healthy(u), 60, f"config service {u}")
        return _release_latency(urls[0], {"notify": urls[1], "scan": urls[2]}, releases)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


def _poll(url: str, notification_id: int, timeout: float = 40) -> int:
    resp = requests.get(f"{url}/notifications/v2", params={
        "appId": APP, "cluster": "default",
        "notifications": json.dumps([{"namespaceName": NS, "notificationId": notification_id}])}, timeout=timeout)
    if resp.status_code != 200:
        raise RuntimeError(f"poll answered HTTP {resp.status_code}")
    return int(resp.json()[0]["notificationId"])


def _publish(api: ApolloOpenApi, a: str, peers: list[str], value: str) -> int:
    """Release ``value`` through A; return its notification id once every peer serves it too."""
    api.set_item(NS, "v", value)
    api.release(NS, value, "bench")
    latest = _poll(a, -1)  # A knows its own release at once ...
    for peer in peers:
        wait_for(lambda peer=peer: _poll(peer, -1) >= latest, 10, "peer caught up")  # ... the others soon after
    return latest


def _timed_release(api: ApolloOpenApi, peers: dict[str, str], value: str, known: int,
                   delay: float) -> dict[str, float]:
    """Park a poll on each peer (with the id it knows), release through A after ``delay``; ms until each
    poll answers."""
    answered: dict[str, float] = {}

    def park(mode: str, url: str) -> None:
        _poll(url, known)
        answered[mode] = time.monotonic()

    polls = [threading.Thread(target=park, args=item, daemon=True) for item in peers.items()]
    for poll in polls:
        poll.start()
    for url in peers.values():
        wait_for(lambda url=url: stats(url)["longPolls"] >= 1, 10, "poll parked")
    time.sleep(delay)
    api.set_item(NS, "v", value)
    api.release(NS, value, "bench")
    released = time.monotonic()
    for poll in polls:
        poll.join(40)
    if set(answered) != set(peers):
        raise RuntimeError(f"polls not answered: {sorted(set(peers) - set(answered))}")
    return {mode: (at - released) * 1000 for mode, at in answered.items()}


def _release_latency(a: str, peers: dict[str, str], releases: int) -> dict[str, Any]:
    api = ApolloOpenApi(a, "bench-token", app_id=APP)
    api.ensure_app()
    api.ensure_namespace(NS)
    latencies: dict[str, list[float]] = {mode: [] for mode in peers}
    known = _publish(api, a, list(peers.values()), "start")
    for n in range(releases):
        # the delays spread the releases over the scan period
        for mode, ms in _timed_release(api, peers, f"r{n}", known, 0.05 + (n % 10) * 0.047).items():
            latencies[mode].append(ms)
        known = _publish(api, a, list(peers.values()), f"r{n}-settled")
    out: dict[str, Any] = {}
    for mode, values in latencies.items():
        out.update({f"{mode}_p50_ms": round(percentile(values, 0.5), 1),
                    f"{mode}_p99_ms": round(percentile(values, 0.99), 1),
                    f"{mode}_max_ms": round(max(values), 1)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000, help="watchers parked on the killed config service")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2000.0, help="msgs/s, all producers together")
    parser.add_argument("--releases", type=int, default=3, help="releases through the survivor after the kill")
    parser.add_argument("--sdk-procs", type=int, default=4, help="processes the SDK clients run in")
    parser.add_argument("--plain-procs", type=int, default=2, help="processes the plain pollers run in")
    parser.add_argument("--notify-releases", type=int, default=20, help="releases timed per mode (PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="25 watchers, 1 producer (the suite's check)")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.producers, args.rate, args.releases, args.notify_releases = 25, 1, 500.0, 2, 2
        args.sdk_procs = args.plain_procs = 1
    configure("error")
    raise_fd_limit(args.clients * 4 + 512)
    with local_stack(["dc-a", "control"], replicas=2) as bench:
        result = failover(bench, args)
        gc.collect()  # closed producers keep their broker connections until collected (the broker's stop waits)
    result.update(notify_vs_scan(args.notify_releases))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
