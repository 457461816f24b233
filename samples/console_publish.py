"""The console's closed loop from a script: log in, preview a hot-config change (diff + the live clients it
reaches), publish it, and wait until the console shows every reached client "applied".

    source .ykafka/dev.env && python samples/console_publish.py [--topic orders] [--linger 25]

Uses YKAFKA_CONSOLE_USER / YKAFKA_CONSOLE_PASSWORD (the dev stack's admin) or, with YKAFKA_ADMIN_TOKEN,
creates an operator user for itself. A ykafka Producer writes to the topic meanwhile, so there is a live
client for the change to reach.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import time
import uuid

import requests

from ykafka import Producer


def console_login(base: str) -> tuple[requests.Session, str]:
    user, password = os.environ.get("YKAFKA_CONSOLE_USER"), os.environ.get("YKAFKA_CONSOLE_PASSWORD")
    if not (user and password):
        user, password = f"sample-{uuid.uuid4().hex[:6]}", secrets.token_urlsafe(12)
        resp = requests.post(base + "/v1/admin/users", json={"username": user, "password": password,
                                                             "role": "operator"}, timeout=10,
                             headers={"Authorization": f"Bearer {os.environ['YKAFKA_ADMIN_TOKEN']}"})
        resp.raise_for_status()
    session = requests.Session()
    page = session.post(base + "/console/login", data={"username": user, "password": password}, timeout=10)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    if page.status_code != 200 or not csrf:
        raise SystemExit(f"login failed ({page.status_code})")
    return session, csrf.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topic", default=f"console-sample-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--linger", type=int, default=25)
    args = parser.parse_args()
    base = os.environ["YKAFKA_METASERVER"].rstrip("/")
    conf = {"ykafka.cache.dir": os.environ.get("YKAFKA_CACHE_DIR", ".ykafka/sample-cache")}
    producer = Producer(conf)
    producer.produce(args.topic, b"hello", b"k")
    producer.flush(30)
    session, csrf = console_login(base)
    scope = f"topic:{args.topic}"
    panel = f"{base}/console/config/panel?scope={scope}"
    deadline = time.monotonic() + 30
    while 'data-client="' not in session.get(panel, timeout=10).text:  # the producer's report names the topic
        if time.monotonic() > deadline:
            raise SystemExit("the producer never reported the topic")
        producer.produce(args.topic, b"hello", b"k")
        producer.poll(0.2)
    form = {"csrf": csrf, "scope": scope, "changes": f"producer.linger.ms={args.linger}", "ips": "",
            "comment": "sample"}
    preview = session.post(base + "/console/config/preview", data=form, timeout=30)
    reach = re.findall(r'<li data-client="([^"]+)"', preview.text)
    print(f"preview: producer.linger.ms -> {args.linger}; reaches {len(reach)} live client(s): {', '.join(reach)}")
    published = session.post(base + "/console/config/publish", data=form, timeout=30, allow_redirects=False)
    if published.status_code != 303:
        raise SystemExit(f"publish failed ({published.status_code})")
    start = time.monotonic()
    while time.monotonic() - start < 30:
        statuses = re.findall(r'data-client="([^"]+)" data-status="([a-z]+)"', session.get(panel, timeout=10).text)
        if statuses and all(state == "applied" for _, state in statuses):
            print(f"all {len(statuses)} applied after {(time.monotonic() - start) * 1000:.0f} ms")
            break
        producer.produce(args.topic, b"hello", b"k")
        producer.poll(0.05)
    else:
        raise SystemExit("not every client applied the change within 30 s")
    producer.close()
    print("OK")


if __name__ == "__main__":
    main()
