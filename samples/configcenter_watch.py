"""Publish a hot-config change through Apollo's Open API and watch it arrive through a long poll.

Works against the embedded config center (`ykafka dev up` or `python -m metaserver.configcenter serve`) and
against a real Apollo (point --url at the config service and --portal-url at the portal).

    python samples/configcenter_watch.py [--url http://127.0.0.1:8080] [--token TOKEN]
        [--app-id ykafka-sample] [--namespace ykafka.global] [--key trace.sample.rate] [--value 0.25]

Defaults: --url from YKAFKA_CONFIGCENTER, --token from YKAFKA_CC_OPENAPI_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any
from urllib.parse import quote, urlencode

import requests

from metaserver.configcenter.signature import build_headers
from ykafka.oneline import run


class OpenApi:
    """The four Open API calls a publisher needs (paths and bodies exactly as in Apollo's docs)."""

    def __init__(self, portal: str, token: str, operator: str = "sample") -> None:
        self.portal = portal.rstrip("/")
        self.operator = operator
        self.http = requests.Session()
        self.http.headers.update({"Authorization": token, "Content-Type": "application/json;charset=UTF-8"})

    def _call(self, method: str, path: str, body: Any = None, **params: str) -> requests.Response:
        return self.http.request(method, f"{self.portal}/openapi/v1{path}", params=params or None,
                                 data=json.dumps(body) if body is not None else None, timeout=10)

    def ensure_namespace(self, app_id: str, namespace: str) -> None:
        if self._call("GET", f"/apps/{app_id}").status_code != 200:
            self._call("POST", "/apps", {"app": {"appId": app_id, "name": app_id, "orgId": "ykafka",
                                                 "orgName": "ykafka", "ownerName": self.operator},
                                         "admins": [self.operator]}).raise_for_status()
        if namespace != "application" and self._call("GET", f"/apps/{app_id}/appnamespaces/{namespace}").status_code \
                != 200:
            self._call("POST", f"/apps/{app_id}/appnamespaces", {
                "name": namespace, "appId": app_id, "format": "properties", "isPublic": False,
                "comment": "created by samples/configcenter_watch.py",
                "dataChangeCreatedBy": self.operator}).raise_for_status()

    def publish(self, app_id: str, namespace: str, key: str, value: str) -> dict[str, Any]:
        ns = f"/envs/DEV/apps/{app_id}/clusters/default/namespaces/{namespace}"
        self._call("PUT", f"{ns}/items/{quote(key, safe='')}",
                   {"key": key, "value": value, "dataChangeLastModifiedBy": self.operator,
                    "dataChangeCreatedBy": self.operator}, createIfNotExists="true").raise_for_status()
        resp = self._call("POST", f"{ns}/releases", {"releaseTitle": time.strftime("%Y%m%d%H%M%S"),
                                                     "releaseComment": f"set {key}", "releasedBy": self.operator})
        resp.raise_for_status()
        release: dict[str, Any] = resp.json()
        return release


class ConfigClient:
    """What an Apollo client does: fetch `/configs`, long-poll `/notifications/v2` (signed if a secret is set)."""

    def __init__(self, url: str, app_id: str, secret: str | None) -> None:
        self.url = url.rstrip("/")
        self.app_id = app_id
        self.secret = secret

    def _get(self, path: str, timeout: float) -> requests.Response:
        headers = build_headers(self.app_id, path, self.secret) if self.secret else {}
        return requests.get(self.url + path, headers=headers, timeout=timeout)

    def config(self, namespace: str) -> dict[str, Any] | None:
        resp = self._get(f"/configs/{self.app_id}/default/{namespace}", timeout=10)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        body: dict[str, Any] = resp.json()
        return body

    def poll(self, namespace: str, notification_id: int) -> list[dict[str, Any]]:
        query = urlencode({"appId": self.app_id, "cluster": "default", "notifications": json.dumps(
            [{"namespaceName": namespace, "notificationId": notification_id}])}, quote_via=quote)
        resp = self._get(f"/notifications/v2?{query}", timeout=90)
        if resp.status_code == 304:
            return []
        resp.raise_for_status()
        notes: list[dict[str, Any]] = resp.json()
        return notes


def main() -> int:
    parser = argparse.ArgumentParser(description="publish a change and watch it arrive through a long poll")
    parser.add_argument("--url", default=os.environ.get("YKAFKA_CONFIGCENTER", "http://127.0.0.1:8080"),
                        help="config service URL (env YKAFKA_CONFIGCENTER)")
    parser.add_argument("--portal-url", default=None, help="Open API (portal) URL; default: --url")
    parser.add_argument("--token", default=os.environ.get("YKAFKA_CC_OPENAPI_TOKEN", ""),
                        help="Open API token (env YKAFKA_CC_OPENAPI_TOKEN)")
    parser.add_argument("--app-id", default="ykafka-sample")
    parser.add_argument("--namespace", default="ykafka.global")
    parser.add_argument("--key", default="trace.sample.rate")
    parser.add_argument("--value", default=None, help="default: a value derived from the clock")
    parser.add_argument("--secret", default=None, help="the app's access-key secret, if it has one")
    args = parser.parse_args()
    if not args.token:
        parser.error("--token (or YKAFKA_CC_OPENAPI_TOKEN) is required")
    value = args.value or f"0.{int(time.time()) % 100:02d}"

    openapi = OpenApi(args.portal_url or args.url, args.token)
    client = ConfigClient(args.url, args.app_id, args.secret)
    openapi.ensure_namespace(args.app_id, args.namespace)

    current = client.config(args.namespace)
    notification_id = -1
    if current is not None:
        print(f"current {args.key} = {current['configurations'].get(args.key)!r}")
        notification_id = client.poll(args.namespace, -1)[0]["notificationId"]
    else:
        print(f"{args.app_id}/{args.namespace} has no release yet")

    answer: list[list[dict[str, Any]]] = []
    watcher = threading.Thread(target=lambda: answer.append(client.poll(args.namespace, notification_id)))
    watcher.start()
    time.sleep(0.5)  # let the poll park on the server

    started = time.monotonic()
    release = openapi.publish(args.app_id, args.namespace, args.key, value)
    print(f"published release {release['id']}: {args.key} = {value!r}")
    watcher.join(timeout=95)
    if not answer or not answer[0]:
        print("the long poll ended without a notification", file=sys.stderr)
        return 1
    note = answer[0][0]
    fresh = client.config(args.namespace) or {}
    elapsed_ms = (time.monotonic() - started) * 1000
    print(f"long poll woke: {note['namespaceName']} notificationId={note['notificationId']}")
    print(f"fetched {args.key} = {fresh.get('configurations', {}).get(args.key)!r} "
          f"(releaseKey {fresh.get('releaseKey')}), {elapsed_ms:.0f} ms after publishing")
    return 0 if fresh.get("configurations", {}).get(args.key) == value else 1


if __name__ == "__main__":
    run(main)  # configuration, identity and connection errors: one line and exit 2 (--debug: traceback)
