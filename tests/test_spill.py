"""The spill queue on its own: order, durability across reopen, size cap, acknowledgement, group commit."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dr_fixtures import make_engine
from ykafka import config
from ykafka.dr.queue import SpillQueue
from ykafka.dr.spilldir import spill_dir
from ykafka.errors import ConfigError, SpillFullError


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
    with pytest.raises(ConfigError, match="ykafka.spill.commit.*must be one of sync, async"):
        config.load({"bootstrap.servers": "x:1", "ykafka.spill.commit": "maybe"}, "producer")
    with pytest.raises(ConfigError, match="ykafka.spill.max.bytes.*must be at least 1000"):
        config.load({"bootstrap.servers": "x:1", "ykafka.spill.max.bytes": "999"}, "producer")
    with pytest.raises(ConfigError, match="ykafka.spill.fsync.*expected a boolean"):
        config.load({"bootstrap.servers": "x:1", "ykafka.spill.fsync": "sometimes"}, "producer")
    with pytest.raises(ConfigError, match="ykafka.dr.enabled.*expected a boolean"):
        config.load({"bootstrap.servers": "x:1", "ykafka.dr.enabled": "2"}, "producer")


def test_engine_raises_spill_full_to_the_caller_while_the_cluster_is_down(tmp_path: Path) -> None:
    from tests.dr_fixtures import make_engine
    from tests.support import free_port
    from ykafka.dr.engine import RouteSpec
    from ykafka.dr.health import ClusterState

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
    from ykafka.dr.spilldir import SpillSlot

    first, second = SpillSlot(tmp_path), SpillSlot(tmp_path)
    assert (first.path.name, second.path.name) == ("0", "1")
    first.release()  # the process that held slot 0 died: the next one takes over its queue
    third = SpillSlot(tmp_path)
    assert third.path == first.path
    second.release()
    third.release()


# --- the journal: sync appends are on disk before their chunk commit ---------------------------------

def _selfkill_child(directory: Path, record: Path, count: int, *extra: str) -> None:
    """A child appends ``count`` messages (sync) and SIGKILLs itself right after the last one returned."""
    import signal
    import subprocess

    from tests.spill_child import CHILD, ROOT

    proc = subprocess.run([*CHILD, "append", str(directory), str(record), "--count", str(count), "--selfkill",
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def test_sync_append_survives_sigkill_before_its_chunk_commit(tmp_path: Path) -> None:
    from tests.spill_child import Recorded, check_reopened

    _selfkill_child(tmp_path, tmp_path / "rec", 500)
    recorded = Recorded(tmp_path / "rec")
    assert len(recorded.accepted) == 499  # the 500th returned, then the kill came before its line
    assert list((tmp_path / "c" / "journal").glob("*.wal"))  # the crash left the journal behind
    counts = check_reopened(tmp_path, recorded)
    assert counts["present"] == 500 and counts["extra"] == 1  # the 500th is there too: its append returned
    assert counts["recovered"] >= 1  # at least the tail came back from the journal alone
    assert not list((tmp_path / "c" / "journal").glob("*.wal"))  # committed on open, then deleted
    with SpillQueue(tmp_path, "c") as queue:  # a second open finds the same, nothing recovered twice
        assert queue.depth == 501 and queue.status()["recovered"] == 0


def test_torn_journal_tail_is_dropped_with_a_log_line(tmp_path: Path) -> None:
    import marshal
    import struct
    import zlib

    from structlog.testing import capture_logs

    from tests.spill_child import Recorded, check_reopened

    _selfkill_child(tmp_path, tmp_path / "rec", 300)
    segments = sorted((tmp_path / "c" / "journal").glob("*.wal"))
    body = marshal.dumps((300, "t", b"x", b"never returned", None, 0, -1), 4)
    frame = struct.pack("<II", len(body), zlib.crc32(body)) + body
    with open(segments[-1], "ab") as fh:
        fh.write(frame[: len(frame) // 2])  # the write the crash interrupted: half a frame
    with capture_logs() as logs:
        counts = check_reopened(tmp_path, Recorded(tmp_path / "rec"))
    assert counts["present"] == 300  # the torn frame's message is not there, every returned one is
    torn = [e for e in logs if e["event"] == "spill.journal_torn"]
    assert len(torn) == 1 and torn[0]["reason"] == "torn frame"
    assert torn[0]["dropped_bytes"] == len(frame) // 2


def test_corrupt_journal_frame_ends_its_segment(tmp_path: Path) -> None:
    """A frame whose checksum does not match is not trusted, nor anything after it in that segment."""
    from structlog.testing import capture_logs

    _selfkill_child(tmp_path, tmp_path / "rec", 50)
    with SpillQueue(tmp_path, "c") as queue:
        depth = queue.depth
    assert depth == 50
    _selfkill_child(tmp_path, tmp_path / "rec2", 50)  # seqs 50..99, values 0:..49: again
    segment = sorted((tmp_path / "c" / "journal").glob("*.wal"))[-1]
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # flip a byte inside the last frame
    segment.write_bytes(bytes(data))
    with capture_logs() as logs, SpillQueue(tmp_path, "c") as queue:
        values = [r.value for _, rs in queue.chunks() for r in rs]
    assert len(values) == 99 and values[-1] is not None and values[-1].startswith(b"48:")
    assert [e["reason"] for e in logs if e["event"] == "spill.journal_torn"] == ["checksum mismatch"]


def test_fsync_mode_groups_fsyncs_across_threads(tmp_path: Path) -> None:
    with SpillQueue(tmp_path, "c", fsync=True) as queue:
        def writer(n: int) -> None:
            for i in range(100):
                queue.append("t", f"{n}:{i}", key=str(n))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert queue.wait_committed(10)
        status = queue.status()
        assert status["spilled"] == 800 and status["journal_errors"] == 0
        assert 0 < status["fsyncs"] < 800  # group commits: many records share one fsync
    with SpillQueue(tmp_path, "c", fsync=True) as queue:
        per_key: dict[bytes | None, list[int]] = {}
        for _, key, value in _drain(queue):
            assert value is not None
            per_key.setdefault(key, []).append(int(value.split(b":")[1]))
        assert sorted(per_key) == [str(n).encode() for n in range(8)]
        assert all(values == list(range(100)) for values in per_key.values())


def _dir_bytes(directory: Path) -> int:
    """Bytes of the journal segments; a segment pruned between the listing and its stat counts 0."""
    total = 0
    for path in directory.glob("*.wal"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def test_journal_does_not_grow_without_bound(tmp_path: Path) -> None:
    """100,000 sync appends acknowledged as they commit: spent segments go, the journal stays near one
    segment; once everything is acknowledged and the writer idles, nothing is left on disk."""
    segment = 256 << 10
    journal_dir = tmp_path / "c" / "journal"
    with SpillQueue(tmp_path, "c", journal_segment_bytes=segment) as queue:
        peak_journal = peak_depth = 0
        for i in range(100_000):
            queue.append("t", b"x" * 100, key=str(i % 100))
            if i % 5_000 == 4_999:
                peak_journal = max(peak_journal, _dir_bytes(journal_dir))
                peak_depth = max(peak_depth, queue.depth)
                queue.ack([r.seq for _, rs in queue.chunks() for r in rs])
        assert queue.wait_committed(10)
        queue.ack([r.seq for _, rs in queue.chunks() for r in rs])
        status = queue.status()
        assert status["spilled"] == status["acked"] == 100_000 and queue.depth == 0
        assert status["commits"] < 1_000  # batched: a commit per 50 ms or per chunk of 5,000 records
        deadline = time.monotonic() + 5
        while (queue.journal_bytes or queue.status()["chunks"]) and time.monotonic() < deadline:
            queue.append("t", b"tick", wait=False)  # the acknowledged chunks' deletes ride on a commit
            queue.wait_committed(5)
            queue.ack([r.seq for _, rs in queue.chunks() for r in rs])
            time.sleep(0.1)
        assert queue.journal_bytes == 0
        assert not list(journal_dir.glob("*.wal"))
    # the active segment plus those awaiting their commit (at most a chunk of 5,000 records, ~50 ms)
    assert peak_journal <= 2 * segment + 5_000 * 200, peak_journal
    assert peak_depth <= 7_000
    with SpillQueue(tmp_path, "c") as queue:  # nothing comes back: the watermark covers the acked records
        assert queue.depth == 0 and queue.status()["recovered"] == 0
        assert queue.append("t", b"next") >= 100_000


def test_journal_write_error_refuses_the_message_and_keeps_the_others(tmp_path: Path) -> None:
    """Real EFBIG from the kernel (RLIMIT_FSIZE) on a journal write and on the store's commits: the
    refused append raises SpillFullError, commits are retried, every accepted message is kept."""
    import subprocess

    from tests.spill_child import CHILD, ROOT, Recorded, check_reopened

    proc = subprocess.run([*CHILD, "diskerror", str(tmp_path), str(tmp_path / "rec")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recorded = Recorded(tmp_path / "rec")
    assert len(recorded.refused) >= 1 and "spill journal write" in recorded.refused[0]
    assert "not accepted" in recorded.refused[0]
    assert len(recorded.accepted) + len(recorded.refused) == 320
    status = dict(kv.split("=") for kv in recorded.other[0].split()[1:])
    assert status["committed"] == "True" and int(status["journal_errors"]) == len(recorded.refused)
    assert int(status["commit_errors"]) >= 1 and status["under_limit"] == "False"
    assert "spill.commit_failed" in proc.stderr and "dropped=0" in proc.stderr
    counts = check_reopened(tmp_path, recorded)
    assert counts["present"] == len(recorded.accepted) and counts["extra"] == 0


def test_in_memory_records_whose_commit_fails_are_handed_back_with_their_callbacks(tmp_path: Path) -> None:
    """Records spilled only in memory (a re-routed message, a strict failback's held one) whose commit to the store
    fails for real (EFBIG past RLIMIT_FSIZE) each reach ``on_commit_error`` with their own callback; none is both
    stored and handed back, none neither. Before, nothing was wired to it and the engine's records vanished without
    a callback (an 8-minute soak, seed 107: 8 sends without one)."""
    import subprocess

    from tests.spill_child import CHILD, ROOT, Recorded

    proc = subprocess.run([*CHILD, "asyncerror", str(tmp_path), str(tmp_path / "rec")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recorded = Recorded(tmp_path / "rec")
    handed_back = {int(line.split()[1]): int(line.split()[2]) for line in recorded.other if line.startswith("D ")}
    status = dict(kv.split("=") for kv in next(x for x in recorded.other if x.startswith("STATUS")).split()[1:])
    assert len(recorded.accepted) == 100 and status["committed"] == "True"
    assert int(status["commit_errors"]) >= 1 and int(status["dropped"]) == len(handed_back) >= 1, (status, handed_back)
    with SpillQueue(tmp_path, "c") as queue:
        stored = {r.seq for _, rs in queue.chunks() for r in rs}
    by_seq = {seq: i for seq, _key, i in recorded.accepted}
    assert not stored & set(handed_back), "a record both stored and handed back"
    neither = set(by_seq) - stored - set(handed_back)
    assert not neither, f"neither stored nor handed back: {sorted(neither)[:5]}"
    assert all(by_seq[seq] == i for seq, i in handed_back.items()), "a record handed back with another's callback"
    assert all(50 <= by_seq[seq] < 80 for seq in handed_back)  # only the in-memory ones appended under the limit
    assert "spill.commit_failed" in proc.stderr and "spill.dropped_unreported" not in proc.stderr


def test_the_engine_fails_in_memory_spills_it_could_not_commit_to_their_callbacks(tmp_path: Path) -> None:
    """The engine's spill queues hand such records to the engine, which reports each failed to its own callback (the
    error names the cluster and the disk's error), as a rejected spill is."""
    from ykafka.dr.engine import RouteSpec
    from ykafka.dr.journal import SpillRecord
    from ykafka.transport import RawKafkaError

    engine = make_engine({"dc-a": "127.0.0.1:1"}, RouteSpec(primary="dc-a"), tmp_path)
    try:
        queue = engine._open_queue("dc-a")
        assert queue is not None and queue.on_commit_error is not None
        got: list[tuple[int, Any]] = []
        records = [(SpillRecord(seq, "t", b"k", b"v", None, 0, -1, ""), functools.partial(
            lambda i, err, msg: got.append((i, err)), seq)) for seq in range(3)]
        queue.on_commit_error(records, OSError(28, "No space left on device"))  # as its writer thread calls it
        engine.poll(0)  # callbacks a thread of the engine's reached wait for the owner's poll
        assert [i for i, _ in got] == [0, 1, 2]
        for _, err in got:
            assert err.code() == RawKafkaError._QUEUE_FULL
            assert "spill to dc-a was not committed" in err.str() and "No space left on device" in err.str()
        queue.close()
    finally:
        engine.close()


def test_failing_segment_open_raises_and_the_next_append_works(tmp_path: Path) -> None:
    """The next journal segment is /dev/full (ENOSPC from the kernel): that append is refused, the
    queue moves on to a fresh segment, nothing accepted is lost."""
    journal_dir = tmp_path / "c" / "journal"
    accepted: list[bytes] = []
    refused = 0
    with SpillQueue(tmp_path, "c", journal_segment_bytes=1_000) as queue:
        queue.append("t", b"v0")
        accepted.append(b"v0")
        current = max(int(p.stem) for p in journal_dir.glob("*.wal"))
        (journal_dir / f"{current + 1:012d}.wal").symlink_to("/dev/full")
        for i in range(1, 20):  # ~7 frames of 140 bytes fill a segment
            try:
                queue.append("t", f"v{i}".encode() + b"x" * 100)
                accepted.append(f"v{i}".encode() + b"x" * 100)
            except SpillFullError as exc:
                assert "No space left on device" in str(exc) and "not accepted" in str(exc)
                refused += 1
        assert refused == 1 and queue.status()["journal_errors"] == 1
    with SpillQueue(tmp_path, "c") as queue:
        assert [v for _, _, v in _drain(queue)] == accepted


def test_queue_written_before_the_journal_opens_and_continues(tmp_path: Path) -> None:
    """A spill directory of the earlier layout (chunks, no watermark row, no journal) replays as before."""
    import diskcache

    from ykafka.dr.queue import FORMAT, PROCESS_TOKEN

    (tmp_path / "c").mkdir()
    with diskcache.Cache(str(tmp_path / "c")) as cache:
        cache.set(0, (FORMAT, [(i, "t", b"k", f"v{i}".encode(), None, 0, -1, PROCESS_TOKEN) for i in range(3)]))
        cache.set(3, (FORMAT, [(3, "t", b"k", b"v3", None, 0, -1, PROCESS_TOKEN)]))
    with SpillQueue(tmp_path, "c") as queue:
        assert [v for _, _, v in _drain(queue)] == [b"v0", b"v1", b"v2", b"v3"]
        assert queue.holds("t", b"k") and queue.append("t", b"v4", key=b"k") == 4
    with SpillQueue(tmp_path, "c") as queue:
        assert [v for _, _, v in _drain(queue)] == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_memory_per_spilled_record_stays_small_and_acks_still_find_every_record(tmp_path: Path) -> None:
    """What memory keeps of a spilled record (the rows are on disk) is a few tens of bytes, so a million
    spilled messages stay well under 100 MB (bench/capacity_memory.py measures the process RSS)."""
    import tracemalloc

    n = 50_000
    q = SpillQueue(tmp_path, "mem", commit="async", async_max_pending=n, chunk_records=5000)
    try:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        seqs = [q.append("t", b"v%d" % i + b"x" * 90, key=str(i % 100).encode()) for i in range(n)]
        assert q.wait_committed(30)
        held = tracemalloc.get_traced_memory()[0] - before - sys.getsizeof(seqs) - 32 * n  # minus the test's list
        tracemalloc.stop()
        assert q.depth == n and q.holds("t", b"7")
        assert held / n < 60, f"{held / n:.0f} bytes a record"  # a dict entry per record was about 300
        q.ack(seqs[::2])  # every other record: each found in its chunk
        assert q.depth == n // 2 and q.holds("t", b"7")
        q.ack(seqs[1::2])
        assert q.depth == 0 and not q.holds("t", b"7") and q.status()["chunks"] == 0
    finally:
        q.close()


def test_fsync_append_never_waits_for_the_disk_and_replay_follows_the_group_fsync(tmp_path: Path) -> None:
    """fsync mode: one thread spills at memory speed (no fsync per append); a record is readable for replay
    (whose broker acknowledgement fires its delivery callback) only once a group commit fsynced it."""
    with SpillQueue(tmp_path, "c", fsync=True) as queue:
        start = time.perf_counter()
        for i in range(20_000):
            queue.append("t", b"%d" % i + b"x" * 95, key=str(i % 100).encode())
        rate = 20_000 / (time.perf_counter() - start)
        committed_seqs = {r.seq for _, rs in queue.chunks() for r in rs}  # waits for the commit
        status = queue.status()
        assert committed_seqs == set(range(20_000))
        assert status["fsyncs"] >= 1 and status["fsyncs"] <= status["commits"] < 1000
        assert rate > 10_000, f"{rate:.0f} appends/s"  # an fdatasync each was ~5,000/s on this machine


def test_delivery_callback_of_an_fsync_spilled_message_never_precedes_its_fsync(tmp_path: Path) -> None:
    """Through the engine: messages spilled in fsync mode while the cluster is down, replayed when it
    comes up; at each delivery callback the store's fsynced watermark already covers that message."""
    from tests.dr_fixtures import make_engine
    from tests.support import Broker
    from ykafka.dr.engine import RouteSpec
    from ykafka.dr.health import ClusterState

    broker = Broker("fsync", tmp_path / "logs")  # not started: the cluster is down while we spill
    engine = make_engine({"solo": broker.bootstrap}, RouteSpec("solo"), tmp_path / "spill", spill_fsync=True,
                         probe_s=0.1)
    seen: list[tuple[int, int]] = []  # (seq of the message, fsynced watermark when its callback fired)
    try:
        engine.health.cluster("solo").force(ClusterState.DOWN, "test: broker not started")
        queue = engine.link("solo").queue
        assert queue is not None and queue.fsync
        n = 3000
        for i in range(n):
            engine.produce("fsync-order", b"%d" % i, key=str(i % 10).encode(),
                           on_delivery=lambda err, _m, i=i: seen.append((i, queue.watermark)) if err is None else None)
        assert engine.status()["spill"]["solo"]["spilled"] == n and not seen
        broker.start()
        deadline = time.monotonic() + 60
        while len(seen) < n and time.monotonic() < deadline:
            engine.poll(0.05)
        assert len(seen) == n
        assert all(seq <= watermark for seq, watermark in seen), [s for s in seen if s[0] > s[1]][:5]
        assert queue.status()["fsyncs"] >= 1
    finally:
        engine.close()
        broker.close()
