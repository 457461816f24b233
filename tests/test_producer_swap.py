"""Live rebuilds and cluster switches under load: nothing lost, nothing duplicated, per-key order kept.

A producer thread keeps sending ``<key>:<seq>`` while an operator thread pushes changes through the
MetaServer admin API; every record is then read back from the brokers and counted.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from tests.sdk_fixtures import check_stream, read_topic, wait_until
from tests.support import LocalStack
from ykafka import Producer


class Load:
    """Produce continuously (paced) from a thread until stopped; counts sends and delivery reports."""

    def __init__(self, producer: Producer, topic: str, keys: int = 16, rate: float = 2000.0) -> None:
        self.producer = producer
        self.topic = topic
        self.keys = keys
        self.rate = rate
        self.sent = 0
        self.delivered = 0
        self.failed: list[Any] = []
        self.errors: list[BaseException] = []
        self.serving = 0  # > 0 while inside poll() / flush(): callbacks must fire only then
        self.outside_poll = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self, timeout: float) -> int:
        self.serving += 1
        try:
            return self.producer.poll(timeout)
        finally:
            self.serving -= 1

    def flush(self, timeout: float) -> int:
        self.serving += 1
        try:
            return self.producer.flush(timeout)
        finally:
            self.serving -= 1

    def _cb(self, err: Any, msg: Any) -> None:
        if not self.serving:
            self.outside_poll += 1
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(err)

    def _run(self) -> None:
        seq = [0] * self.keys
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                k = self.sent % self.keys
                value = f"k{k}:{seq[k]}".encode()
                while True:
                    try:
                        self.producer.produce(self.topic, value, f"k{k}".encode(), on_delivery=self._cb)
                        break
                    except BufferError:
                        self.poll(0.05)
                seq[k] += 1
                self.sent += 1
                self.poll(0)
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self.errors, self.errors


def _in_force(producer: Producer, topic: str, key: str, value: Any) -> bool:
    return (producer.in_force(topic) or {}).get(key) == value


def test_20_live_rebuilds_under_load_lose_nothing_and_keep_key_order(sdk_stack: LocalStack) -> None:
    topic = f"rebuild-{uuid.uuid4().hex[:8]}"
    changes: list[tuple[str, str, Any]] = []
    for i in range(20):
        kind = i % 4
        if kind == 0:
            changes.append(("producer.linger.ms", str(2 + i), 2 + i))
        elif kind == 1:
            changes.append(("producer.acks", "1" if i % 8 == 1 else "all", "1" if i % 8 == 1 else "all"))
        elif kind == 2:
            codec = ["lz4", "gzip", "none", "zstd", "snappy"][i // 4 % 5]
            changes.append(("producer.compression", codec, codec))
        else:
            changes.append(("producer.batch.size", str(200_000 + i), 200_000 + i))
    with Producer(sdk_stack.client_config()) as producer:
        load = Load(producer, topic).start()
        try:
            wait_until(lambda: load.sent > 200, message="load running")
            for key, raw, typed in changes:
                sdk_stack.push(f"topic:{topic}", {key: raw})
                wait_until(lambda k=key, v=typed: _in_force(producer, topic, k, v), timeout=20,
                           message=f"{key}={raw} in force")
            wait_until(lambda: load.sent > 200 + 100, message="load after the last change")
        finally:
            load.stop()
        assert load.flush(30) == 0
        assert producer.swaps >= 20
        live = [c for c in producer.clients() if not c["retiring"]]
        assert len(live) == 1 and live[0]["settings"]["batch.size"] == 200_019
    assert load.failed == [] and load.delivered == load.sent
    assert load.outside_poll == 0  # every delivery callback fired from poll() / flush(), none from produce()
    result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topic, load.sent, timeout=60), load.sent)
    assert result == {"received": load.sent, "unique": load.sent, "lost": 0, "duplicated": 0, "disorder": 0}


def test_route_cluster_switch_under_load_moves_the_stream_without_loss(sdk_stack: LocalStack) -> None:
    topic = f"switch-{uuid.uuid4().hex[:8]}"
    with Producer(sdk_stack.client_config()) as producer:
        load = Load(producer, topic).start()
        try:
            wait_until(lambda: load.sent > 500, message="load running on dc-a")
            assert producer.route(topic) == "dc-a"
            sdk_stack.push(f"topic:{topic}", {"route.cluster": "dc-b"})
            wait_until(lambda: _in_force(producer, topic, "route.cluster", "dc-b"), timeout=20,
                       message="route.cluster=dc-b in force")
            at_switch = load.sent
            wait_until(lambda: load.sent > at_switch + 500, message="load running on dc-b")
        finally:
            load.stop()
        assert load.flush(30) == 0
        assert producer.route(topic) == "dc-b"
    assert load.failed == [] and load.delivered == load.sent and load.outside_poll == 0
    on_a = read_topic(sdk_stack.clusters["dc-a"], topic, 1, timeout=30)
    on_b = read_topic(sdk_stack.clusters["dc-b"], topic, load.sent - len(on_a), timeout=30)
    assert len(on_a) >= 500 and len(on_b) >= 500
    result = check_stream(on_a + on_b, load.sent)
    assert result["lost"] == 0 and result["duplicated"] == 0
    assert check_stream(on_a, len(on_a))["disorder"] == 0 and check_stream(on_b, len(on_b))["disorder"] == 0
    # per key: everything written to dc-a precedes everything written to dc-b
    last_a: dict[str, int] = {}
    first_b: dict[str, int] = {}
    for rec in on_a:
        key, _, seq = rec.value.rpartition(":")
        last_a[key] = max(last_a.get(key, -1), int(seq))
    for rec in on_b:
        key, _, seq = rec.value.rpartition(":")
        first_b[key] = min(first_b.get(key, 1 << 30), int(seq))
    assert all(last_a[k] + 1 == first_b[k] for k in first_b), (last_a, first_b)


def test_change_arriving_while_held_messages_are_released_keeps_them_on_one_client(sdk_stack: LocalStack) -> None:
    topic = f"midrelease-{uuid.uuid4().hex[:8]}"
    ns = f"ykafka.topic.{topic}"
    conf = {"bootstrap.servers": sdk_stack.clusters["dc-a"], "producer.linger.ms": 200,
            "ykafka.cache.dir": str(sdk_stack.home / "clients" / uuid.uuid4().hex)}
    sends: list[tuple[str, int]] = []
    changed = threading.Event()

    def hook(producer: Producer, client: Any, topic_: str, value: bytes, *rest: Any) -> bool:
        sends.append((value.decode(), id(client)))
        if value == b"k:50" and not changed.is_set():  # the first held message: change config mid-release
            changed.set()
            producer.runtime.hot.apply(ns, {"producer.linger.ms": "7", "producer.compression": "lz4"}, "r2")
        return False

    with Producer(conf) as producer:
        producer.set_hooks(send=hook)
        for i in range(50):
            producer.produce(topic, f"k:{i}".encode(), b"k")
        producer.runtime.hot.apply(ns, {"producer.linger.ms": "7"}, "r1")  # rebuild: the topic is held
        for i in range(50, 100):
            producer.produce(topic, f"k:{i}".encode(), b"k")
        assert len(producer) == 100 and producer.swaps == 1
        assert producer.flush(15) == 0
        assert changed.is_set()
        released = [client for value, client in sends if 50 <= int(value.split(":")[1]) < 100]
        assert len(released) == 50 and len(set(released)) == 1  # all on one client, despite the change
        for i in range(100, 150):  # the change made mid-release: held again, then sent on the new client
            producer.produce(topic, f"k:{i}".encode(), b"k")
        assert producer.flush(15) == 0
        assert producer.swaps == 2
        assert producer.applied_config(topic)["producer.compression"] == "lz4"
        assert len({client for value, client in sends if int(value.split(":")[1]) >= 100}) == 1
    records = read_topic(sdk_stack.clusters["dc-a"], topic, 150)
    assert check_stream(records, 150) == {"received": 150, "unique": 150, "lost": 0, "duplicated": 0,
                                          "disorder": 0}
