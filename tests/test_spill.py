"""The spill queue on its own: order, durability across reopen, size cap, acknowledgement, group commit."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ykafka import config
from ykafka.errors import ConfigError, SpillFullError
from ykafka.spill import SpillQueue, spill_dir


def _drain(queue: SpillQueue) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.seq, r.key, r.value) for _, records in queue.chunks() for r in records]


def test_order_and_reopen_keeps_everything(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a") as queue:
        for i in range(50):
            queue.append("t", f"v{i}", key=f"k{i % 3}", headers={"h": "x"}, timestamp=1000 + i,
                         partition=i % 2 if i < 10 else -1)
        assert queue.depth == 50
        assert queue.holds("t", "k1") and not queue.holds("t", "other") and not queue.holds("t2", "k1")
    with SpillQueue(tmp_path, "dc-a") as queue:
        records = [r for _, rs in queue.chunks() for r in rs]
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(50)]
        assert [r.seq for r in records] == list(range(50))
        assert records[3].headers == (("h", b"x"),) and records[3].timestamp == 1003
        assert records[3].partition == 1 and records[20].partition == -1
        assert queue.holds("t", b"k2")  # the per-key index is rebuilt from disk
        assert queue.append("t", "next") == 50  # sequences keep growing after a restart


def test_full_queue_raises_and_keeps_what_it_has(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a", max_bytes=2_000) as queue:
        accepted = 0
        with pytest.raises(SpillFullError, match=r"spill queue of cluster dc-a is full"):
            for _ in range(100):
                queue.append("t", b"x" * 100)
                accepted += 1
        assert 0 < accepted < 100
        assert queue.depth == accepted
        assert queue.status()["full"] == 1
        assert len(_drain(queue)) == accepted


def test_ack_removes_records_and_chunks(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a") as queue:
        for i in range(10):
            queue.append("t", f"v{i}", key="k", wait=False)
        assert queue.wait_committed(5)
        seqs = [seq for seq, _, _ in _drain(queue)]
        queue.ack(seqs[:4])
        assert queue.depth == 6 and queue.holds("t", "k")
        assert [s for s, _, _ in _drain(queue)] == seqs[4:]
        queue.ack(seqs[4:])
        assert queue.depth == 0 and not queue.holds("t", "k") and queue.bytes == 0
        queue.append("t", "flush the delete")  # deletes ride on the next commit
    with SpillQueue(tmp_path, "dc-a") as queue:
        assert [v for _, _, v in _drain(queue)] == [b"flush the delete"]


def test_partly_acked_chunk_is_compacted_on_close(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a") as queue:
        for i in range(6):
            queue.append("t", f"v{i}", wait=False)
        queue.wait_committed(5)
        seqs = [s for s, _, _ in _drain(queue)]
        queue.ack(seqs[::2])
    with SpillQueue(tmp_path, "dc-a") as queue:
        assert [v for _, _, v in _drain(queue)] == [b"v1", b"v3", b"v5"]


def test_concurrent_sync_appends_share_commits(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a") as queue:
        def writer(n: int) -> None:
            for i in range(200):
                queue.append("t", f"{n}:{i}", key=str(n))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert queue.depth == 1600
        status = queue.status()
        assert status["commits"] < 1600  # grouped: fewer transactions than messages
    with SpillQueue(tmp_path, "dc-a") as queue:
        per_thread: dict[bytes, list[int]] = {}
        for _, key, value in _drain(queue):
            assert key is not None and value is not None
            per_thread.setdefault(key, []).append(int(value.split(b":")[1]))
        assert len(per_thread) == 8
        assert all(values == list(range(200)) for values in per_thread.values())


def test_one_owner_per_directory(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "dc-a"), pytest.raises(ConfigError, match="in use by another client"):
        SpillQueue(tmp_path, "dc-a")
    SpillQueue(tmp_path, "dc-a").close()  # released on close


def test_options_registered_and_default_dir(tmp_path: Path) -> None:
    cfg = config.load({"bootstrap.servers": "x:1", "ykafka.spill.max.bytes": "5000", "ykafka.spill.commit": "async",
                       "ykafka.cache.dir": str(tmp_path)}, "producer")
    assert cfg.options["ykafka.spill.max.bytes"] == 5000
    assert cfg.options["ykafka.spill.commit"] == "async"
    assert spill_dir(cfg.options, cfg.cache_dir) == tmp_path / "spill"
    with pytest.raises(ConfigError, match="ykafka.spill.commit"):
        config.load({"bootstrap.servers": "x:1", "ykafka.spill.commit": "maybe"}, "producer")


def test_engine_raises_spill_full_to_the_caller_while_the_cluster_is_down(tmp_path: Path) -> None:
    from tests.dr_fixtures import free_port, make_engine
    from ykafka.failover import RouteSpec
    from ykafka.health import ClusterState

    engine = make_engine({"solo": f"127.0.0.1:{free_port()}"}, RouteSpec("solo"), tmp_path,
                         spill_max_bytes=5_000)
    try:
        engine.health.cluster("solo").force(ClusterState.DOWN, "test: nothing listens")
        accepted = 0
        with pytest.raises(SpillFullError, match="ykafka.spill.max.bytes"):
            for i in range(1000):
                engine.produce("t", b"x" * 100, key=str(i).encode())
                accepted += 1
        status = engine.status()
        assert status["spill"]["solo"]["depth"] == accepted > 0
        assert status["links"]["solo"]["direct"] == 0  # nothing went to librdkafka while DOWN
    finally:
        engine.close()
    with SpillQueue(tmp_path, "solo") as queue:  # all accepted ones are on disk
        assert queue.depth == accepted


def test_spill_slots_are_exclusive_and_reused_after_release(tmp_path: Path) -> None:
    from ykafka.spill import SpillSlot

    first, second = SpillSlot(tmp_path), SpillSlot(tmp_path)
    assert (first.path.name, second.path.name) == ("0", "1")
    first.release()  # the process that held slot 0 died: the next one takes over its queue
    third = SpillSlot(tmp_path)
    assert third.path == first.path
    second.release()
    third.release()
