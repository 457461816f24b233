"""Keep producing through a control-plane outage: stop the config service a Producer is parked on and one
MetaServer, push a hot-config change through the survivors, and watch the running Producer apply it.

Needs the replicated dev stack (two config services and two MetaServers on shared databases):

    ykafka dev up --replicas 2 && source .ykafka/dev.env
    python samples/controlplane_failover.py [--topic cp-demo] [--seconds 8] [--rate 200] [--no-restart]

It stops the instances with ``ykafka dev stop`` (the stack's settings come from the same environment and
``configs/dev.yaml`` as for ``ykafka dev up``) and starts them again at the end unless ``--no-restart``.
The last line is ``OK`` when every message was acknowledged and the change was applied during the outage.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from ykafka import Producer
from ykafka.admin.client import AdminClient
from ykafka.devstack import replica_name
from ykafka.endpoints import parse_urls
from ykafka.logs import configure
from ykafka.oneline import run


def dev(*args: str) -> str:
    """``ykafka dev ...`` as a user types it; its one-line answer."""
    done = subprocess.run([sys.executable, "-m", "ykafka.cli", "dev", *args], capture_output=True, text=True,
                          timeout=120)
    if done.returncode:
        raise SystemExit(f"ykafka dev {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default=f"cp-demo-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long to produce in all")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--no-restart", action="store_true", help="leave the stopped instances stopped")
    args = parser.parse_args()
    configure("warning")
    configcenters = parse_urls(os.environ.get("YKAFKA_CONFIGCENTER_URL", ""))
    metaservers = parse_urls(os.environ.get("YKAFKA_METASERVER", ""))
    if len(configcenters) < 2 or len(metaservers) < 2:
        print("needs two config services and two MetaServers: `ykafka dev up --replicas 2` and "
              "`source .ykafka/dev.env`", file=sys.stderr)
        return 2

    producer = Producer({})
    counts = {"sent": 0, "acked": 0, "failed": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        with lock:
            counts["failed" if err is not None else "acked"] += 1

    def produce() -> None:
        started = time.monotonic()
        while not stop.is_set():
            producer.produce(args.topic, f"m-{counts['sent']}".encode(), f"k-{counts['sent'] % 8}".encode(),
                             on_delivery=on_delivery)
            counts["sent"] += 1
            producer.poll(0)
            time.sleep(max(0.0, counts["sent"] / args.rate - (time.monotonic() - started)))

    worker = threading.Thread(target=produce, name="produce", daemon=True)
    worker.start()
    time.sleep(min(2.0, args.seconds / 4))

    assert producer.runtime.apollo is not None  # not local mode: the identity came from dev.env
    parked = producer.runtime.apollo.url
    names = [replica_name("configcenter", configcenters.index(parked)), "metaserver"]
    print(f"producing to {args.topic} at {args.rate:g} msg/s; the producer's long poll is parked on {parked}")
    print(dev("stop", *names))
    outage = time.monotonic()

    before = producer.applied_config(args.topic)["producer.linger.ms"]
    wanted = 7 if before != 7 else 9
    admin = AdminClient(",".join(metaservers), os.environ.get("YKAFKA_ADMIN_TOKEN", ""))
    pushed = admin.push_config(f"topic:{args.topic}", {"producer.linger.ms": wanted})
    print(f"pushed producer.linger.ms={wanted} through {admin.url} (release {pushed['release']})")
    applied_after = None
    while time.monotonic() - outage < 30:
        if producer.applied_config(args.topic)["producer.linger.ms"] == wanted:
            applied_after = time.monotonic() - outage
            break
        time.sleep(0.05)
    moved_to = producer.runtime.apollo.url
    print(f"applied by the running producer {applied_after:.2f} s after the stop; its long poll moved to {moved_to}"
          if applied_after is not None else "the change did not arrive within 30 s")

    time.sleep(max(0.0, args.seconds - (time.monotonic() - outage) - min(2.0, args.seconds / 4)))
    stop.set()
    worker.join()
    left = producer.close()
    print(f"sent {counts['sent']}, acknowledged {counts['acked']}, failed {counts['failed']}, {left} left at close")
    if not args.no_restart:
        print(dev("start", *names))
    ok = applied_after is not None and moved_to != parked and counts["acked"] == counts["sent"] and left == 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
