"""Profile driver for one ``Producer.produce`` call shape (not a benchmark: no RESULT, not run by the suite).

One producer in local mode sends ``--batches`` batches of 5,000 messages (``produce(topic, value, key=…,
on_delivery=cb)``, then ``flush``) after a warm-up. Meant to run under callgrind, whose instruction counts do
not move with the other work on the machine: run it with 1 and 11 batches and divide the difference of the
producing thread's totals by 50,000 to get instructions per message (docs/benchmarks.md, "The per-topic send
chain")::

    python bench/_trace_profile.py --broker-only &            # prints the bootstrap, keeps a broker up
    for b in 1 11; do
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.dr.$b.%p \\
        python bench/_produce_profile.py --bootstrap 127.0.0.1:PORT --mode dr --batches $b
    done
    python bench/_trace_profile.py --summarize /tmp/cg.dr.*-01

Modes: ``plain`` (disaster recovery off, no trace), ``dr`` (the default: DR on), ``dr-key`` (keyed sends),
``trace`` (trace at 100 %, DR off), ``dr-trace``. Without valgrind it prints the best ns per call.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ykafka import Producer  # noqa: E402
from ykafka.logs import configure  # noqa: E402

BATCH = 5000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--mode", choices=("plain", "dr", "dr-key", "trace", "dr-trace"), default="dr")
    parser.add_argument("--batches", type=int, default=25)
    args = parser.parse_args()
    configure("warning")
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                            "log_level": 3, "queue.buffering.max.messages": 2_000_000,
                            "ykafka.report.enabled": False, "ykafka.cache.dir": tempfile.mkdtemp()}
    if not args.mode.startswith("dr"):
        conf["ykafka.dr.enabled"] = False
    if "trace" in args.mode:
        conf.update({"trace.enabled": True, "trace.sample.rate": 1.0})
    topic, value = f"produce-profile-{args.mode}", b"x" * 100
    keys = [b"k%d" % (i % 10) if args.mode == "dr-key" else None for i in range(BATCH)]

    def delivered(err: Any, msg: Any) -> None:
        pass

    with Producer(conf) as producer:
        produce = producer.produce
        for key in keys[:3000]:  # the topic's state, connections, the first trace batch
            produce(topic, value, key=key, on_delivery=delivered)
            producer.poll(0)
        producer.flush(30)
        best = float("inf")
        for _ in range(args.batches):
            start = time.perf_counter()
            for key in keys:
                produce(topic, value, key=key, on_delivery=delivered)
            best = min(best, time.perf_counter() - start)
            producer.flush(30)
    sys.stdout.write(f"{args.mode}: best {best / BATCH * 1e9:,.0f} ns per produce call\n")


if __name__ == "__main__":
    main()
