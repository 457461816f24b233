"""Profile driver for the traced produce path (not a benchmark: no RESULT, not run by the suite).

Sends ``--messages`` through one producer (``raw`` confluent-kafka, or ``ykafka.Producer`` with trace ``off``
/ ``full`` = 100 %) in the canonical loop of bench/_loop.py, then waits until every trace event is
delivered. Meant to run under callgrind, whose instruction counts do not move with the other work on the
machine; run it at two sizes and divide the difference by the size difference to get instructions per
message, per thread (the producing thread, the trace sink thread, librdkafka's threads)::

    python bench/_trace_profile.py --broker-only &            # prints the bootstrap, keeps a broker up
    for n in 10000 30000; do
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.full.$n.%p \\
        python bench/_trace_profile.py --bootstrap 127.0.0.1:PORT --mode full --messages $n --sink-interval 2
    done
    python bench/_trace_profile.py --summarize /tmp/cg.full.10000.* /tmp/cg.full.30000.*
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def summarize(paths: list[str]) -> None:
    """Instructions per thread of each callgrind output file (``totals:`` / ``summary:`` line)."""
    for path in sorted(paths):
        text = Path(path).read_text(errors="replace")
        found = re.search(r"^(?:totals|summary):\s+(\d+)", text, re.M)
        print(f"{path}: {int(found.group(1)) if found else 0:,} Ir")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("raw", "off", "full"), default="full")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--sink-interval", type=float, default=None,
                        help="the trace sink's drain interval in s (default 0.05); under callgrind, which runs ~40x "
                             "slower, 2.0 keeps as many events waiting per drain as a real run does")
    parser.add_argument("--broker-only", action="store_true", help="start a Tansu broker, print it, wait")
    parser.add_argument("--summarize", nargs="*", help="print the instruction totals of callgrind files")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    if args.broker_only:
        from bench._broker import hold_broker

        hold_broker("trace-profile")
        return
    from confluent_kafka import Producer

    from bench._loop import produce_loop
    from ykafka import Producer as YProducer
    from ykafka.logs import configure

    configure("warning")
    if args.sink_interval is not None:
        from ykafka.sink import EventSink

        queue_max, batch_max, _interval, *rest = EventSink.__init__.__defaults__  # type: ignore[misc]
        EventSink.__init__.__defaults__ = (queue_max, batch_max, args.sink_interval, *rest)
    common = {"bootstrap.servers": args.bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "log_level": 3}
    if args.mode == "raw":
        producer = Producer({**common, "acks": "all", "enable.idempotence": True})
    else:
        producer = YProducer({**common, "trace.enabled": args.mode == "full", "trace.sample.rate": 1.0})
    value = b"x" * args.size
    topic = f"trace-profile-{args.mode}"
    produce_loop(producer, topic, 2000, value)  # topic state, connections, first trace batch
    rate = produce_loop(producer, topic, args.messages, value)
    if args.mode != "raw":
        producer.tracer().flush(60)
        stats = producer.tracer().stats()
        producer.close()
        print(f"{args.mode}: {rate:,.0f} msgs/s, trace {stats}")
    else:
        print(f"{args.mode}: {rate:,.0f} msgs/s")


if __name__ == "__main__":
    main()
