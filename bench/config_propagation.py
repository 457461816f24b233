"""Hot-config propagation: admin push -> change in force in a producing client; loss / duplicates counted.

Starts what it needs on free ports (a Tansu broker, the config service, the MetaServer; seeded with one
app), stopped by pid at the end. A thread produces ``k<i>:<seq>`` at a steady rate (5,000 msg/s) while
the main thread pushes 50 changes through the MetaServer admin API (mixing rebuild keys such as
``producer.linger.ms`` / ``producer.compression`` with in-place ones such as ``producer.partitioner``),
each measured from the admin call returning to the producer sending with the new value (the client often
has it before the admin call returns, so ``*_from_request_ms`` also gives the time from sending the call).
At the end every record is read back from the broker: ``lost`` = sent but never stored, ``duplicated`` =
stored twice.

    python bench/config_propagation.py [--changes 50] [--rate 5000] [--quick]

Last line: RESULT {"changes": 50, "p50_ms": ..., "p99_ms": ..., "lost": 0, "duplicated": 0}
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402

from tests.support import local_stack  # noqa: E402
from ykafka import Producer  # noqa: E402
from ykafka.admin.client import AdminClient  # noqa: E402
from ykafka.logs import configure  # noqa: E402


def changes(n: int) -> list[tuple[str, str, Any]]:
    out: list[tuple[str, str, Any]] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(("producer.linger.ms", str(3 + i), 3 + i))
        elif kind == 1:
            part = "round_robin" if i % 8 == 1 else "murmur2"
            out.append(("producer.partitioner", part, part))
        elif kind == 2:
            codec = "lz4" if i % 8 == 2 else "none"
            out.append(("producer.compression", codec, codec))
        else:
            out.append(("trace.sample.rate", f"0.{i:02d}", float(f"0.{i:02d}")))
    return out


class Load(threading.Thread):
    def __init__(self, producer: Producer, topic: str, rate: float, keys: int = 16, prefix: str = "") -> None:
        super().__init__(daemon=True)
        self.producer, self.topic, self.rate, self.keys = producer, topic, rate, keys
        self.prefix = prefix  # several loads on one topic: values stay distinct
        self.sent = 0
        self.failed = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def run(self) -> None:
        seq = [0] * self.keys
        start = time.monotonic()
        try:
            while not self.stop_event.is_set():
                k = self.sent % self.keys
                while True:
                    try:
                        self.producer.produce(self.topic, f"{self.prefix}k{k}:{seq[k]}".encode(), f"k{k}".encode(),
                                              on_delivery=self._cb)
                        break
                    except BufferError:
                        self.producer.poll(0.01)
                seq[k] += 1
                self.sent += 1
                self.producer.poll(0)
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        except BaseException as exc:
            self.error = exc


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 120.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    quiet = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=5000, timeout=0.5)
            batch = [m for m in batch if m.error() is None]
            values.extend(m.value().decode() for m in batch)
            if batch:
                quiet = None
            elif len(values) >= expected:
                quiet = quiet or time.monotonic()
                if time.monotonic() - quiet > 1.0:
                    break
    finally:
        consumer.close()
    return values


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--quick", action="store_true", help="5 changes at 2,000 msgs/s (the suite's check)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    if args.quick:
        args.changes, args.rate = 5, 2000.0
    configure("warning")
    with local_stack(["dc-a", "control"], broker=args.broker) as bench:
        cfg = bench.cfg
        admin = AdminClient(cfg.metaserver_url, cfg.admin_token)
        topic = f"bench-propagation-{uuid.uuid4().hex[:6]}"
        producer = Producer(bench.client_config())
        load = Load(producer, topic, args.rate)
        load.start()
        while load.sent < 1000:
            time.sleep(0.01)
        latencies: list[float] = []
        from_send: list[float] = []
        for key, raw, typed in changes(args.changes):
            sent_at = time.monotonic()
            admin.push_config(f"topic:{topic}", {key: raw})
            pushed = time.monotonic()
            while (producer.in_force(topic) or {}).get(key) != typed:
                if time.monotonic() - pushed > 30:
                    raise RuntimeError(f"{key}={raw} not in force after 30 s")
                if load.error is not None:
                    raise RuntimeError(f"producer thread failed: {load.error!r}")
                time.sleep(0.0005)
            now = time.monotonic()
            latencies.append((now - pushed) * 1000)
            from_send.append((now - sent_at) * 1000)
            time.sleep(0.1)
        time.sleep(0.5)
        load.stop_event.set()
        load.join(30)
        if load.error is not None:
            raise RuntimeError(f"producer thread failed: {load.error!r}")
        left = producer.flush(60)
        swaps = producer.swaps
        producer.close()
        values = read_all(cfg.bootstrap(cfg.default_cluster), topic, load.sent)
        unique = set(values)
        result = {"changes": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 1),
                  "p99_ms": round(percentile(latencies, 0.99), 1), "max_ms": round(max(latencies), 1),
                  "p50_from_request_ms": round(percentile(from_send, 0.5), 1),
                  "p99_from_request_ms": round(percentile(from_send, 0.99), 1),
                  "lost": load.sent - len(unique), "duplicated": len(values) - len(unique),
                  "sent": load.sent, "failed_reports": load.failed, "undelivered": left, "swaps": swaps,
                  "rate": args.rate}
    print("RESULT " + json.dumps({**result, "broker": args.broker}), flush=True)


if __name__ == "__main__":
    main()
