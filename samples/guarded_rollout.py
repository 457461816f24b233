"""A guarded rollout: four producers write to a P0 topic while a change that breaks a guard rule is refused and
a harmless one goes 25 % -> 100 % by itself, judged on what the producers report (docs/metaserver.md).

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``):

    python samples/guarded_rollout.py [--topic orders-rollout] [--bake 3]

It prints the refusal, each decision of the plan with the canary's and the untouched clients' figures, and
ends with ``OK`` once every producer runs with the new value and every message was acknowledged.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any

from ykafka import Producer
from ykafka.admin import AdminClient, AdminError
from ykafka.admin.topics import create_topic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metaserver", default=os.environ.get("YKAFKA_METASERVER", "http://127.0.0.1:7070"))
    parser.add_argument("--token", default=os.environ.get("YKAFKA_ADMIN_TOKEN"))
    parser.add_argument("--topic", default=f"orders-rollout-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--bake", type=float, default=3.0)
    args = parser.parse_args()
    if not args.token:
        parser.error("--token or YKAFKA_ADMIN_TOKEN is required")
    admin = AdminClient(args.metaserver, args.token, operator="samples/guarded_rollout")
    scope = f"topic:{args.topic}"
    admin.push_config(scope, {"topic.grade": "P0"})

    stop = threading.Event()
    acked = [0]
    sent = [0]
    producers = [Producer({"ykafka.client.id": f"rollout-sample-{uuid.uuid4().hex[:8]}"}) for _ in range(4)]
    first = producers[0]
    create_topic({"bootstrap.servers": first.runtime.cluster(first.route(args.topic)).bootstrap_servers},
                 args.topic, 3)

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1

    def produce(p: Producer) -> None:
        while not stop.is_set():
            p.produce(args.topic, b"order", on_delivery=on_delivery)
            sent[0] += 1
            p.poll(0.02)

    lingers: list[Any] = []
    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in producers]
    for t in threads:
        t.start()
    try:
        time.sleep(3)  # the producers report the topic
        try:
            admin.start_rollout(scope, {"producer.acks": "1"}, steps=[25, 100], bake_s=args.bake)
            print("unexpected: the guard rule did not refuse producer.acks=1")
            return 1
        except AdminError as exc:
            for rule, text in exc.errors.items():
                print(f"refused: {rule}: {text}")
        # a laptop or CI box under load: judge latency only above 1 s (errors and rejections as usual)
        plan = admin.start_rollout(scope, {"producer.linger.ms": 20}, steps=[25, 100], bake_s=args.bake,
                                   thresholds={"p99_floor_ms": 1000})
        print(f"plan {plan['id']}: producer.linger.ms=20 to {plan['steps']} % with {args.bake:g} s bakes")
        deadline, shown = time.time() + 120, 0
        while time.time() < deadline:
            plan = admin.rollout(plan["id"])
            for d in plan["decisions"][shown:]:
                ev = d.get("evidence") or {}
                figures = (f" canary {ev['canary']['clients']} clients {ev['canary']['send_error_rate']:.2%} errors,"
                           f" untouched {ev['control']['clients']} clients {ev['control']['send_error_rate']:.2%}"
                           if isinstance(ev.get("canary"), dict) else "")
                print(f"  {d['action']}: {d['reason']}{figures}")
            shown = len(plan["decisions"])
            if plan["state"] not in ("running", "paused"):
                break
            time.sleep(0.5)
        if plan["state"] != "done":
            print(f"plan ended {plan['state']}")
            return 1
        def linger(p: Producer) -> Any:
            # in_force is None between a change dropping the topic's cached settings and the next send
            return (p.in_force(args.topic) or {}).get("producer.linger.ms")

        deadline = time.time() + 30
        while time.time() < deadline and not all(linger(p) == 20 for p in producers):
            time.sleep(0.2)
        lingers = [linger(p) for p in producers]
        print(f"linger.ms in force: {lingers}")
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for p in producers:
            p.flush(30)
            p.close()
    print(f"sent {sent[0]}, acknowledged {acked[0]}")
    ok = acked[0] == sent[0] and lingers == [20] * len(producers)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
