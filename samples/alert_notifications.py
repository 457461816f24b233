"""Alert notifications set in the MetaServer (what the console's Notifications page saves) reach a receiver.

Against the dev stack (``ykafka dev up``; ``source .ykafka/dev.env``):

    python samples/alert_notifications.py [--metaserver URL] [--token ADMIN_TOKEN]

It starts a small HTTP receiver on 127.0.0.1, saves a webhook channel pointing at it and a route through
``PUT /v1/admin/notify`` (a bad section first, to show the refusal), raises one alert and resolves it through
the pipeline's alert manager with ``sinks.metaserver`` set (so it reads the section from the MetaServer),
prints what the receiver got, and puts the previous section back.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from pipeline.alerts import Alert, AlertConfig, AlertManager
from pipeline.store import Store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metaserver", default=os.environ.get("YKAFKA_METASERVER", "http://127.0.0.1:7070"))
    parser.add_argument("--token", default=os.environ.get("YKAFKA_ADMIN_TOKEN"))
    args = parser.parse_args()
    got: list[dict[str, Any]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"{args.metaserver.rstrip('/')}/v1/admin/notify"
    headers = {"Authorization": f"Bearer {args.token}", "X-Ykafka-Operator": "samples/alert_notifications"}
    before = requests.get(url + "?reveal=true", headers=headers, timeout=10).json()["config"]
    try:
        bad = requests.put(url, json={"body": "routes: [{channels: [pager]}]"}, headers=headers, timeout=10)
        print(f"refused ({bad.status_code}): {bad.json()['detail']}")
        section = {"channels": {"oncall": {"type": "webhook",
                                           "url": f"http://127.0.0.1:{server.server_address[1]}/hook"}},
                   "routes": [{"match": {"level": ["ERR", "OK"]}, "channels": ["oncall"]}]}
        saved = requests.put(url, json={"body": json.dumps(section)}, headers=headers, timeout=10)
        saved.raise_for_status()
        print(f"saved version {saved.json()['version']}: channel oncall, route level=ERR,OK -> oncall")
        with tempfile.TemporaryDirectory() as store:
            pipeline = AlertManager(Store(store), AlertConfig(sinks={
                "kafka": False, "metaserver": args.metaserver, "metaserver_token": args.token}))
            now = dt.datetime.now(dt.UTC)
            pipeline.process([Alert("consumer-lag", "ERR", "commits froze while the lag grew", {},
                                    topic="orders", group="billing")], ["consumer-lag"], now)
            pipeline.process([], ["consumer-lag"], now + dt.timedelta(minutes=1))  # it clears: "resolved"
        for body in got:
            print(f"receiver got: {body['status']} {body['rule']} {body['level']} topic {body['topic']}")
        return 0 if len(got) == 2 else 1
    finally:
        requests.put(url, json={"body": json.dumps(before)}, headers=headers, timeout=10)
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
