"""What each broker kind of the local stack costs to start and to keep running: wall time until the broker answers
a metadata request, the CPU seconds it spent getting there (the honest figure on a shared, loaded machine), and
its resident memory once it answers.

Apache Kafka (``ykafka.devstack.kafka``): a fresh one-node cluster (storage format + start), the same node started
again on its logs, and (not with ``--quick``) a fresh three-node cluster; Tansu: one memory broker. Every process
is started and stopped by pid through ``tests.support.Broker`` (what ``ykafka dev up`` runs).

    python bench/broker_startup.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import Broker, rss_mb  # noqa: E402


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _answers(bootstrap: str, nodes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 120
    while len(admin.list_topics(timeout=10).brokers) < nodes:
        if time.monotonic() > deadline:
            raise SystemExit(f"{bootstrap}: fewer than {nodes} brokers after 120 s")
        time.sleep(0.1)


def measure(cluster: Broker, nodes: int) -> dict[str, float]:
    started = time.monotonic()
    cluster.start()
    _answers(cluster.bootstrap, nodes)
    wall = time.monotonic() - started
    pids = [pid for pid in cluster.pids if pid is not None]
    return {"start_s": round(wall, 2), "cpu_s": round(sum(map(_cpu_s, pids)), 2),
            "rss_mb": round(sum(rss_mb(pid) for pid in pids), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, no three-node cluster")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    runs: dict[str, list[dict[str, float]]] = {"kafka_fresh": [], "kafka_restart": [], "kafka3_fresh": [],
                                               "tansu": []}
    with tempfile.TemporaryDirectory(prefix="bench-brokers-") as work:
        for r in range(rounds):
            kafka = Broker(f"k{r}", Path(work), broker="kafka")
            try:
                runs["kafka_fresh"].append(measure(kafka, 1))
                kafka.kill()
                runs["kafka_restart"].append(measure(kafka, 1))
            finally:
                kafka.close()
            tansu = Broker(f"t{r}", Path(work))
            try:
                runs["tansu"].append(measure(tansu, 1))
            finally:
                tansu.close()
            if not args.quick:
                three = Broker(f"k3-{r}", Path(work), brokers=3, broker="kafka")
                try:
                    runs["kafka3_fresh"].append(measure(three, 3))
                finally:
                    three.close()
    result: dict[str, object] = {"rounds": rounds, "load_1m": round(os.getloadavg()[0], 1), "heap": "512m"}
    for name, values in runs.items():
        for field in ("start_s", "cpu_s", "rss_mb"):
            if values:
                result[f"{name}_{field}"] = round(statistics.median(v[field] for v in values), 2)
    for name, values in runs.items():
        print(name, values)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
