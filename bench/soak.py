"""A seeded fault-injection soak of the producer's DR engine and the consumer framework, with a strict read-back.

Starts two durable Apache Kafka clusters (dc-a primary, dc-b standby; one KRaft node each, logs on disk), several
producer processes of one app (``bench/_soak_producer.py``: a DR engine each, ``route.failover=auto``, default
health settings) and a consumer group of framework consumers reading dc-a (``tests/consumer_child.py``), then
injects a random schedule of faults drawn from ``--seed``, one at a time with a pause between:

* ``kill``: dc-a SIGKILLed, restarted 3-8 s later (writes fail over to dc-b and back, the failback sync copies);
* ``freeze``: dc-a SIGSTOPped 5-20 s (past the consumers' 6 s session timeout), then SIGCONT;
* ``freeze-standby``: dc-b SIGSTOPped 5-15 s (a standby that hangs while a sync may read it);
* ``consumer-kill``: one consumer SIGKILLed and a new one started;
* network faults between every client and dc-a, through a Toxiproxy in front of it (dc-a advertises the proxy's
  port on a listener of its own, so clients stay behind the proxy; the read-back uses dc-a's own port):
  ``latency`` (100-400 ms each way, 10-30 s), ``partition`` (every connection cut and new ones refused, 3-10 s),
  ``lossy`` (a third of the connections stall and are closed 2 s later, closes delayed 1 s, 10-25 s);
* network faults between every client and dc-b, through a second proxy (``dc-b``; the read-back uses dc-b's own
  port): ``partition-standby`` (cut 3-10 s: a failback sync reading it must stop and resume, writes to dc-a must not
  notice), ``latency-standby`` (100-400 ms each way, 10-30 s), and ``outage-both``, two faults overlapping in either
  order: dc-b cut and 1-3 s later dc-a SIGKILLed (one node of three with ``--dc-a-nodes 3``; with both clusters gone
  the producers spill to disk), or dc-a SIGKILLed, 2-5 s of writes to dc-b, then dc-b cut; dc-a restarted 3-8 s
  after its kill, dc-b healed 0-10 s after that (the spill replays to dc-a; the failback's sync of what dc-b took
  starts while dc-b does not answer and must finish once it does);
* ``disk-full``: the producers' spill directories (one small tmpfs) filled to the last byte, dc-a SIGKILLed and
  restarted 3-8 s later while it stays full, freed 5 s after the restart.

``--faults`` picks the kinds (default: all that can run here). Without toxiproxy-server the network kinds are left
out with one line saying how to install it (``make toxiproxy``); where mounting a tmpfs is refused (not root, or a
container without the privilege) ``disk-full`` is left out with one line saying so.

At the end the producers stop sending, wait until spills are replayed and failback syncs finished, and both
clusters are read back plainly:

* ``lost``: acknowledged records not on dc-a (directly or synced back from dc-b): must be 0;
* ``callbacks_bad``: sends without exactly one delivery callback: must be 0 (``refused``: sends ``produce``
  refused at the call with ``SpillFullError``, a full spill disk: they are not sends and get no callback);
* ``not_on_primary``: records dc-b took that are not on dc-a: must be 0 (everything the standby took is back);
* ``unhandled``: acknowledged records the consumer group never handled, and ``lag`` (dc-a's ends minus the group's
  committed offsets) at the end: must be 0; the group gets as long as it keeps making progress (``drain_s``: how
  long it took), and is stranded once it makes none for 120 s;
* ``duplicates``: extra copies on dc-a (at-least-once: in flight at a break, or synced back in addition to a
  direct copy), ``overtaken_direct`` / ``overtaken_standby`` / ``overtaken_all``: records stored behind a newer
  write of their key, in dc-a's direct writes, on dc-b, and on dc-a as a whole (counted; synced records land behind
  newer direct writes by design: writes come first). ``overtaken_direct`` counts records the producers sent while
  idempotent (``producer.acks=all``, the default): must be 0; ``overtaken_direct_not_idempotent`` those sent while a
  pushed ``producer.acks`` other than ``all`` was in force (and ``PLAIN_TAIL_S`` after the push back): counted.
  librdkafka refuses idempotence without ``acks=all``, and a plain producer's request in doubt (sent, unanswered,
  purged at a failover) can still be stored after newer writes: only the broker's sequence check refuses it;
* per fault, ``recovery_s``: from the heal until every producer had a record acknowledged again, and
  ``write_gap_s``: the longest any producer went without an acknowledgement from the fault to its recovery (the
  failover's pause, a frozen cluster's detection);
* ``threads`` / ``fds`` / ``rss_mb``: first and largest sample of each client process (bounded over the run).

    python bench/soak.py --minutes 30 --seed 1 [--producers 2] [--consumers 2] [--rate 300] [--faults kill,latency]

Each process's log is kept in the work directory (``producer-N.log``, ``consumer-N.log``, ``toxiproxy.log``); when
records were left unhandled the soak prints the path and tail of each consumer's log.

Control plane (any of these kinds selected, the default): a config service and a MetaServer on the clusters' stack,
an app of the soak's topic and group, its route pushed through the MetaServer; the producers are then drop-in
``ykafka.Producer`` processes of that app and the consumers its framework consumers, each writing what it holds in
force every second:

* ``metaserver-kill`` / ``config-kill``: the MetaServer / the config service SIGKILLed by pid, restarted 3-10 s later;
* ``config-push``: one hot key of ``PUSHES`` pushed through the MetaServer while the load runs; ``applied_s`` until
  every live client shows it (``pushes_unapplied``, ``config_not_applied`` at the end: must be 0). The keys: acks,
  linger, batch size, partitioner, rate limit, ``producer.partitions.exclude``, the consumers' workers, and a manual
  route switch (``route.active=standby``, held 5-15 s, then ``primary``: ``back_applied_s``; the failback syncs
  what dc-b took).

``--dc-a-nodes 3``: dc-a is three Kafka nodes (RF 3, min.insync.replicas 2); ``kill`` / ``freeze`` hit one node, and
nothing may fail over by itself (``on_standby`` must be 0 without a pushed route switch). ``duplicates_by_path`` /
``duplicates_by_fault`` say where the extra copies came from; ``tracebacks`` counts unhandled errors in the clients'
logs.

Last line: RESULT {"lost": 0, ...}
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer as RawConsumer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from tests import toxiproxy  # noqa: E402
from tests.dr_fixtures import DEFAULT_HEALTH, create_topic, overtakes, read_all  # noqa: E402
from tests.support import Broker, LocalStack, brokers  # noqa: E402
from ykafka import catalog  # noqa: E402
from ykafka import headers as H  # noqa: E402
from ykafka.admin.client import AdminClient as YAdmin  # noqa: E402
from ykafka.devstack.procs import free_port  # noqa: E402
from ykafka.devstack.services import replica_name  # noqa: E402

PARTITIONS = 6
BASIC = ["kill", "freeze", "freeze-standby", "consumer-kill"]  # what tests/test_soak.py draws from (seed 7)
NETWORK = ["latency", "partition", "lossy"]
#: through a proxy in front of dc-b (one node in every shape, so these run with ``--dc-a-nodes 3`` too)
NETWORK_STANDBY = ["partition-standby", "latency-standby", "outage-both"]
DISK = ["disk-full"]
CONTROL = ["metaserver-kill", "config-kill", "config-push", "kill+control"]
#: what a ``config-push`` draws from: catalog keys that apply to a running client (in place or by a rebuild), each with
#: the values pushed (the rate limit in records a second per process: a fraction of ``--rate``, so sends wait), and
#: the scope kind it is pushed at (``topic`` / ``group``: the soak's topic or group)
PUSHES: dict[str, tuple[str, list[str]]] = {
    "producer.acks": ("topic", ["all", "1"]),
    "producer.linger.ms": ("topic", ["0", "5", "20", "50"]),
    "producer.batch.size": ("topic", ["16384", "131072", "1000000"]),
    "producer.partitioner": ("topic", ["murmur2", "consistent"]),
    "producer.rate.limit.msgs": ("topic", ["0", "0.8"]),
    "producer.partitions.exclude": ("topic", ["", "0", "2,5"]),
    # a manual switch of the topic's writes to dc-b, held ROUTE_HOLD_S, then back (its failback syncs them to dc-a)
    "route.active": ("topic", ["standby"]),
    "consumer.workers": ("group", ["1", "2", "3", "4"]),
}
#: a pushed producer key's librdkafka property, which the client in force must then carry (REBUILD keys)
PUSHED_SETTING = {"producer.acks": "acks", "producer.linger.ms": "linger.ms", "producer.batch.size": "batch.size"}
SPILL_DISK_MB = 32
#: how long a pushed ``route.active=standby`` stays before the push back to ``primary``
ROUTE_HOLD_S = (5.0, 15.0)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}


def sample(pid: int) -> dict[str, float] | None:
    """Threads, open fds and RSS (MB) of a live process, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"threads": int(fields["Threads"]), "fds": fds, "rss_mb": round(int(fields["VmRSS"].split()[0]) / 1024, 1)}


#: after a push of ``producer.acks=all``, how long records of the plain (not idempotent) client may still be stored:
#: held ``spill.after.ms`` (10 s) and re-sent, with margin
PLAIN_TAIL_S = 30.0


def key_overtakes(records: list[Any]) -> list[tuple[bytes | None, int, int]]:
    """Records stored behind a newer write of their key *in their partition* (each partition in log order): a
    ``producer.partitioner`` push moves a key to another partition, where its newer records are not behind its
    older ones in any order a consumer sees (a 4-minute run that pushed ``consistent`` counted 8,621 "overtaken"
    direct writes over all partitions, every one a key that had moved)."""
    ordered = sorted(records, key=lambda m: (m.partition() or 0, m.offset() or 0))
    return overtakes((b"%d/" % (m.partition() or 0) + (m.key() or b""), m.value()) for m in ordered)


class Soak:
    """``net``: the Toxiproxy in front of dc-a and / or dc-b (its proxies are named for them) and ``a_clients`` /
    ``b_clients`` the bootstrap clients use for each (a proxy's port, or the cluster's own); ``spill_disk``: the
    tmpfs the producers spill to (the ``disk-full`` fault)."""

    def __init__(self, a: Broker, b: Broker, work: Path, args: argparse.Namespace,
                 net: toxiproxy.Toxiproxy | None = None, a_clients: str | None = None,
                 spill_disk: Path | None = None, control: LocalStack | None = None,
                 b_clients: str | None = None) -> None:
        self.a, self.b, self.work, self.args = a, b, work, args
        self.net, self.a_clients, self.spill_disk = net, a_clients or a.bootstrap, spill_disk
        self.b_clients = b_clients or b.bootstrap
        self.kinds: list[str] = list(getattr(args, "faults", None) or BASIC)
        self.topic = f"soak-{args.seed}-{int(time.time())}"
        self.group = f"soak-g-{args.seed}-{int(time.time())}"
        self.nodes = len(a.names)  # dc-a's nodes: with 3, a kill or freeze hits one node (RF 3, min.insync 2)
        for broker in (a, b):
            create_topic(broker.bootstrap, self.topic, PARTITIONS, replication=min(len(broker.names), 3))
        self.control = control
        self.client: dict[str, Any] | None = None  # the app's client settings when the control plane runs
        self.pushed: dict[str, str] = {}  # key -> the last value pushed
        if control is not None:
            self.client = self.app(control)
        self.producers: list[subprocess.Popen[str]] = []
        self.consumers: list[subprocess.Popen[bytes]] = []
        self.handled_files: list[Path] = []
        self.samples: dict[str, list[dict[str, float]]] = {}
        self.faults: list[dict[str, Any]] = []

    def app(self, control: LocalStack) -> dict[str, Any]:
        """An app allowed the soak's topic and group; its route (dc-a, standby dc-b, automatic failover) pushed
        through the MetaServer at the topic's scope, as an operator sets it; the clients' settings."""
        app_id, secret = control.new_app(produce=[self.topic], consume=[self.topic], group=[self.group])
        route = {"route.cluster": "dc-a", "route.standby": "dc-b", "route.failover": "auto",
                 "route.failback.order": getattr(self.args, "failback_order", "writes-first")}
        control.push(f"topic:{self.topic}", route)
        spill_after = getattr(self.args, "spill_after_ms", None)
        if spill_after:  # as an operator of a multi-node primary sets it (above the brokers' fencing time)
            control.push("cluster:dc-a", {"spill.after.ms": str(spill_after)})
        return {"ykafka.app.id": app_id, "ykafka.app.secret": secret,
                "ykafka.metaserver": ",".join(control.cfg.metaserver_urls)}

    def start_producer(self, index: int) -> None:
        env = ENV if self.client is None else {**ENV, "YKAFKA_SOAK_CLIENT": json.dumps(self.client)}
        with (self.work / f"producer-{index}.log").open("w") as log:  # the child keeps its own descriptor
            self.producers.append(subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "_soak_producer.py"), self.a_clients, self.b_clients,
                 str((self.spill_disk or self.work) / f"spill-{index}"), self.topic, str(index + 1),
                 str(self.args.rate), str(self.work / f"producer-{index}.txt"),
                 getattr(self.args, "failback_order", "writes-first"),
                 str(getattr(self.args, "spill_after_ms", None) or DEFAULT_HEALTH["spill_after_ms"])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT, env=env))

    def start_consumer(self) -> None:
        n = len(self.handled_files)
        out = self.work / f"handled-{n}.txt"
        self.handled_files.append(out)
        env = {**ENV, "YKAFKA_CHILD_LOG": "info"}
        if self.client is not None:
            env.update(YKAFKA_CHILD_CLIENT=json.dumps(self.client),
                       YKAFKA_CHILD_APPLIED=str(self.work / f"consumer-{n}.applied"))
        with (self.work / f"consumer-{n}.log").open("w") as log:
            self.consumers.append(subprocess.Popen(
                [sys.executable, "-m", "tests.consumer_child", "-" if self.client else self.a_clients, self.topic,
                 self.group, str(out), str(self.work / f"ccache-{n}"), "0.0005", "2"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))

    def sample_all(self) -> None:
        for kind, procs in (("producer", self.producers), ("consumer", self.consumers)):
            for n, proc in enumerate(procs):
                if proc.poll() is None:
                    found = sample(proc.pid)
                    if found is not None:
                        self.samples.setdefault(f"{kind}-{n}", []).append(found)

    def acks_after(self, t: float) -> bool:
        """Every producer had a record acknowledged after wall time ``t``."""
        for n in range(len(self.producers)):
            path = self.work / f"producer-{n}.txt"
            if not path.exists():  # the process has not opened it yet (start-up under load)
                return False
            with path.open("rb") as f:
                f.seek(max(0, path.stat().st_size - 4096))
                tail = f.read().decode(errors="replace").splitlines()[1:]
            if not any(len(p) == 3 and p[1] == "ok" and float(p[2]) > t for p in (line.split() for line in tail)):
                return False
        return True

    def running(self, limit: float = 180.0) -> None:
        """Until every producer had a record acknowledged: the soak's minute counts from there. Under load a
        producer process took over 10 s to start (imports, its DR engine), and the first fault came before it had
        written anything (the soak measured no producer, then failed reading its absent output file)."""
        start = time.monotonic()
        while not self.acks_after(0.0):
            for n, proc in enumerate(self.producers):
                if proc.poll() is not None:
                    raise RuntimeError(f"producer {n} exited ({proc.returncode}): "
                                       f"{(self.work / f'producer-{n}.log').read_text()[-2000:]}")
            if time.monotonic() - start > limit:
                raise RuntimeError(f"the producers had nothing acknowledged after {limit:.0f} s")
            time.sleep(0.2)

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample_all()
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def recovery(self, healed: float, limit: float = 120.0) -> float | None:
        start = time.monotonic()
        while time.monotonic() - start < limit:
            if self.acks_after(healed):
                return round(time.time() - healed, 2)
            self.sample_all()
            time.sleep(0.2)
        return None

    def inject(self, rng: random.Random) -> None:
        kind = rng.choice(self.kinds)
        began = time.time()
        fault: dict[str, Any] = {"fault": kind, "at_s": round(began - self.started, 1)}
        if kind in NETWORK:
            fault.update(self.network_fault(kind, rng))
        elif kind == "outage-both":
            fault.update(self.outage_both(rng))
        elif kind in NETWORK_STANDBY:
            fault.update(self.network_fault(kind.removesuffix("-standby"), rng, proxy="dc-b"))
        elif kind == "kill+control":
            fault.update(self.kill_with_control(rng))
        elif kind in ("metaserver-kill", "config-kill"):
            fault.update(self.control_kill("metaserver" if kind == "metaserver-kill" else "configcenter", rng))
        elif kind == "config-push":
            fault.update(self.config_push(rng))
        elif kind == "disk-full":
            fault.update(self.disk_full(rng))
        elif kind == "kill":
            node = rng.randrange(self.nodes) if self.nodes > 1 else None
            down = rng.uniform(3, 8)
            self.a.kill(node)
            self.wait(down)
            self.a.start()
            fault.update({"down_s": round(down, 1), **({"node": node} if node is not None else {})})
        elif kind in ("freeze", "freeze-standby"):
            broker = self.a if kind == "freeze" else self.b
            node = rng.randrange(self.nodes) if kind == "freeze" and self.nodes > 1 else None
            down = rng.uniform(5, 20 if kind == "freeze" else 15)
            broker.freeze(node)
            try:
                self.wait(down)
            finally:
                broker.thaw(node)
            fault.update({"down_s": round(down, 1), **({"node": node} if node is not None else {})})
        else:
            live = [n for n, proc in enumerate(self.consumers) if proc.poll() is None] or [0]
            victim = live[rng.randrange(len(live))]
            proc = self.consumers[victim]
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            self.start_consumer()
            fault["killed"] = victim
        healed = time.time()
        fault["recovery_s"] = self.recovery(healed)
        fault["_window"] = (began, healed + (fault["recovery_s"] or 0) + 5)
        self.faults.append(fault)
        print(json.dumps({k: v for k, v in fault.items() if not k.startswith("_")}), flush=True)

    def control_kill(self, service: str, rng: random.Random) -> dict[str, Any]:
        """SIGKILL the MetaServer or the config service (by the pid the soak's stack started it with; with
        ``--replicas`` one replica drawn, its peers keep serving), restart it 3-10 s later and wait until it answers;
        the clients keep the grant and the config they hold meanwhile (or turn to a peer)."""
        assert self.control is not None, "control-plane faults need the control plane"
        down = rng.uniform(3, 10)
        name = replica_name(service, rng.randrange(self.control.cfg.replicas))
        pid = self.control.stack.kill(name)
        self.wait(down)
        began = time.monotonic()
        self.control.stack.up([name], seed=False)
        return {"pid": pid, "replica": name, "down_s": round(down, 1),
                "restart_s": round(time.monotonic() - began, 1)}

    def kill_with_control(self, rng: random.Random) -> dict[str, Any]:
        """Two faults overlapping: the MetaServer and the config service SIGKILLed, 0-2 s later dc-a (one node of
        three with ``--dc-a-nodes 3``) SIGKILLed too; dc-a restarted 3-8 s later, the control plane either before
        it (``control_first``) or 5-15 s after it, so the failover and the failback both run without the control
        plane, on the grant and the config the clients hold."""
        assert self.control is not None, "control-plane faults need the control plane"
        services = [replica_name(service, i) for service in ("metaserver", "configcenter")
                    for i in range(self.control.cfg.replicas)]  # every replica: no control plane at all
        pids = {svc: self.control.stack.kill(svc) for svc in services}
        self.wait(rng.uniform(0, 2))
        node = rng.randrange(self.nodes) if self.nodes > 1 else None
        self.a.kill(node)
        down = rng.uniform(3, 8)
        self.wait(down)
        control_first = rng.random() < 0.5
        began = time.monotonic()
        if control_first:
            self.control.stack.up(services, seed=False)
        restart_s = round(time.monotonic() - began, 1)
        self.a.start()
        if not control_first:
            self.wait(rng.uniform(5, 15))
            began = time.monotonic()
            self.control.stack.up(services, seed=False)
            restart_s = round(time.monotonic() - began, 1)
        return {"pids": pids, "down_s": round(down, 1), "control_first": control_first, "restart_s": restart_s,
                **({"node": node} if node is not None else {})}

    def live_reports(self) -> list[tuple[str, Path]]:
        """(kind, applied file) of every live client process."""
        found = [("producer", self.work / f"producer-{n}.txt.applied")
                 for n, proc in enumerate(self.producers) if proc.poll() is None]
        return found + [("consumer", self.work / f"consumer-{n}.applied")
                        for n, proc in enumerate(self.consumers) if proc.poll() is None]

    def not_applied(self, after: float = 0.0) -> list[str]:
        """Live clients whose last report (written after ``after``) does not show every value pushed so far: in
        the values the sends / the consumer use, and for a rebuilt producer setting in its client of dc-a."""
        missing: list[str] = []
        for kind, path in self.live_reports():
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                missing.append(f"{path.name}: no report")
                continue
            if state["t"] < after:
                missing.append(f"{path.name}: no report since {after:.1f}")
                continue
            for key, value in self.pushed.items():
                if not key.startswith(kind) and not (kind == "producer" and key.startswith("route.")):
                    continue
                if state["applied"].get(key) != value:
                    missing.append(f"{path.name}: {key}={state['applied'].get(key)} (pushed {value})")
                setting = PUSHED_SETTING.get(key)
                if setting is not None and str(state["settings"].get(setting)) != value:
                    missing.append(f"{path.name}: client {setting}={state['settings'].get(setting)} (pushed {value})")
                if key == "consumer.workers" and str(state["workers"]) != value:
                    missing.append(f"{path.name}: {state['workers']} workers (pushed {value})")
        return missing

    def config_push(self, rng: random.Random, limit: float = 60.0) -> dict[str, Any]:
        """Push one hot key through the MetaServer (validated, released through the config service) while the load
        runs, then wait until every live client reports it in force: ``applied_s``, or None and what was missing
        after ``limit`` seconds."""
        assert self.control is not None, "config pushes need the control plane"
        key = rng.choice(sorted(PUSHES))
        scope_kind, values = PUSHES[key]
        # never the value in force: the consumers run with 2 workers of their own (a local value), the rest at defaults
        current = self.pushed.get(key, "2" if key == "consumer.workers" else catalog.render(
            key, catalog.KEYS[key].default))
        value = rng.choice([v for v in values if v != current] or values)
        if key == "producer.rate.limit.msgs" and value != "0":
            value = str(int(float(value) * self.args.rate))
        scope = f"topic:{self.topic}" if scope_kind == "topic" else f"group:{self.group}"
        said = self.push_and_wait(scope, key, value, limit)
        if key == "route.active":  # a manual switch: held, then back to the primary (whose failback syncs it)
            held = rng.uniform(*ROUTE_HOLD_S)
            self.wait(held)
            back = self.push_and_wait(scope, key, "primary", limit)
            said.update({"held_s": round(held, 1), "back_applied_s": back["applied_s"],
                         **({"back_missing": back["missing"]} if "missing" in back else {})})
        return said

    def push_and_wait(self, scope: str, key: str, value: str, limit: float) -> dict[str, Any]:
        """Push ``key=value`` and wait until every live client shows it in force (``applied_s``, None after
        ``limit`` seconds with what was missing)."""
        assert self.control is not None
        pushed_at = time.time()
        self.control.push(scope, {key: value})
        self.pushed[key] = value
        began = time.monotonic()
        while True:
            missing = self.not_applied(pushed_at)
            if not missing:
                return {"key": key, "value": value, "applied_s": round(time.monotonic() - began, 2)}
            if time.monotonic() - began > limit:
                return {"key": key, "value": value, "applied_s": None, "missing": missing[:4]}
            self.wait(0.5)

    def network_fault(self, kind: str, rng: random.Random, proxy: str = "dc-a") -> dict[str, Any]:
        """One network fault between every client and ``proxy``'s cluster, healed before returning."""
        net = self.net
        assert net is not None, "network faults need the proxy"
        if kind == "partition":
            down = rng.uniform(3, 10)
            net.enable(proxy, False)
            try:
                self.wait(down)
            finally:
                net.enable(proxy, True)
            return {"down_s": round(down, 1)}
        down = rng.uniform(10, 30) if kind == "latency" else rng.uniform(10, 25)
        try:
            if kind == "latency":
                ms = rng.randint(100, 400)
                for stream in ("upstream", "downstream"):
                    net.toxic(proxy, "latency", {"latency": ms, "jitter": ms // 4}, stream)
                said: dict[str, Any] = {"latency_ms": ms}
            else:  # lossy: a third of the connections stall, closed 2 s later; every close delayed 1 s
                net.toxic("dc-a", "timeout", {"timeout": 2000}, "downstream", toxicity=0.33)
                net.toxic("dc-a", "slow_close", {"delay": 1000}, "upstream")
                said = {}
            self.wait(down)
        finally:
            net.clear(proxy)
        return {"down_s": round(down, 1), **said}

    def outage_both(self, rng: random.Random) -> dict[str, Any]:
        """Two faults overlapping, in either order: dc-b cut off, then dc-a (one node of three with
        ``--dc-a-nodes 3``) SIGKILLed 1-3 s later (``standby_first``: the sends find no cluster and spill); or dc-a
        SIGKILLed, 2-5 s of writes to dc-b, then dc-b cut. dc-a is restarted 3-8 s after its kill and dc-b healed
        0-10 s after that, so the failback's sync of what dc-b took starts while dc-b does not answer."""
        net = self.net
        assert net is not None, "outage-both needs the proxy in front of dc-b"
        standby_first = rng.random() < 0.5
        node = rng.randrange(self.nodes) if self.nodes > 1 else None
        down = rng.uniform(3, 8)
        killed = False
        cut = False
        try:
            if standby_first:
                net.enable("dc-b", False)
                cut = True
                self.wait(rng.uniform(1, 3))
                self.a.kill(node)
                killed = True
                self.wait(down)
            else:
                self.a.kill(node)
                killed = True
                before = rng.uniform(2, min(5, down - 1))
                self.wait(before)
                net.enable("dc-b", False)
                cut = True
                self.wait(down - before)
            self.a.start()
            killed = False
            cut_after = rng.uniform(0, 10)
            self.wait(cut_after)
        finally:
            if killed:
                self.a.start()
            if cut:
                net.enable("dc-b", True)
        return {"down_s": round(down, 1), "standby_first": standby_first,
                "standby_cut_after_s": round(cut_after, 1), **({"node": node} if node is not None else {})}

    def disk_full(self, rng: random.Random) -> dict[str, Any]:
        """Fill the spill disk to its last byte, SIGKILL dc-a while it is full (failover, the outage journal),
        restart it 3-8 s later, free the disk 5 s after that."""
        assert self.spill_disk is not None, "disk-full needs the spill tmpfs"
        ballast = self.spill_disk / "ballast"
        chunk = b"\0" * (1 << 16)
        already_full = False
        try:  # the spill may have filled the disk itself (a long outage): then even the ballast's open fails
            with ballast.open("wb") as f:
                while True:
                    f.write(chunk)
                    f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            already_full = not ballast.exists()
        down = rng.uniform(3, 8)
        try:
            self.a.kill()
            self.wait(down)
            self.a.start()
            self.wait(5)
        finally:
            ballast.unlink(missing_ok=True)
        return {"down_s": round(down, 1), "already_full": already_full}

    def run(self) -> dict[str, Any]:
        args = self.args
        rng = random.Random(args.seed)
        for i in range(args.producers):
            self.start_producer(i)
        for _ in range(args.consumers):
            self.start_consumer()
        self.running()
        self.started = time.time()
        end = time.monotonic() + args.minutes * 60
        self.wait(min(10.0, args.minutes * 60 / 4))  # steady state first
        while time.monotonic() < end - 5:
            dead = [n for n, proc in enumerate(self.producers) if proc.poll() is not None]
            if dead:  # a crashed producer ends the schedule: the read-back says what it left
                print(f"producer(s) {dead} exited mid-run; no more faults", file=sys.stderr, flush=True)
                break
            self.inject(rng)
            self.wait(min(rng.uniform(5, 20), max(0.0, end - time.monotonic())))
        return self.finish()

    def finish(self) -> dict[str, Any]:
        # the values pushed, as the live clients hold them before they stop (a kill since the push: the new process
        # took them from the config service at its start)
        not_applied: list[str] = []
        deadline = time.monotonic() + 30
        while self.pushed and (not_applied := self.not_applied(time.time() - 3)) and time.monotonic() < deadline:
            self.wait(1.0)
        done: list[dict[str, Any]] = []
        for proc in self.producers:
            assert proc.stdin is not None and proc.stdout is not None
            if proc.poll() is None:
                proc.stdin.write("stop\n")
                proc.stdin.flush()
        for n, proc in enumerate(self.producers):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.startswith("DONE "):
                done.append(json.loads(line[5:]))
            else:
                said = [x for x in (self.work / f"producer-{n}.log").read_text(errors="replace").splitlines()
                        if x and not x.startswith("%")]
                done.append({"error": line or f"exited {proc.poll()}", "log_tail": said[-3:]})
            proc.wait(60)
        sent: set[int] = set()
        refused: set[int] = set()
        acked: set[int] = set()
        callbacks: Counter[int] = Counter()
        ack_times: list[list[float]] = []
        for n in range(len(self.producers)):
            times: list[float] = []
            for line in (self.work / f"producer-{n}.txt").read_text().splitlines():
                parts = line.split()
                if parts[0] == "S":
                    sent.add(int(parts[1]))
                elif parts[0] == "R":  # refused at the call (SpillFullError): never sent, no callback due
                    refused.add(int(parts[1]))
                elif len(parts) == 3:
                    callbacks[int(parts[0])] += 1
                    if parts[1] == "ok":
                        acked.add(int(parts[0]))
                        times.append(float(parts[2]))
            ack_times.append(sorted(times))
        sent -= refused
        for fault in self.faults:  # the longest time any producer went without an acknowledgement around the fault
            start, end = fault.pop("_window")
            fault["_span"] = (start, end)
            gaps = [0.0]
            for times in ack_times:
                inside = [t for t in times if start - 1 <= t <= end]
                gaps.extend(b - a for a, b in zip(inside, inside[1:], strict=False))
            fault["write_gap_s"] = round(max(gaps), 2)
        on_a = read_all(self.a.bootstrap, self.topic, expect=len(acked), timeout_s=60)
        on_b = read_all(self.b.bootstrap, self.topic, timeout_s=120)
        values_a = Counter(int(m.value() or b"0") for m in on_a)
        values_b = {int(m.value() or b"0") for m in on_b}
        direct = [m for m in on_a if not H.synced_from(m.headers())]
        duplicates = self.explain_duplicates(on_a, values_a)
        overtaken_direct = key_overtakes(direct)
        overtaken_examples = self.explain_overtaken(direct, overtaken_direct, values_a)
        stored_at = {int(m.value() or b"0"): m.timestamp()[1] / 1000 for m in direct}
        plain = [v for _key, v, _newer in overtaken_direct if self.acks_at(stored_at[v]) != "all"]
        for fault in self.faults:
            fault.pop("_span", None)
        ends = self.ends()
        unhandled, lag, drain_s = self.wait_consumed(acked, ends)
        if unhandled:
            self.show_consumer_logs()
        for proc in self.consumers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        consumer_exit = []
        for proc in self.consumers:
            try:
                consumer_exit.append(proc.wait(60))
            except subprocess.TimeoutExpired:
                proc.kill()
                consumer_exit.append("killed after 60 s")
        tracebacks = {path.name: text.count("Traceback (most recent call last)")
                      for path in sorted(self.work.glob("*.log")) if path.name != "toxiproxy.log"
                      for text in [path.read_text(errors="replace")]}
        pushes = [f for f in self.faults if f["fault"] == "config-push"]
        bounds = {name: {"first": s[0], "max": {k: max(x[k] for x in s) for k in s[0]}}
                  for name, s in self.samples.items() if s}
        recoveries = [f["recovery_s"] for f in self.faults if f.get("recovery_s") is not None]
        return {
            "seed": self.args.seed,
            "failback_order": getattr(self.args, "failback_order", "writes-first"),
            "minutes": self.args.minutes, "kinds": self.kinds, "producers": self.args.producers,
            "dc_a_nodes": self.nodes,
            "consumers": self.args.consumers, "faults": len(self.faults),
            "fault_kinds": dict(Counter(f["fault"] for f in self.faults)),
            "sent": len(sent), "refused": len(refused), "acked": len(acked),
            "failed_callbacks": len(sent) - len(acked),
            "callbacks_bad": sum(1 for v in sent if callbacks[v] != 1) + sum(1 for v in callbacks if v not in sent),
            "lost": len(acked - set(values_a)), "on_standby": len(values_b),
            "not_on_primary": len(values_b - set(values_a)), "synced": len(on_a) - len(direct),
            "duplicates": sum(n - 1 for n in values_a.values() if n > 1), **duplicates,
            "overtaken_direct": len(overtaken_direct) - len(plain), "overtaken_direct_not_idempotent": len(plain),
            "overtaken_standby": len(key_overtakes(on_b)),
            "overtaken_all": len(key_overtakes(on_a)),
            "overtaken_direct_examples": overtaken_examples,
            "unhandled": unhandled, "lag": lag, "drain_s": drain_s, "consumer_exit": consumer_exit,
            "tracebacks": sum(tracebacks.values()), "tracebacks_in": {k: v for k, v in tracebacks.items() if v},
            "pushes": len(pushes), "pushes_unapplied": sum(1 for f in pushes if f["applied_s"] is None
                                                            or ("back_applied_s" in f and f["back_applied_s"] is None)),
            "push_applied_s_max": max((f["applied_s"] for f in pushes if f["applied_s"] is not None), default=None),
            "pushed": dict(self.pushed), "config_not_applied": not_applied,
            "write_gap_s_max": max((f["write_gap_s"] for f in self.faults), default=None),
            "recovery_s_max": max(recoveries) if recoveries else None,
            "recovery_s_median": sorted(recoveries)[len(recoveries) // 2] if recoveries else None,
            "recovery_unknown": sum(1 for f in self.faults if f.get("recovery_s") is None),
            "producers_idle": [d.get("idle") for d in done],
            "producer_errors": [d for d in done if "error" in d],
            "syncs": [[{k: s.get(k) for k in ("state", "copied", "skipped", "left", "error")}
                       for s in d.get("sync", [])] for d in done],
            "clients": bounds, "fault_log": self.faults,
        }

    def acks_at(self, at: float) -> str:
        """The ``producer.acks`` the producers had in force at wall time ``at``, as the pushes set it: a push is in
        force from its start; after a push back to ``all``, records can still come from the plain client for
        ``PLAIN_TAIL_S`` (held, timed out, re-sent), so that tail counts as the plain client's too."""
        acks = "all"
        for fault in sorted((f for f in self.faults if f["fault"] == "config-push" and f.get("key") == "producer.acks"),
                            key=lambda f: f["at_s"]):
            start = self.started + fault["at_s"]
            if at < start:
                break
            if fault["value"] != "all":
                acks = str(fault["value"])
            elif at >= start + (fault.get("applied_s") or 0) + PLAIN_TAIL_S:
                acks = "all"
        return acks

    def explain_overtaken(self, direct: list[Any], overtaken: list[tuple[bytes | None, int, int]], counts: Counter[int],
                          most: int = 12) -> list[dict[str, Any]]:
        """Each direct write of dc-a stored behind a newer write of its key (up to ``most``): where both are
        (partition, offset, the record's timestamp relative to the run's start), how many copies each has on dc-a,
        and the fault whose window (from 10 s before it) holds the overtaken record's timestamp."""
        where: dict[int, Any] = {}
        for m in sorted(direct, key=lambda m: (m.partition() or 0, m.offset() or 0)):
            where.setdefault(int(m.value() or b"0"), m)
        out: list[dict[str, Any]] = []
        for _key, value, newer in overtaken[:most]:
            late, early = where[value], where[newer]
            at = late.timestamp()[1] / 1000
            fault = [f["fault"] for f in self.faults if f["_span"][0] - 10 <= at <= f["_span"][1]]
            out.append({"value": value, "at": (late.partition(), late.offset(), round(at - self.started, 3)),
                        "copies": counts[value], "behind": newer,
                        "behind_at": (early.partition(), early.offset(),
                                      round(early.timestamp()[1] / 1000 - self.started, 3)),
                        "behind_copies": counts[newer], "fault": fault[0] if fault else None,
                        "acks": self.acks_at(at)})
        return out

    def explain_duplicates(self, on_a: list[Any], counts: Counter[int]) -> dict[str, Any]:
        """Where the extra copies on dc-a come from: per duplicated value, how its copies got there (``direct``: a
        write to dc-a, first send or a resend of the engine or librdkafka; ``synced``: copied back from dc-b by a
        failback sync), whether two direct copies share a partition, and the fault whose window (from 10 s before it:
        a record can wait that long) holds the first copy's timestamp (``none``: outside every fault)."""
        copies: dict[int, list[Any]] = {}
        for m in on_a:
            value = int(m.value() or b"0")
            if counts[value] > 1:
                copies.setdefault(value, []).append(m)
        paths: Counter[str] = Counter()
        faults: Counter[str] = Counter()
        examples: list[dict[str, Any]] = []
        for value, ms in sorted(copies.items()):
            kinds = sorted("synced" if H.synced_from(m.headers()) else "direct" for m in ms)
            path = "+".join(kinds)
            if kinds.count("direct") > 1:
                same = len({m.partition() for m in ms if not H.synced_from(m.headers())}) == 1
                path += " (same partition)" if same else " (other partitions)"
            paths[path] += len(ms) - 1
            first = min(m.timestamp()[1] for m in ms) / 1000
            # a record made up to spill.after.ms (10 s) before a fault can still be queued or in flight at it
            where = [f["fault"] for f in self.faults if f["_span"][0] - 10 <= first <= f["_span"][1]]
            faults[where[0] if where else "none"] += len(ms) - 1
            if len(examples) < 12:
                examples.append({"value": value, "copies": [(m.partition(), m.offset(), "synced" if H.synced_from(
                    m.headers()) else "direct") for m in ms], "at_s": round(first - self.started, 1),
                    "fault": where[0] if where else None})
        return {"duplicates_by_path": dict(paths), "duplicates_by_fault": dict(faults),
                "duplicate_examples": examples}

    def show_consumer_logs(self, lines: int = 15) -> None:
        """Records were left unhandled: name every consumer's log, print the tail of each live one's (stderr), and
        when each consumer last handled a record."""
        for n, proc in enumerate(self.consumers):
            log = self.work / f"consumer-{n}.log"
            handled = self.handled_files[n]
            last = handled.stat().st_mtime if handled.exists() else None
            print(f"consumer {n} ({'live' if proc.poll() is None else f'exit {proc.returncode}'}; last handled "
                  f"{'never' if last is None else f'{time.time() - last:.0f} s ago'}): {log}", file=sys.stderr)
            if proc.poll() is None and log.exists():
                said = [line for line in log.read_text(errors="replace").splitlines() if not line.startswith("%")]
                for line in said[-lines:]:
                    print(f"  {line[:400]}", file=sys.stderr)
        try:  # the group as the coordinator sees it
            found = AdminClient({"bootstrap.servers": self.a.bootstrap}).describe_consumer_groups(
                [self.group], request_timeout=10)[self.group].result(timeout=30)  # it hung for good once
            print(f"group {self.group}: {found.state.name}, members "
                  f"{[(m.client_id, len(m.assignment.topic_partitions)) for m in found.members]}", file=sys.stderr)
        except Exception as exc:
            print(f"group {self.group}: not described ({exc})", file=sys.stderr)

    def ends(self) -> dict[int, int]:
        probe = RawConsumer({"bootstrap.servers": self.a.bootstrap, "group.id": self.group})
        try:
            return {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                    for p in range(PARTITIONS)}
        finally:
            probe.close()

    def wait_consumed(self, acked: set[int], ends: dict[int, int], stall_s: float = 120,
                      cap_s: float = 1200) -> tuple[int, int, float]:
        """(acknowledged records never handled, dc-a's ends minus the group's commits, seconds it took) once both
        are 0; or, with records left, once the group made no progress (handled nothing new, committed nothing)
        for ``stall_s``, or at ``cap_s``. A group that is slow (a backlog from the faults, one worker after a
        push, a loaded machine) drains; only one that stopped is stranded: the bound is on the stall, not on
        the drain (a 30-minute run at load 20 took 7 minutes to drain a backlog a 300 s bound called stranded)."""
        started = time.monotonic()
        last_progress, seen = started, (-1, -1)
        while True:
            handled: set[int] = set()
            for path in self.handled_files:
                if path.exists():
                    handled.update(int(line.split()[0]) for line in path.read_text().splitlines()
                                   if line.count(" ") == 2)
            probe = RawConsumer({"bootstrap.servers": self.a.bootstrap, "group.id": self.group})
            try:
                committed = probe.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=10)
            finally:
                probe.close()
            lag = sum(max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in committed)
            unhandled = len(acked - handled)
            now = time.monotonic()
            if (unhandled, lag) != seen:
                last_progress, seen = now, (unhandled, lag)
            if (unhandled == 0 and lag == 0) or now - last_progress > stall_s or now - started > cap_s:
                return unhandled, lag, round(now - started, 1)
            self.sample_all()
            time.sleep(1.0)

    def close(self) -> None:
        for proc in [*self.producers, *self.consumers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def spill_tmpfs(path: Path) -> str | None:
    """Mount a small tmpfs at ``path`` for the spill directories; None, or why not (not root, no privilege)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return "mounting a tmpfs needs root"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SPILL_DISK_MB}m", "ykafka-soak-spill", str(path)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=300, help="records a second per producer process")
    parser.add_argument("--faults", default=",".join(BASIC + NETWORK + DISK + CONTROL + NETWORK_STANDBY),
                        help="fault kinds to draw from, comma-separated (default: all; the schedules of runs before "
                             "the dc-b kinds came are drawn again without them: --faults " +
                             ",".join(BASIC + NETWORK + DISK + CONTROL) + ")")
    parser.add_argument("--failback-order", choices=("writes-first", "strict"), default="writes-first",
                        help="the producers' route.failback.order: strict must end with overtaken_all 0")
    parser.add_argument("--spill-after-ms", type=int, default=None,
                        help="the producers' spill.after.ms (default 10,000: DEFAULT_HEALTH and the catalog's); "
                             "with the control plane pushed at dc-a's cluster scope")
    parser.add_argument("--dc-a-nodes", type=int, choices=(1, 3), default=1,
                        help="3: dc-a is three Kafka nodes (RF 3, min.insync.replicas 2), a kill or freeze hits one "
                             "node, and nothing may fail over to dc-b by itself (on_standby 0 without a pushed route "
                             "switch); no dc-a network or disk-full faults then (they take the whole cluster); "
                             "dc-b's network faults run")
    parser.add_argument("--replicas", type=int, choices=(1, 2, 3), default=1,
                        help="config services and MetaServers each (peers on one database): a metaserver-kill or "
                             "config-kill hits one replica, kill+control every one")
    parser.add_argument("--quick", action="store_true", help="one minute, seed 7 (what tests/test_soak.py runs)")
    args = parser.parse_args()
    # stopped from outside (SIGTERM, or SIGINT of a background job, which a shell starts with SIGINT ignored): the
    # finally blocks still stop the clusters, the proxy and the clients by pid and unmount the spill tmpfs
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    if args.quick:
        args.minutes, args.seed, args.faults = 1.0, 7, ",".join(BASIC)
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    every = BASIC + NETWORK + NETWORK_STANDBY + DISK + CONTROL
    unknown = sorted(set(kinds) - set(every))
    if unknown:
        parser.error(f"unknown fault kinds {unknown}: choose from {every}")
    if args.dc_a_nodes > 1 and set(kinds) & set(NETWORK + DISK):
        print(f"{sorted(set(kinds) & set(NETWORK + DISK))} left out: with --dc-a-nodes 3 only one node is faulted",
              file=sys.stderr, flush=True)
        kinds = [k for k in kinds if k not in NETWORK + DISK]
    work = Path(tempfile.mkdtemp(prefix="ykafka-soak-"))
    print(f"work dir (clusters, producer-N.log, consumer-N.log, handled-N.txt): {work}", file=sys.stderr, flush=True)
    proxied = set(NETWORK + NETWORK_STANDBY)
    binary = toxiproxy.binary() if set(kinds) & proxied else None
    if set(kinds) & proxied and binary is None:
        print(f"network faults skipped: {toxiproxy.HINT}", file=sys.stderr, flush=True)
        kinds = [k for k in kinds if k not in proxied]
    spill_disk: Path | None = None
    if "disk-full" in kinds:
        refused = spill_tmpfs(work / "spill-disk")
        if refused is None:
            spill_disk = work / "spill-disk"
        else:
            print(f"disk-full skipped: a tmpfs for the spill directory was refused ({refused})", file=sys.stderr,
                  flush=True)
            kinds.remove("disk-full")
    args.faults = kinds
    #: cluster -> (its proxied listener's port, the proxy's port) for each cluster a network fault is drawn for
    proxied_ports: dict[str, tuple[int, int]] = {}
    faulted = [name for name, its in (("dc-a", NETWORK), ("dc-b", NETWORK_STANDBY)) if set(kinds) & set(its)]

    def prepare(stack: Any) -> None:
        # the 30 s a service gets to answer was too short for a MetaServer starting at a load average of 18 (the
        # run failed before its first fault), and a restarted one must not end the run either
        stack.cfg.startup_timeout_s = max(stack.cfg.startup_timeout_s, 120.0)
        if args.replicas > 1:
            stack.cfg.set_replicas(args.replicas)
            stack.cfg.configcenter_extra_ports = [free_port() for _ in range(args.replicas - 1)]
            stack.cfg.metaserver_extra_ports = [free_port() for _ in range(args.replicas - 1)]
        if binary is not None:
            for name in faulted:
                proxied_ports[name] = toxiproxy.proxied_listener(stack.cfg.clusters[name])

    net: toxiproxy.Toxiproxy | None = None
    try:
        with brokers(["dc-a", "dc-b"], work / "clusters", broker="kafka", count={"dc-a": args.dc_a_nodes, "dc-b": 1},
                     prepare=prepare) as started:
            clients: dict[str, str] = {}  # cluster -> the bootstrap clients use: the proxy's, where there is one
            if binary is not None:
                net = toxiproxy.Toxiproxy(binary, work / "toxiproxy.log")
                for name, (inner, outer) in proxied_ports.items():
                    net.proxy(name, outer, f"127.0.0.1:{inner}")
                    clients[name] = f"127.0.0.1:{outer}"
            control = None
            if set(kinds) & set(CONTROL):  # the config service and the MetaServer, on the clusters' stack
                control = LocalStack(started["dc-a"].stack).up(["control"])  # every replica
                for name, bootstrap in clients.items():  # the clients reach it through the proxy: the registry says so
                    YAdmin(control.metaserver, control.admin_token).set_cluster(
                        name, bootstrap_servers=bootstrap, dc=name, status="active")
            soak = Soak(started["dc-a"], started["dc-b"], work, args, net, clients.get("dc-a"), spill_disk, control,
                        clients.get("dc-b"))
            try:
                result = soak.run()
            finally:
                soak.close()
    finally:
        if net is not None:
            net.close()
        if spill_disk is not None:
            subprocess.run(["umount", str(spill_disk)], check=False)
    result["work"] = str(work)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
