"""Profile driver for ``Consumer.run``'s per-message dispatch (not a benchmark: no RESULT, not run by the suite).

Consumes ``--messages`` already on a topic with a fresh group from the earliest offset, through ``Consumer.run``
with a no-op handler (``ykafka``: bench/consumer_scaling.py's settings, ordering ``partition``, 4 workers,
metrics on) or a raw confluent-kafka ``consume(500)`` loop calling the same no-op (``raw``, with the fetch
setting ``Consumer.run`` applies). Meant to run under callgrind, whose instruction counts do not move with the
other work on the machine; run it at two sizes and divide the difference by the size difference to get
instructions per message, per thread::

    python bench/_consume_profile.py --broker-only &          # prints 127.0.0.1:PORT, keeps a broker up
    python bench/_consume_profile.py --bootstrap 127.0.0.1:PORT --fill 120000
    for n in 20000 100000; do
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.consume.$n.%p \\
        python bench/_consume_profile.py --bootstrap 127.0.0.1:PORT --mode ykafka --messages $n
    done
    python bench/_consume_profile.py --per-message 20000 100000 /tmp/cg.consume.*
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "consume-profile"


def per_message(small: int, large: int, paths: list[str]) -> None:
    """Instructions per message: (total at ``large`` - total at ``small``) / (large - small), per thread and summed
    over the Python threads (the main one and those ``threading`` started) and over librdkafka's.

    Thread numbers (the ``-NN`` of the file names) follow start order, which can differ between two runs, so the
    sums are taken per run, by each file's kind. A librdkafka broker thread's share depends on how far it had
    prefetched when the run ended: the Python threads' sum is the figure to compare."""
    totals: dict[int, dict[int, int]] = defaultdict(dict)
    kinds: dict[tuple[int, int], str] = {}
    sums: dict[tuple[int, str], int] = defaultdict(int)
    for path in paths:
        found = re.match(r".*\.(\d+)\.\d+-(\d+)$", path)
        if not found:
            continue
        size, thread = int(found.group(1)), int(found.group(2))
        text = Path(path).read_text(errors="replace")
        total = re.search(r"^(?:totals|summary):\s+(\d+)", text, re.M)
        totals[thread][size] = int(total.group(1)) if total else 0
        kind = "python" if thread == 1 or "pythread_wrapper" in text else "librdkafka"
        kinds[size, thread] = kind
        sums[size, kind] += totals[thread][size]
    for thread in sorted(totals):
        both = totals[thread]
        if small in both and large in both:
            each = (both[large] - both[small]) / (large - small)
            kind = "/".join(sorted({kinds[small, thread], kinds[large, thread]}))
            print(f"thread {thread:>2} {kind:<17}: {both[small]:>14,} -> {both[large]:>14,} Ir {each:>7,.0f} a message")
    for kind in ("python", "librdkafka"):
        each = (sums[large, kind] - sums[small, kind]) / (large - small)
        print(f"{kind} threads: {sums[small, kind]:,} -> {sums[large, kind]:,} Ir, {each:,.0f} instructions a message")


def _noop(_msg: Any) -> None:
    return None


def consume_raw(bootstrap: str, count: int) -> None:
    from confluent_kafka import Consumer as RawConsumer

    from bench.consumer_scaling import RUN_FETCH, raw_conf

    consumer = RawConsumer(raw_conf(bootstrap, **RUN_FETCH))
    consumer.subscribe([TOPIC])
    noop, got = _noop, 0
    try:
        while got < count:
            for msg in consumer.consume(min(500, count - got), 1.0):
                if msg.error() is None:
                    noop(msg)
                    got += 1
    finally:
        consumer.close()


def consume_ykafka(bootstrap: str, count: int) -> None:
    """The raw loop's no-op as the handler; this thread watches ``engine.processed`` (updated per task), so the
    handler does no counting the raw loop does not do. Both sizes overshoot ``count`` by about a batch alike."""
    from bench.consumer_scaling import consumer_conf
    from ykafka.consumer import Consumer

    consumer = Consumer(consumer_conf(bootstrap))
    thread = threading.Thread(target=consumer.run, args=(_noop, [TOPIC]), daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while consumer.engine.processed < count:
        if time.monotonic() > deadline:
            raise RuntimeError("the consumer did not handle every message")
        time.sleep(0.01)
    consumer.stop()
    thread.join(120)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("raw", "ykafka"), default="ykafka")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--fill", type=int, default=0, help="create the topic and put this many messages on it")
    parser.add_argument("--broker-only", action="store_true", help="start a Tansu broker, print it, wait")
    parser.add_argument("--per-message", nargs="+", metavar=("SMALL LARGE", "FILE"),
                        help="two sizes, then callgrind files: instructions per message per thread")
    args = parser.parse_args()
    if args.per_message:
        per_message(int(args.per_message[0]), int(args.per_message[1]), args.per_message[2:])
        return
    if args.broker_only:
        from bench._broker import hold_broker

        hold_broker("consume-profile")
        return
    from ykafka.logs import configure

    configure("warning")
    if args.fill:
        from bench._broker import fill

        fill(args.bootstrap, TOPIC, args.fill, partitions=16)
    elif args.mode == "raw":
        consume_raw(args.bootstrap, args.messages)
    else:
        consume_ykafka(args.bootstrap, args.messages)


if __name__ == "__main__":
    main()
