"""Simulated ykafka clients for rollout tests and bench/rollout.py: each does over HTTP what the SDK does for a
rollout — long-polls the namespace (one watcher for the fleet), fetches its config with its instance id
(``ykafkaInstance``) when the namespace changes, and reports the release key it holds with a ``health`` block
of growing counters — without a broker, so a thousand fit on the test machine."""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from metaserver.rollouts import targets as tg
from ykafka import Producer, signing
from ykafka.errors import ThrottledError


@dataclass
class SimClient:
    client_id: str
    held: str = ""
    sent: float = 0.0
    errors: float = 0.0
    applied_at: dict[str, float] = field(default_factory=dict)  # release key -> first time held


class SimFleet:
    """``n`` clients of one app on one topic; ``bad_key``: clients holding a value of it fail their sends."""

    def __init__(self, metaserver: str, configcenter: str, cc_app: str, app_id: str, secret: str, topic: str,
                 ids: list[str], beat_s: float = 1.0, workers: int = 8, degrade: tuple[str, str] | None = None) -> None:
        self.metaserver, self.configcenter, self.cc_app = metaserver.split(",")[0], configcenter, cc_app
        self.urls = metaserver.split(",")
        self.app_id, self.topic, self.beat_s = app_id, topic, beat_s
        self.namespace = f"ykafka.topic.{topic}"
        self.clients = [SimClient(cid) for cid in ids]
        self.degrade = degrade
        self.values: dict[str, dict[str, str]] = {}
        self.session = requests.Session()
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=workers * 2))
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="sim")
        self._stop = threading.Event()
        self._changed = threading.Event()
        self.reports = 0
        key = signing.derive_key(app_id, secret)
        raw = json.dumps({"app_id": app_id, "client_id": f"{app_id}-sim", "ip": "127.0.0.1"}).encode()
        headers = signing.signed_headers(app_id, key, "POST", "/v1/auth/grant", raw)
        resp = self.session.post(self.metaserver + "/v1/auth/grant", data=raw, timeout=10,
                                 headers={**headers, "Content-Type": "application/json"})
        resp.raise_for_status()
        self.token = resp.json()["token"]
        self._threads = [threading.Thread(target=self._watch, daemon=True),
                         threading.Thread(target=self._beat, daemon=True)]

    def start(self) -> SimFleet:
        self._fetch_all()
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        self.pool.shutdown(wait=True)

    # --- config: what the SDK's long poll + fetch does ------------------------------------------------

    def _watch(self) -> None:
        notification_id = -1
        while not self._stop.is_set():
            q = json.dumps([{"namespaceName": self.namespace, "notificationId": notification_id}])
            try:
                resp = self.session.get(f"{self.configcenter}/notifications/v2", timeout=70, params={
                    "appId": self.cc_app, "cluster": "default", "notifications": q})
            except requests.RequestException:
                time.sleep(0.2)
                continue
            if resp.status_code == 200:
                notification_id = max(n["notificationId"] for n in resp.json())
                self._fetch_all()

    def _fetch(self, c: SimClient) -> None:
        path = f"/configs/{quote(self.cc_app)}/default/{quote(self.namespace)}"
        resp = self.session.get(self.configcenter + path, timeout=10,
                                params={"ip": "127.0.0.1", "ykafkaInstance": c.client_id})
        if resp.status_code != 200:
            return
        body = resp.json()
        key = str(body.get("releaseKey") or "")
        if key != c.held:
            c.held = key
            self.values[c.client_id] = dict(body.get("configurations") or {})
            c.applied_at.setdefault(key, time.time())
            self._report(c)  # the SDK reports right after a change

    def _fetch_all(self) -> None:
        list(self.pool.map(self._fetch, self.clients))

    # --- reports -------------------------------------------------------------------------------------

    def _report(self, c: SimClient) -> None:
        body: dict[str, Any] = {
            "client_id": c.client_id, "app_id": self.app_id, "ip": "127.0.0.1", "hostname": "sim", "pid": 1,
            "language": "python", "versions": {"ykafka": "0.1.0", "confluent_kafka": "2.6.1", "librdkafka": "2.6.1"},
            "role": "producer", "topics": [self.topic], "cluster": "dc-a",
            "config_release_keys": {self.namespace: c.held} if c.held else {}, "state": "running",
            "extra": {"health": {"send.msgs": c.sent, "send.errors": c.errors, "send.p99_ms": 5.0,
                                 "throttled": 0}}}
        for url in self.urls:  # fail over like the SDK's GrantClient
            try:
                self.session.post(url + "/v1/clients/report", json=body, timeout=5,
                                  headers={"Authorization": f"Bearer {self.token}"})
                self.reports += 1
                return
            except requests.RequestException:
                continue

    def _tick(self, c: SimClient, dt: float) -> None:
        bad = self.degrade is not None and self.values.get(c.client_id, {}).get(self.degrade[0]) == self.degrade[1]
        c.sent += 100 * dt
        if bad:
            c.errors += 50 * dt
        self._report(c)

    def _beat(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.beat_s):
            now = time.monotonic()
            dt, last = now - last, now
            list(self.pool.map(self._tick, self.clients, [dt] * len(self.clients)))


class Steady:
    """A ykafka Producer sending ~100 messages/s; a send refused by a rate limit (ThrottledError) is not sent
    and not counted, as an application would retry it later."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.producer = Producer(conf)
        self.topic, self.sent, self.delivered, self.throttled = topic, 0, 0, 0
        self.failed: list[str] = []
        self.prefix = uuid.uuid4().hex[:4]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def client_id(self) -> str:
        return str(self.producer.runtime.client_id)

    def _cb(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, f"{self.prefix}:{self.sent}".encode(), self.prefix.encode(),
                                      on_delivery=self._cb)
                self.sent += 1
            except ThrottledError:
                self.throttled += 1
            self.producer.poll(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)
        self.producer.close()


def ids_in_bands(namespace: str, app_id: str, bands: list[tuple[float, float]]) -> list[str]:
    """One client id per band (lo, hi): its bucket at the namespace is in [lo, hi)."""
    out = []
    for lo, hi in bands:
        while True:
            cid = f"{app_id}-{uuid.uuid4().hex[:8]}"
            if lo <= tg.bucket(namespace, cid) < hi:
                out.append(cid)
                break
    return out


def in_force(producer: Producer, topic: str, key: str) -> Any:
    """A key's value in force for ``topic`` (None while the producer rebuilds the topic's client)."""
    return (producer.in_force(topic) or {}).get(key)
