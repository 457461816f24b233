"""One producer process of an app with dual-DC routing, driven line by line on stdin (the multi-process failback
test): ``python -m tests.dr_sync_child BOOTSTRAP_A BOOTSTRAP_B SPILL_DIR TOPIC NAME``.

Commands: ``standby`` / ``primary`` (in-process switch of dc-a's writes), ``send FIRST COUNT`` (values
``NAME:<i>``, keyed, flushed), ``idle`` (wait until the failback sync finished). Each answers one line,
``OK <detail>``. Logs go to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.dr_fixtures import make_engine
from ykafka.dr.engine import RouteSpec
from ykafka.logs import configure


def main() -> int:
    bootstrap_a, bootstrap_b, spill, topic, name = sys.argv[1:6]
    configure("info")
    engine = make_engine({"dc-a": bootstrap_a, "dc-b": bootstrap_b}, RouteSpec("dc-a", "dc-b"), Path(spill))
    print("OK ready", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] in ("standby", "primary"):
                engine.switch("dc-a", words[0])
                print(f"OK {words[0]}", flush=True)
            elif words[0] == "send":
                first, count = int(words[1]), int(words[2])
                for i in range(first, first + count):
                    engine.produce(topic, f"{name}:{i}".encode(), key=f"k{i % 8}".encode())
                left = engine.flush(30)
                print(f"OK sent {count} left={left}", flush=True)
            elif words[0] == "idle":
                ok = engine.wait_idle(90)
                print(f"OK idle={ok} {json.dumps(engine.status()['sync'])}", flush=True)
            elif words[0] == "quit":
                break
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
