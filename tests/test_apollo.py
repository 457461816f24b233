"""The Apollo protocol client against the real (embedded) config service."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.sdk_fixtures import wait_until
from tests.support import ConfigService, start_config_service
from ykafka.apollo import ApolloClient, ApolloError, NamespaceConfig
from ykafka.devstack import free_port


class Updates:
    def __init__(self) -> None:
        self.items: list[NamespaceConfig] = []
        self.lock = threading.Lock()

    def __call__(self, config: NamespaceConfig) -> None:
        with self.lock:
            self.items.append(config)

    def latest(self, ns: str) -> NamespaceConfig | None:
        with self.lock:
            found = [c for c in self.items if c.namespace == ns]
        return found[-1] if found else None


def _ns() -> str:
    return f"ykafka.topic.t-{uuid.uuid4().hex[:8]}"


def _client(svc: ConfigService, updates: Updates, cache: Path | None = None, **kw: float) -> ApolloClient:
    return ApolloClient(svc.url, "ykafka", "default", "127.0.0.1", cache, updates, **kw)


def test_fetch_existing_and_absent_namespaces(config_service: ConfigService) -> None:
    ns, absent = _ns(), _ns()
    config_service.publish(ns, {"producer.acks": "1"})
    updates = Updates()
    client = _client(config_service, updates)
    try:
        got = client.fetch(ns)
        assert got.configurations == {"producer.acks": "1"} and got.release_key
        assert client.fetch(ns).source == "unchanged"  # same release key -> 304
        assert client.fetch(absent).source == "absent"
        assert [u.namespace for u in updates.items] == [ns, absent]
    finally:
        client.close()


def test_long_poll_delivers_a_release_promptly(config_service: ConfigService) -> None:
    ns = _ns()
    config_service.publish(ns, {"producer.linger.ms": "1"})
    updates = Updates()
    client = _client(config_service, updates)
    try:
        client.subscribe(ns)
        client.start()
        wait_until(lambda: client.polls >= 1, message="first long poll answered")
        config_service.wait_parked(1)  # a poll is now parked on the server (its /stats)
        pushed = time.monotonic()
        config_service.publish(ns, {"producer.linger.ms": "2"})
        wait_until(lambda: (updates.latest(ns) or NamespaceConfig(ns, {}, None)).configurations.get(
            "producer.linger.ms") == "2", timeout=5, message="release via long poll")
        assert time.monotonic() - pushed < 2.0
        assert client.release_keys()[ns] == updates.latest(ns).release_key  # type: ignore[union-attr]
    finally:
        client.close()


def test_lazy_subscription_wakes_the_parked_poll(tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc", longpoll_timeout=30)  # a parked poll would sit 30 s
    first, second = _ns(), _ns()
    svc.publish(first, {"producer.acks": "1"})
    updates = Updates()
    client = _client(svc, updates)
    try:
        client.subscribe(first)
        client.start()
        wait_until(lambda: client.polls >= 1, message="first long poll answered")
        svc.wait_parked(1)  # parked, watching only `first`
        assert client.subscribe(second) is not None  # fetched synchronously once (absent yet)
        time.sleep(0.3)  # the client wakes its poll and parks a new one: /stats cannot tell the two apart
        pushed = time.monotonic()
        svc.publish(second, {"producer.acks": "0"})
        wait_until(lambda: (updates.latest(second) or NamespaceConfig(second, {}, None)).configurations.get(
            "producer.acks") == "0", timeout=10, message="new namespace watched")
        assert time.monotonic() - pushed < 3.0
    finally:
        client.close()
        svc.stop()


def test_last_good_config_is_served_from_disk_when_the_service_is_down(tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc")
    ns = _ns()
    svc.publish(ns, {"producer.compression": "lz4"})
    cache = tmp_path / "cache"
    client = _client(svc, Updates(), cache)
    try:
        assert client.subscribe(ns) is not None
    finally:
        client.close()
    svc.stop()
    updates = Updates()
    offline = _client(svc, updates, cache, fetch_timeout_s=0.5)
    try:
        got = offline.subscribe(ns)
        assert got is not None and got.source == "cache"
        assert got.configurations == {"producer.compression": "lz4"}
        with pytest.raises(ApolloError):
            offline.fetch(ns)
    finally:
        offline.close()
    folder = next((cache / "config").iterdir())  # one folder per config center
    cached = next(folder.iterdir())
    assert oct(cached.stat().st_mode & 0o777) == "0o600" and oct(folder.stat().st_mode & 0o777) == "0o700"
    # the same cache folder, a client of another config center: nothing of this one's is read
    other = ApolloClient(f"http://127.0.0.1:{free_port()}", offline.app_id, offline.cluster, "127.0.0.1", cache,
                         Updates(), fetch_timeout_s=0.5)
    try:
        assert other.subscribe(ns) is None
    finally:
        other.close()


def test_access_key_signature(tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc")
    ns = _ns()
    try:
        svc.publish(ns, {"producer.acks": "1"})
        db = next((tmp_path / "cc").glob("*.db"))
        out = subprocess.run([sys.executable, "-m", "metaserver.configcenter", "accesskey", "add", "--db", str(db),
                              "--app-id", "ykafka", "--secret", "s3cr3t-key"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr

        unsigned = _client(svc, Updates())
        try:
            with pytest.raises(ApolloError, match="HTTP 401"):
                wait_until(lambda: unsigned.fetch(ns) and False, timeout=10, message="access key enforced")
        except AssertionError:
            pytest.fail("the config service never started enforcing the access key")
        finally:
            unsigned.close()
        signed = ApolloClient(svc.url, "ykafka", "default", "127.0.0.1", None, Updates(), secret="s3cr3t-key")
        try:
            assert signed.fetch(ns).configurations == {"producer.acks": "1"}
        finally:
            signed.close()
    finally:
        svc.stop()


class FlakyFetch(ApolloClient):
    """Fails the first fetch after a notification, as a network blip would."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fail_next = False
        self.failed = 0

    def fetch(self, namespace: str, timeout_s: float | None = None) -> NamespaceConfig:
        if self.fail_next:
            self.fail_next = False
            self.failed += 1
            raise ApolloError("injected failure")
        return super().fetch(namespace, timeout_s)


def test_notification_id_advances_only_after_a_successful_fetch(config_service: ConfigService) -> None:
    ns = _ns()
    config_service.publish(ns, {"producer.acks": "1"})
    updates = Updates()
    client = FlakyFetch(config_service.url, "ykafka", "default", "127.0.0.1", None, updates)
    try:
        client.subscribe(ns)
        client.start()
        wait_until(lambda: client._ns[ns].notification_id > 0, message="first notification id")
        before = client._ns[ns].notification_id
        client.fail_next = True
        config_service.publish(ns, {"producer.acks": "0"})
        wait_until(lambda: client.failed == 1, message="the injected failure")
        # the id was not advanced, so the next poll reports the namespace again and the fetch is retried
        wait_until(lambda: (updates.latest(ns) or NamespaceConfig(ns, {}, None)).configurations.get(
            "producer.acks") == "0", timeout=10, message="change applied after the retry")
        assert client._ns[ns].notification_id > before
    finally:
        client.close()


def test_namespace_list_is_split_so_each_request_line_fits_8kb() -> None:
    """1,000 topic namespaces (one client over 1,000 topics): every part's request line ≤ 8 KB, none lost."""
    client = ApolloClient("http://127.0.0.1:1/apollo", "ykafka", "default", "10.0.0.1", None, Updates())
    ids = {f"ykafka.topic.orders-{i:04d}-{uuid.uuid4().hex[:12]}": 10_000 + i for i in range(1000)}
    parts = client._split(ids)
    assert len(parts) > 1
    assert {ns: nid for part in parts for ns, nid in part.items()} == ids  # each once, ids kept
    for part in parts:
        line = f"GET /apollo{client._poll_path(part)} HTTP/1.1"
        assert len(line) <= 8192
        assert len(line) > 8192 - 300  # packed, not split needlessly
    assert len(client._split(dict(list(ids.items())[:3]))) == 1


def test_split_long_poll_still_delivers_a_release_to_every_part(tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc", longpoll_timeout=30)  # a parked poll would sit 30 s
    names = [_ns() for _ in range(24)]
    svc.publish(names[0], {"producer.acks": "1"})
    updates = Updates()
    client = _client(svc, updates, max_request_line=900)  # forces several parts with few namespaces
    try:
        client.subscribe_many(names)
        assert len(client._split({ns: 1 for ns in names})) >= 3
        client.start()
        wait_until(lambda: client.polls >= 1, message="first long poll answered")
        parts = len(client._split({ns: 1 for ns in names}))
        for target in (names[-1], names[len(names) // 2], names[0]):  # last, middle and first parts
            svc.wait_parked(parts)  # every part parked again
            pushed = time.monotonic()
            svc.publish(target, {"producer.acks": "0"})
            wait_until(lambda t=target: (updates.latest(t) or NamespaceConfig(t, {}, None)).configurations.get(
                "producer.acks") == "0", timeout=10, message=f"release of {target} via its part's poll")
            assert time.monotonic() - pushed < 1.0
        assert 0 < client.longest_request_line <= 900
    finally:
        client.close()
        svc.stop()
