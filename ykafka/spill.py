"""The durable local spill queue: where messages wait on disk while their cluster cannot take them.

One :class:`SpillQueue` per cluster, stored in a ``diskcache.Cache`` under ``<spill dir>/<cluster>``.
Appends are grouped: a single writer thread commits whatever is waiting as one *chunk* (one row, one
SQLite transaction), so many concurrent ``produce`` calls share a commit instead of paying one each.
A chunk's key is the sequence number of its first record; sequences only grow, so reading chunks in key
order replays oldest first. A record leaves the queue only when :meth:`SpillQueue.ack` says the broker
took it; a chunk row is deleted when all its records are acked (a crash in between replays the chunk
again: duplicates, never loss).

The queue also keeps the per-key index the producer consults: while a key has spilled records, new
sends of that key must join the spill tail, or they would overtake the older ones.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import diskcache
import structlog

from ykafka.config import register_option
from ykafka.errors import ClosedError, ConfigError, SpillFullError, YKafkaError

log = structlog.get_logger(__name__)

FORMAT = 1  # chunk row layout: (FORMAT, [record tuples]); bump when the tuple layout changes
PROCESS_TOKEN = uuid.uuid4().hex  # records spilled by this process; only they can still fire callbacks

CommitMode = Literal["sync", "async"]
DeliveryCallback = Callable[..., Any]
IndexKey = tuple[str, bytes]
Headers = tuple[tuple[str, bytes | None], ...]


def _bytes_size(text: Any) -> int:
    value = int(str(text).strip())
    if value < 1_000:
        raise ValueError("must be at least 1000 bytes")
    return value


def _commit_mode(text: Any) -> str:
    value = str(text).strip()
    if value not in ("sync", "async"):
        raise ValueError("must be sync or async")
    return value


def _positive_int(text: Any) -> int:
    value = int(str(text).strip())
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise ValueError("expected a boolean (true / false)")
    return value in ("true", "1", "yes", "on")


def _opt_path(text: Any) -> str | None:
    value = "" if text is None else str(text).strip()
    return value or None


register_option("ykafka.spill.dir", _opt_path, None, "spill queues (default <ykafka.cache.dir>/spill)",
                "YKAFKA_SPILL_DIR")
register_option("ykafka.spill.max.bytes", _bytes_size, 1 << 30,
                "size cap of one cluster's spill queue; beyond it produce raises SpillFullError", None)
register_option("ykafka.spill.commit", _commit_mode, "sync",
                "sync: produce returns after its spilled message is on disk; async: bounded wait", None)
register_option("ykafka.spill.async.max.pending", _positive_int, 100_000,
                "async spill: produce blocks while this many spilled messages await their commit", None)
register_option("ykafka.spill.fsync", _bool, False,
                "fsync every spill commit (survives power loss; without it a commit survives SIGKILL)", None)


class SpillRecord(NamedTuple):
    """One spilled message, everything needed to send it again."""

    seq: int
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: int  # ms since epoch, 0 = let the producer stamp it
    partition: int  # -1 = the partitioner decides
    origin: str  # PROCESS_TOKEN of the process that spilled it

    @property
    def size(self) -> int:
        return _size(self.topic, self.key, self.value, self.headers)

    @property
    def index_key(self) -> IndexKey | None:
        return None if self.key is None else (self.topic, self.key)


def _size(topic: str, key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    size = 64 + len(topic) + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += sum(len(k) + (len(v) if v else 0) + 8 for k, v in headers)
    return size


def normalize_headers(headers: Any) -> Headers | None:
    """confluent-kafka accepts a dict or a list of pairs, str or bytes values; store bytes pairs."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for name, value in items:
        if isinstance(value, str):
            value = value.encode()
        out.append((str(name), value))
    return tuple(out)


def _as_bytes(data: Any) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return bytes(data)


@dataclass
class _Chunk:
    pending: dict[int, tuple[int, IndexKey | None]] = field(default_factory=dict)  # seq -> (size, index key)
    size: int = 0  # records written


@dataclass
class _Append:
    record: SpillRecord
    size: int


class SpillQueue:
    """A cluster's durable queue of messages waiting to be (re)sent. Thread-safe."""

    def __init__(self, directory: str | os.PathLike[str], cluster: str, *, max_bytes: int = 1 << 30,
                 commit: CommitMode = "sync", fsync: bool = False, async_max_pending: int = 100_000,
                 chunk_records: int = 5000, on_commit_error: Callable[[list[SpillRecord], Exception], None]
                 | None = None) -> None:
        self.cluster = cluster
        self.path = Path(directory) / re.sub(r"[^A-Za-z0-9._-]", "_", cluster)
        self.max_bytes = max_bytes
        self.commit_mode: CommitMode = commit
        self.async_max_pending = async_max_pending
        self.chunk_records = chunk_records
        self.on_commit_error = on_commit_error
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fh = self._acquire_owner_lock()
        self._cache = diskcache.Cache(
            str(self.path), eviction_policy="none", size_limit=1 << 62, cull_limit=0, statistics=0,
            tag_index=0, sqlite_synchronous=2 if fsync else 1)
        self._cond = threading.Condition()  # commit progress, for callers waiting on it
        self._wake = threading.Condition(self._cond._lock)  # type: ignore[attr-defined]  # the writer's bell
        self._chunks: dict[int, _Chunk] = {}  # committed chunks, oldest first (insertion order)
        self._owner: dict[int, int] = {}  # live seq -> chunk key
        self._index: dict[IndexKey, int] = {}  # (topic, key) -> spilled records not yet acked
        self._callbacks: dict[int, DeliveryCallback] = {}  # seq -> user callback (this process only)
        self._appends: list[_Append] = []  # accepted, not yet committed
        self._deletes: list[int] = []  # chunk keys to delete at the next commit
        self._failed: dict[int, Exception] = {}  # seq -> commit error, for a caller waiting on it
        self._waiting: set[int] = set()  # seqs whose caller waits for the commit
        self._committing = False  # one thread at a time writes (leader / follower group commit)
        self._bytes = 0
        self._depth = 0
        self._next_seq = 0
        self._committed = -1  # highest committed seq
        self._totals = {"spilled": 0, "acked": 0, "commits": 0, "commit_errors": 0, "full": 0}
        self._closed = False
        self._load()
        self._writer = threading.Thread(target=self._write_loop, name=f"ykafka-spill-{cluster}", daemon=True)
        self._writer.start()

    # --- opening -----------------------------------------------------------------------------------

    def _acquire_owner_lock(self) -> Any:
        lock_path = self.path / "owner.lock"
        fh = open(lock_path, "a+")  # noqa: SIM115 - held for the queue's lifetime
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise ConfigError(f"spill directory {self.path} is in use by another client ({holder}); "
                              "give each producer process its own ykafka.spill.dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}\n")
        fh.flush()
        return fh

    def _load(self) -> None:
        """Rebuild the in-memory index from the chunks a previous run left behind."""
        last = -1
        for chunk_key in self._cache.iterkeys():
            row = self._cache.get(chunk_key)
            if not isinstance(chunk_key, int) or not isinstance(row, tuple) or row[0] != FORMAT:
                log.warning("spill.skip_unknown_row", cluster=self.cluster, key=repr(chunk_key)[:80])
                continue
            chunk = _Chunk(size=len(row[1]))
            for raw in row[1]:
                record = SpillRecord._make(raw)
                self._track(chunk, record, record.size)
                self._owner[record.seq] = chunk_key
                last = max(last, record.seq)
            self._chunks[chunk_key] = chunk
        self._next_seq = last + 1
        self._committed = last
        if self._depth:
            log.info("spill.recovered", cluster=self.cluster, depth=self._depth, bytes=self._bytes,
                     chunks=len(self._chunks), path=str(self.path))

    def _track(self, chunk: _Chunk, record: SpillRecord, size: int) -> None:
        ikey = record.index_key
        chunk.pending[record.seq] = (size, ikey)
        self._bytes += size
        self._depth += 1
        if ikey is not None:
            self._index[ikey] = self._index.get(ikey, 0) + 1

    # --- appending ---------------------------------------------------------------------------------

    def append(self, topic: str, value: Any = None, key: Any = None, headers: Any = None, timestamp: int = 0,
               partition: int = -1, on_delivery: DeliveryCallback | None = None,
               wait: bool | None = None, timeout: float | None = None) -> int:
        """Spill one message; return its sequence number.

        ``wait`` (default: the queue's commit mode is ``sync``) returns only after the record is committed
        to disk. Without it the call returns once the record is queued for the writer, blocking while more
        than ``async_max_pending`` records wait for their commit. Raises :class:`SpillFullError` when the
        size cap would be exceeded; nothing is ever dropped silently.
        """
        key_b, value_b, hdrs = _as_bytes(key), _as_bytes(value), normalize_headers(headers)
        size = _size(topic, key_b, value_b, hdrs)
        with self._cond:
            if self._closed:
                raise ClosedError(f"spill queue of {self.cluster} is closed")
            if self._bytes + size > self.max_bytes:
                self._totals["full"] += 1
                raise SpillFullError(f"spill queue of cluster {self.cluster} is full: {self._bytes} of "
                                     f"{self.max_bytes} bytes used (ykafka.spill.max.bytes); message to "
                                     f"{topic!r} not accepted")
            seq = self._next_seq
            self._next_seq += 1
            record = SpillRecord(seq, topic, key_b, value_b, hdrs, int(timestamp or 0),
                                 -1 if partition is None else int(partition), PROCESS_TOKEN)
            ikey = record.index_key
            if ikey is not None:  # counted from acceptance so later sends of the key queue behind it
                self._index[ikey] = self._index.get(ikey, 0) + 1
            self._bytes += size
            self._depth += 1
            self._totals["spilled"] += 1
            if on_delivery is not None:
                self._callbacks[seq] = on_delivery
            self._appends.append(_Append(record, size))
            sync = (self.commit_mode == "sync") if wait is None else wait
            if not sync:
                self._wake.notify()
            deadline = None if timeout is None else time.monotonic() + timeout
            if sync:
                self._waiting.add(seq)
                try:
                    while self._committed < seq and seq not in self._failed:
                        if not self._committing:
                            self._lead_commit()  # nobody is writing: commit the queue in this thread
                        elif not self._wait(deadline):
                            raise YKafkaError(f"spill commit of message {seq} to {self.cluster} timed out")
                finally:
                    self._waiting.discard(seq)
            else:
                while self._next_seq - 1 - self._committed > self.async_max_pending and not self._closed:
                    if not self._wait(deadline):
                        break  # accepted; it stays queued for the writer
            error = self._failed.pop(seq, None)
        if error is not None:
            raise SpillFullError(f"spill commit to {self.path} failed: {error}") from error
        return seq

    def _wait(self, deadline: float | None) -> bool:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
        return True

    def wait_committed(self, timeout: float | None = None) -> bool:
        """Wait until everything accepted so far is on disk (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_seq - 1
            while self._committed < target:
                if not self._wait(deadline):
                    return False
        return True

    # --- the writer --------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        """Commits async appends and chunk deletes; sync callers usually commit themselves first."""
        with self._cond:
            while True:
                while (self._committing or (not self._appends and not self._deletes)) and not self._closed:
                    self._wake.wait(0.05)  # deletes and orphaned appends are picked up within 50 ms
                if self._closed and not self._appends and not self._deletes and not self._committing:
                    return
                if not self._committing:
                    self._lead_commit()

    def _lead_commit(self) -> None:
        """Take everything waiting and commit it as one transaction. Called with ``_cond`` held."""
        self._committing = True
        take = self._appends[: self.chunk_records]
        del self._appends[: len(take)]
        deletes, self._deletes = self._deletes, []
        self._cond.release()
        try:
            self._commit(take, deletes)
        finally:
            self._cond.acquire()
            self._committing = False
            self._cond.notify_all()

    def _commit(self, take: list[_Append], deletes: list[int]) -> None:
        error: Exception | None = None
        try:
            rows = [tuple(a.record) for a in take]
            if not deletes:  # a lone set is its own transaction; skip BEGIN / COMMIT round trips
                self._cache.set(take[0].record.seq, (FORMAT, rows), retry=True)
            else:
                with self._cache.transact(retry=True):
                    if take:
                        self._cache.set(take[0].record.seq, (FORMAT, rows), retry=True)
                    for chunk_key in deletes:
                        self._cache.delete(chunk_key, retry=True)
        except Exception as exc:  # disk full, I/O error: the records were not stored
            error = exc
        with self._cond:
            self._totals["commits"] += 1
            if take and error is None:
                chunk_key = take[0].record.seq
                chunk = _Chunk(size=len(take))
                for item in take:
                    ikey = item.record.index_key
                    chunk.pending[item.record.seq] = (item.size, ikey)
                    self._owner[item.record.seq] = chunk_key
                self._chunks[chunk_key] = chunk
                self._committed = take[-1].record.seq
            elif take and error is not None:
                self._totals["commit_errors"] += 1
                for item in take:
                    if item.record.seq in self._waiting:
                        self._failed[item.record.seq] = error
                    self._forget(item.record.seq, item.size, item.record.index_key)
                    self._callbacks.pop(item.record.seq, None)
                self._committed = take[-1].record.seq
            elif error is not None:
                self._deletes.extend(deletes)  # retry the deletes with the next commit
            self._cond.notify_all()
        if error is not None:
            log.error("spill.commit_failed", cluster=self.cluster, records=len(take), error=str(error))
            if take and self.on_commit_error is not None:
                self.on_commit_error([a.record for a in take], error)

    def _forget(self, seq: int, size: int, ikey: IndexKey | None) -> None:
        self._bytes -= size
        self._depth -= 1
        if ikey is not None:
            left = self._index.get(ikey, 0) - 1
            if left > 0:
                self._index[ikey] = left
            else:
                self._index.pop(ikey, None)

    # --- reading and acknowledging ----------------------------------------------------------------

    def holds(self, topic: str, key: Any) -> bool:
        """True while ``key`` of ``topic`` has spilled records not yet delivered: new sends must queue."""
        if key is None or not self._index:
            return False
        return (topic, _as_bytes(key)) in self._index

    def chunks(self, after: int = -1) -> Iterator[tuple[int, list[SpillRecord]]]:
        """Committed chunks whose key is greater than ``after``, oldest first, with their unacked records."""
        with self._cond:
            keys = [k for k in self._chunks if k > after]
        for chunk_key in keys:
            row = self._cache.get(chunk_key)
            with self._cond:
                chunk = self._chunks.get(chunk_key)
                pending = set(chunk.pending) if chunk is not None else set()
            if row is None or not pending:
                continue
            yield chunk_key, [r for r in map(SpillRecord._make, row[1]) if r.seq in pending]

    def ack(self, seqs: Sequence[int] | int) -> None:
        """The broker took these records (or they failed for good): forget them, delete emptied chunks."""
        if isinstance(seqs, int):
            seqs = (seqs,)
        with self._cond:
            for seq in seqs:
                chunk_key = self._owner.pop(seq, None)
                if chunk_key is None:
                    continue
                chunk = self._chunks[chunk_key]
                size, ikey = chunk.pending.pop(seq)
                self._forget(seq, size, ikey)
                self._totals["acked"] += 1
                if not chunk.pending:
                    del self._chunks[chunk_key]
                    self._deletes.append(chunk_key)
            self._cond.notify_all()

    def pop_callback(self, seq: int) -> DeliveryCallback | None:
        with self._cond:
            return self._callbacks.pop(seq, None)

    def compact(self) -> int:
        """Rewrite partly acknowledged chunks with only their pending records (fewer duplicates after a
        crash). Returns the number of chunks rewritten."""
        rewritten = 0
        with self._cond:
            partial = [(k, set(c.pending)) for k, c in self._chunks.items() if len(c.pending) < c.size]
        for chunk_key, pending in partial:
            row = self._cache.get(chunk_key)
            if row is None:
                continue
            rows = [r for r in row[1] if r[0] in pending]
            with self._cond:
                chunk = self._chunks.get(chunk_key)
                if chunk is None:
                    continue
                rows = [r for r in rows if r[0] in chunk.pending]
                self._cache.set(chunk_key, (FORMAT, rows), retry=True)
                chunk.size = len(rows)
            rewritten += 1
        return rewritten

    # --- state -------------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Records accepted and not yet acknowledged."""
        return self._depth

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def uncommitted(self) -> int:
        """Records accepted and not yet on disk (async appends waiting for the writer)."""
        return max(0, self._next_seq - 1 - self._committed)

    def __len__(self) -> int:
        return self._depth

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "cluster": self.cluster,
                "path": str(self.path),
                "depth": self._depth,
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
                "chunks": len(self._chunks),
                "keys_waiting": len(self._index),
                "uncommitted": len(self._appends),
                "commit": self.commit_mode,
                **self._totals,
            }

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued, then release the directory; the remaining records wait for the next run."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            self._wake.notify_all()
        self._writer.join(timeout)
        with contextlib.suppress(Exception):
            self.compact()
        self._cache.close()
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            self._lock_fh.close()

    def __enter__(self) -> SpillQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SpillSlot:
    """An exclusively held sub-directory ``<base>/<n>`` of a spill directory.

    A client without a stable client id takes the first slot no live process holds, so the next run of a
    crashed process finds (and replays) what the crash left in slot 0, and two producers of one app never
    share a queue.
    """

    def __init__(self, base: Path, max_slots: int = 256) -> None:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(max_slots):
            path = base / str(n)
            path.mkdir(exist_ok=True)
            fh = open(path / "slot.lock", "a+")  # noqa: SIM115 - held until release()
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self.path, self._fh = path, fh
            return
        raise ConfigError(f"all {max_slots} spill slots under {base} are in use")

    def release(self) -> None:
        if self._fh.closed:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()


def spill_dir(options: Mapping[str, Any], cache_dir: Path) -> Path:
    """The spill directory from local options: ``ykafka.spill.dir``, else ``<cache dir>/spill``."""
    raw = options.get("ykafka.spill.dir")
    return Path(raw).expanduser() if raw else cache_dir / "spill"
