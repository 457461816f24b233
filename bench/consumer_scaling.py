"""Consumer framework scaling: worker pool × ordering mode, and dispatch overhead against a raw loop.

Starts its own Tansu broker on a free port (stopped by pid at the end), unless ``--bootstrap`` is given.

* Scaling: a handler sleeping 5 ms on a 16-partition topic with 1,000 keys; workers 1 / 4 / 16 / 64 ×
  ordering none / partition / key. ``msgs_s`` is measured between the 10 % and 90 % completion marks of
  each run (ramp-up and tail excluded); ``ratio_to_ideal`` divides it by ``workers / 5 ms``, capped at
  ``16 / 5 ms`` for ``partition`` ordering (one message of a partition at a time).
* Overhead: a no-op handler through ``Consumer.run`` (default ordering ``partition``, 4 workers; timed from
  ``engine.processed``, so the handler is the very no-op the peer calls) against the peer, a raw confluent-kafka
  ``consume(500)`` loop calling the same no-op, over the same messages, with
  the fetch setting ``Consumer.run`` applies (``fetch.queue.backoff.ms=20``: ``noop_ratio``) and with
  librdkafka's defaults (``raw_default_noop_msgs_s``, ``noop_ratio_vs_default``): on Apache Kafka a raw loop
  at the default 1 s back-off stalls each time its prefetch queue passes ``queued.min.messages``. The sides
  take turns (``--noop-repeats`` rounds): ``noop_ratio`` is the best round's rate over the best, and
  ``noop_ratio_median`` the median of each round's ratio (on 2 cores shared with the broker a single round's
  ratio spread 0.64-1.43 on 2026-11-30, so one round decides little). ``--noop-only``: the overhead alone.
* The drop-in ``poll()``: a loop calling ``Consumer.poll()`` a message at a time against the same loop on raw
  ``poll()``, the same fetch setting on both, in the same rounds (``poll_ratio_median``).

    python bench/consumer_scaling.py [--bootstrap HOST:PORT] [--seconds 2.5] [--noop-messages 400000] [--quick]
                                     [--noop-repeats 5] [--noop-only]

Last line: RESULT {"runs": [{"workers", "ordering", "msgs_s", "ratio_to_ideal"}, ...],
"raw_noop_msgs_s", "ykafka_noop_msgs_s", "noop_ratio", "noop_ratio_median", "noop_ratios",
"raw_default_noop_msgs_s", "noop_ratio_vs_default", "raw_poll_msgs_s", "ykafka_poll_msgs_s", "poll_ratio_median",
"poll_ratios"}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer as RawConsumer  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support import LocalStack, new_stack  # noqa: E402
from ykafka.consumer import Consumer  # noqa: E402
from ykafka.logs import configure  # noqa: E402

PARTITIONS = 16
KEYS = 1000
HANDLER_S = 0.005
WORKERS = (1, 4, 16, 64)
ORDERINGS = ("none", "partition", "key")


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]).values():
        future.result(30)


def fill(bootstrap: str, topic: str, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True})
    pad = b"x" * max(0, size - 8)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=str(i % KEYS).encode(), value=pad + i.to_bytes(8, "big"))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("could not fill the topic")


def consumer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "ykafka.cache.dir": tempfile.mkdtemp(prefix="ykafka-bench-"), "ykafka.consumer.retry.topics": False,
            "ykafka.consumer.revoke.timeout.ms": 2000, **extra}


def window_rate(stamps: list[float]) -> float:
    """Completions per second between the 10 % and 90 % marks."""
    stamps = sorted(stamps)
    lo, hi = int(len(stamps) * 0.1), int(len(stamps) * 0.9) - 1
    span = stamps[hi] - stamps[lo]
    return (hi - lo) / span if span > 0 else float("nan")


def scaling_run(bootstrap: str, topic: str, workers: int, ordering: str, seconds: float) -> dict[str, Any]:
    ideal = min(workers, PARTITIONS) / HANDLER_S if ordering == "partition" else workers / HANDLER_S
    target = max(200, int(ideal * seconds))
    stamps: list[float] = []
    done = threading.Event()
    clock = time.monotonic

    def handler(_msg: Any) -> None:
        time.sleep(HANDLER_S)
        stamps.append(clock())
        if len(stamps) >= target:
            done.set()

    consumer = Consumer(consumer_conf(bootstrap, **{
        "consumer.workers": workers, "consumer.ordering": ordering,
        }))
    thread = threading.Thread(target=consumer.run, args=(handler, [topic]), daemon=True)
    thread.start()
    done.wait(120 + seconds * 4)
    consumer.stop()
    thread.join(60)
    consumer.close()
    rate = window_rate(stamps[:target])
    return {"workers": workers, "ordering": ordering, "msgs_s": round(rate, 1),
            "ratio_to_ideal": round(rate / ideal, 3), "handled": len(stamps)}


#: what ``Consumer.run`` sets unless the application does (ykafka/consumer/engine.py): the peer gets it too
RUN_FETCH = {"fetch.queue.backoff.ms": 20}


def raw_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """:func:`consumer_conf` for a raw confluent-kafka consumer (without ykafka's own settings)."""
    return {k: v for k, v in consumer_conf(bootstrap, **extra).items() if not k.startswith("ykafka.")}


def raw_noop(bootstrap: str, topic: str, count: int, extra: dict[str, Any] | None = None) -> float:
    consumer = RawConsumer(raw_conf(bootstrap, **(extra or {})))
    consumer.subscribe([topic])
    noop = _noop
    got, start = 0, 0.0
    try:
        while got < count:
            msgs = consumer.consume(500, 1.0)
            if msgs and not start:
                start = time.monotonic()
            for msg in msgs:
                if msg.error() is None:
                    noop(msg)
                    got += 1
        return count / (time.monotonic() - start)
    finally:
        consumer.close()


def _noop(_msg: Any) -> None:
    return None


def poll_noop(consumer: Any, topic: str, count: int) -> float:
    """The drop-in ``poll()`` loop, the same code for both sides: a message a call, the no-op on each, timed from
    the first message to the last (``count`` of them) and closed after."""
    consumer.subscribe([topic])
    poll, noop = consumer.poll, _noop
    got, start = 0, 0.0
    try:
        while got < count:
            msg = poll(1.0)
            if msg is None:
                continue
            if not start:
                start = time.monotonic()
            if msg.error() is None:
                noop(msg)
                got += 1
        return (count - 1) / (time.monotonic() - start)
    finally:
        consumer.close()


def poll_pair(bootstrap: str, topic: str, count: int, ykafka_first: bool) -> tuple[float, float]:
    """(raw ``poll()``, ykafka's ``Consumer.poll()``) rates, both with ``RUN_FETCH`` (the drop-in consumer keeps
    librdkafka's 1 s default fetch back-off, on which both sides stall alike and the figure measures the stalls);
    who reads first alternates between rounds. Each side is a group of its own (a shared one starts at its end)."""
    def raw() -> float:
        return poll_noop(RawConsumer(raw_conf(bootstrap, **RUN_FETCH)), topic, count)

    def ours() -> float:
        return poll_noop(Consumer(consumer_conf(bootstrap, **RUN_FETCH)), topic, count)

    if ykafka_first:
        first = ours()
        return raw(), first
    first = raw()
    return first, ours()


def ykafka_noop(bootstrap: str, topic: str, count: int, sample_s: float = 0.02) -> float:
    """``Consumer.run`` calling the raw loop's own no-op; this thread reads ``engine.processed`` (counted per task)
    every ``sample_s``, so the handler does no counting or time-stamping the raw loop does not do. The rate is taken
    between the first and the last reading strictly inside the run (some handled, not all), so neither the start
    nor an idle tail is in it, and a reading waking the fetch thread's GIL every millisecond is not either."""
    consumer = Consumer(consumer_conf(bootstrap))
    thread = threading.Thread(target=consumer.run, args=(_noop, [topic]), daemon=True)
    thread.start()
    engine = consumer.engine
    deadline = time.monotonic() + 300
    inside: list[tuple[float, int]] = []
    handled = 0
    while handled < count and time.monotonic() < deadline:
        time.sleep(sample_s)
        handled = engine.processed
        if 0 < handled < count:
            inside.append((time.monotonic(), handled))
    consumer.stop()
    thread.join(60)
    consumer.close()
    if handled < count:
        raise RuntimeError(f"Consumer.run handled {handled} of {count} messages")
    if len(inside) < 2:
        raise RuntimeError(f"Consumer.run handled {count} messages in under {2 * sample_s} s: use more")
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--seconds", type=float, default=2.5, help="target length of each scaling run")
    parser.add_argument("--noop-messages", type=int, default=400_000)
    parser.add_argument("--noop-repeats", type=int, default=5,
                        help="rounds of the no-op figures, the sides taking turns (best and median)")
    parser.add_argument("--noop-only", action="store_true", help="the no-op overhead alone, no scaling runs")
    parser.add_argument("--quick", action="store_true", help="4 runs of 1 s, 20,000 no-op messages, one repeat")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.noop_messages, args.noop_repeats = (1.0, 20_000, 1)
    workers_list, orderings = ((1, 16), ("none", "key")) if args.quick else (WORKERS, ORDERINGS)
    configure("warning")

    stack: LocalStack | None = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        stack = new_stack(broker=args.broker).up(["dc-a"])
        bootstrap = stack.bootstrap()
    try:
        scale_topic, noop_topic = f"scale-{uuid.uuid4().hex[:6]}", f"noop-{uuid.uuid4().hex[:6]}"
        create(bootstrap, scale_topic)
        create(bootstrap, noop_topic)
        biggest = int(max(workers_list) / HANDLER_S * args.seconds * 1.5)
        fill(bootstrap, scale_topic, biggest)
        fill(bootstrap, noop_topic, args.noop_messages)
        print(f"topics filled: {biggest} x 100 B on {scale_topic}, {args.noop_messages} on {noop_topic}",
              flush=True)

        runs = []
        for workers in [] if args.noop_only else workers_list:
            for ordering in orderings:
                run = scaling_run(bootstrap, scale_topic, workers, ordering, args.seconds)
                runs.append(run)
                print(f"workers={workers:>2} ordering={ordering:<9} {run['msgs_s']:>9.1f} msg/s  "
                      f"ratio_to_ideal={run['ratio_to_ideal']:.3f}", flush=True)

        raw, raw_default, ours = [], [], []
        polls: list[tuple[float, float]] = []
        for round_ in range(args.noop_repeats):  # interleaved so machine load hits both alike
            raw.append(raw_noop(bootstrap, noop_topic, args.noop_messages, RUN_FETCH))
            raw_default.append(raw_noop(bootstrap, noop_topic, args.noop_messages))
            # 400,000 messages take ~0.5-0.8 s: 25-40 readings inside at 20 ms; --quick's 20,000 need them finer
            ours.append(ykafka_noop(bootstrap, noop_topic, args.noop_messages, 0.002 if args.quick else 0.02))
            polls.append(poll_pair(bootstrap, noop_topic, args.noop_messages, ykafka_first=round_ % 2 == 1))
            print(f"no-op: raw {raw[-1]:,.0f} msg/s (librdkafka defaults {raw_default[-1]:,.0f}), "
                  f"ykafka {ours[-1]:,.0f} msg/s; poll(): raw {polls[-1][0]:,.0f}, ykafka {polls[-1][1]:,.0f} msg/s",
                  flush=True)
        ratios = sorted(o / r for o, r in zip(ours, raw, strict=True))
        poll_ratios = sorted(o / r for r, o in polls)
        result = {
            "runs": [{k: r[k] for k in ("workers", "ordering", "msgs_s", "ratio_to_ideal")} for r in runs],
            "raw_noop_msgs_s": round(max(raw)), "ykafka_noop_msgs_s": round(max(ours)),
            "noop_ratio": round(max(ours) / max(raw), 3), "noop_ratio_median": round(statistics.median(ratios), 3),
            "noop_ratios": [round(r, 3) for r in ratios], "raw_default_noop_msgs_s": round(max(raw_default)),
            "noop_ratio_vs_default": round(max(ours) / max(raw_default), 3),
            "raw_poll_msgs_s": round(max(r for r, _ in polls)), "ykafka_poll_msgs_s": round(max(o for _, o in polls)),
            "poll_ratio_median": round(statistics.median(poll_ratios), 3),
            "poll_ratios": [round(r, 3) for r in poll_ratios],
        }
        print("RESULT " + json.dumps({**result, "broker": args.broker}), flush=True)
    finally:
        if stack is not None:
            stack.down()


if __name__ == "__main__":
    main()
