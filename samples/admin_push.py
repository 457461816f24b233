"""Operator walk-through: create an app, give it an ACL, push a hot-config value, read it back.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``) it needs nothing else:

    python samples/admin_push.py [--metaserver URL] [--token ADMIN_TOKEN] [--configcenter URL]
                                 [--topic orders] [--acks 1]

What a client of the app sees is exactly what the config service now serves for
``ykafka.topic.<topic>``: the script prints it from the config service's ``/configs`` endpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

import requests

from ykafka.admin import AdminClient, AdminError
from ykafka.oneline import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metaserver", default=os.environ.get("YKAFKA_METASERVER", "http://127.0.0.1:7070"))
    parser.add_argument("--token", default=os.environ.get("YKAFKA_ADMIN_TOKEN"))
    parser.add_argument("--configcenter", default=os.environ.get("YKAFKA_CONFIGCENTER", "http://127.0.0.1:8080"))
    parser.add_argument("--apollo-app-id", default="ykafka", help="the MetaServer's --apollo-app-id")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--acks", default="1")
    args = parser.parse_args()
    if not args.token:
        parser.error("--token or YKAFKA_ADMIN_TOKEN is required")

    admin = AdminClient(args.metaserver, args.token, operator="samples/admin_push")
    app_id = f"sample-{uuid.uuid4().hex[:6]}"
    try:
        created = admin.create_app(app_id, description="created by samples/admin_push.py")
        print(f"app {app_id} created; secret (shown once): {created['secret']}")
        acl = admin.set_acl(app_id, produce=[f"{args.topic}*"], consume=[f"{args.topic}*"], group=[f"{app_id}-*"])
        print(f"ACL: {acl}")

        scope = f"topic:{args.topic}"
        preview = admin.push_config(scope, {"producer.acks": args.acks}, dry_run=True)
        print(f"dry run of {scope}: {preview['changes'] or 'no change'}")
        pushed = admin.push_config(scope, {"producer.acks": args.acks}, comment="sample push")
        print(f"released {pushed['namespace']}: {pushed['release']}")

        try:
            admin.push_config(scope, {"producer.acks": "2"})
        except AdminError as exc:
            print(f"an invalid value is refused before it reaches the config center: {exc}")
    except AdminError as exc:
        print(f"MetaServer refused: {exc}", file=sys.stderr)
        return 1

    url = f"{args.configcenter.rstrip('/')}/configs/{args.apollo_app_id}/default/{pushed['namespace']}"
    served = requests.get(url, timeout=10)
    served.raise_for_status()
    configurations = served.json()["configurations"]
    print(f"config service serves {pushed['namespace']}: {configurations}")
    expected = "all" if args.acks == "-1" else args.acks
    if configurations.get("producer.acks") != expected:
        print("unexpected value served", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
