"""Start-up: ``Producer(...)`` to the first acknowledged send, with the servers up and from the disk caches
with the MetaServer and the config center down; raw confluent-kafka's ``Producer(...)`` to first ack as peer.

Starts its own stack on free ports (Tansu broker, config service, MetaServer; stopped by pid at the end).
Each round builds a fresh client in this process (imports already done, as in a running service), sends
one message and waits for its delivery report:

* ``cold``: servers up, empty cache directory (signed grant, global + topic namespaces fetched);
* ``warm``: servers up, the cache of a previous client present;
* ``cached_down``: the MetaServer and the config center stopped, the client starts from its cached grant
  and namespaces (docs/architecture.md: a client starts while the control plane is away).

``ready_ms`` is the part until ``Producer(...)`` returned and the first ``produce`` was accepted: the client's
own work (grant, namespaces, clients built); the rest is librdkafka's wait for the idempotent producer id
before the first batch goes out. librdkafka asks for it on a 500 ms timer: raw waits one tick when the
partition leader is connected by then, two when not; ykafka's Producer asks ~50 ms after building its handle
(``transport.ProducerIdHastener``). ``two_ticks`` counts the rounds of each kind whose ack came >= 750 ms after
that first ``produce``. ``met`` holds the issue's targets against the first ack itself (best; ``met_median``).

The peer that explains the ticks (docs/benchmarks.md, "Start-up"): ``raw_late`` is raw confluent-kafka sending
its first message 30 ms after ``Producer(...)`` (as an application does that builds its producer before it has
something to send). Each ykafka round starts without the in-process signing key (as a new process), and
``data_handles`` is the most librdkafka producers (the Producer's and the DR engine's) one cold round built
for the cluster.

Figures are the best of ``--rounds`` (the machine is shared), medians are printed too.

    python bench/startup.py [--rounds 5] [--quick]

Last line: RESULT {"raw_ms": ..., "cold_ms": ..., "cached_down_ms": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer as RawProducer  # noqa: E402

from tests.support import local_stack  # noqa: E402
from ykafka import Producer, transport  # noqa: E402
from ykafka.auth import signing_key  # noqa: E402
from ykafka.logs import configure  # noqa: E402

TARGET_UP_MS = 150
TARGET_CACHED_MS = 50
LATE_S = 0.03
TWO_TICKS_MS = 750


def first_ack_ms(make: Any, topic: str, ready: list[float] | None = None, delay_s: float = 0.0,
                 after: list[float] | None = None) -> float:
    """Milliseconds from constructing a producer to the delivery report of its first message; ``ready``
    gets the milliseconds until ``Producer(...)`` returned and the first ``produce`` was accepted, ``after``
    those from that ``produce`` to the ack; ``delay_s``: wait this long between the two."""
    acked: list[Any] = []
    signing_key.cache_clear()  # each client starts as in a new process
    start = time.perf_counter()
    producer = make()
    if delay_s:
        time.sleep(delay_s)
    producer.produce(topic, b"hello", on_delivery=lambda err, _msg: acked.append(err))
    accepted = time.perf_counter()
    if ready is not None:
        ready.append((accepted - start) * 1000)
    while not acked:
        producer.poll(0.001)
    elapsed = (time.perf_counter() - start) * 1000
    if after is not None:
        after.append((time.perf_counter() - accepted) * 1000)
    if acked[0] is not None:
        raise RuntimeError(f"first send failed: {acked[0]}")
    if hasattr(producer, "close"):
        producer.close()
    return elapsed


def summary(values: list[float]) -> dict[str, float]:
    return {"best": round(min(values), 1), "median": round(statistics.median(values), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    configure("warning")
    out: dict[str, list[float]] = {"raw": [], "cold": [], "warm": [], "cached_down": [], "raw_late": []}
    ready: dict[str, list[float]] = {k: [] for k in out}
    after: dict[str, list[float]] = {k: [] for k in out}
    handles: list[int] = []
    with local_stack(["dc-a", "control"], broker=args.broker) as bench:
        topic = f"bench-start-{uuid.uuid4().hex[:6]}"
        raw_conf = {"bootstrap.servers": bench.bootstrap(), "acks": "all", "enable.idempotence": True,
                    "linger.ms": 5}
        first_ack_ms(lambda: RawProducer(raw_conf), topic)  # creates the topic; warms the broker
        caches = [Path(tempfile.mkdtemp(prefix="ykafka-bench-start-")) for _ in range(rounds)]
        for cache in caches:
            conf = bench.client_config(**{"ykafka.cache.dir": str(cache)})
            out["raw"].append(first_ack_ms(lambda: RawProducer(raw_conf), topic, ready["raw"], after=after["raw"]))
            transport.producers_built(reset=True)
            out["cold"].append(first_ack_ms(lambda conf=conf: Producer(conf), topic, ready["cold"],  # type: ignore[misc]
                                            after=after["cold"]))
            handles.append(sum(n for (role, boot), n in transport.producers_built().items()
                               if role in ("producer", "dr") and boot == bench.bootstrap()))
            out["warm"].append(first_ack_ms(lambda conf=conf: Producer(conf), topic, ready["warm"],  # type: ignore[misc]
                                            after=after["warm"]))
            out["raw_late"].append(first_ack_ms(lambda: RawProducer(raw_conf), topic, ready["raw_late"], LATE_S,
                                                after["raw_late"]))
        bench.stack.down(["metaserver", "configcenter"])
        for cache in caches:
            conf = bench.client_config(**{"ykafka.cache.dir": str(cache)})
            out["cached_down"].append(first_ack_ms(lambda conf=conf: Producer(conf), topic,  # type: ignore[misc]
                                                   ready["cached_down"], after=after["cached_down"]))
    result: dict[str, Any] = {f"{k}_ms": summary(v)["best"] for k, v in out.items()}
    result["median_ms"] = {k: summary(v)["median"] for k, v in out.items()}
    result["ready_ms"] = {k: summary(v)["best"] for k, v in ready.items()}  # Producer() + first produce()
    result["two_ticks"] = {k: sum(1 for v in values if v >= TWO_TICKS_MS) for k, values in after.items()}
    result["data_handles"] = max(handles)
    result["cold_over_raw_ms"] = round(result["cold_ms"] - result["raw_ms"], 1)
    result["cold_over_raw_median_ms"] = round(result["median_ms"]["cold"] - result["median_ms"]["raw"], 1)
    result["rounds"] = rounds
    result["target"] = {"up_ms": TARGET_UP_MS, "cached_down_ms": TARGET_CACHED_MS}
    # the targets, on the first ack itself (best and median): librdkafka's producer-id wait is now
    # ~50 ms after the handle is built (transport.ProducerIdHastener), no longer the 500 ms raw waits
    result["met"] = {"up": result["cold_ms"] <= TARGET_UP_MS,
                     "cached_down": result["cached_down_ms"] <= TARGET_CACHED_MS}
    result["met_median"] = {"up": result["median_ms"]["cold"] <= TARGET_UP_MS,
                            "cached_down": result["median_ms"]["cached_down"] <= TARGET_CACHED_MS}
    print("RESULT " + json.dumps({**result, "broker": args.broker}), flush=True)


if __name__ == "__main__":
    main()
