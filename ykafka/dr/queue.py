"""The durable local spill queue: where messages wait on disk while their cluster cannot take them.

One :class:`SpillQueue` per cluster, stored in a ``diskcache.Cache`` under ``<spill dir>/<cluster>``.
Records reach that cache in *chunks*: a single writer thread commits whatever is waiting as one row in
one SQLite transaction, so spilling costs a share of a commit instead of one commit per message. A
chunk's key is the sequence number of its first record; sequences only grow, so reading chunks in key
order replays oldest first. A record leaves the queue only when :meth:`SpillQueue.ack` says the broker
took it; a chunk row is deleted when all its records are acked (a crash in between replays the chunk
again: duplicates, never loss).

A ``sync`` append does not wait for that commit. It writes the record to an append-only *journal*
(``<queue>/journal/<n>.wal``, one unbuffered ``os.write`` of a length + CRC32 framed record) and returns:
from then on the record survives a SIGKILL. The
writer moves journaled records into chunks like async ones, and the transaction that stores a chunk also
stores the *watermark*, the highest sequence number committed. A journal segment is deleted once the
watermark covers it. On open, journal records above the watermark (written, not yet committed when the
last process died) are committed before anything else; a torn frame at a segment's end is the write the
crash interrupted, its ``append`` never returned, and it is dropped with a log line.

With ``fsync`` (survives power loss) ``append`` still never waits for the disk: the store runs with
SQLite ``synchronous=FULL``, so each chunk commit is one group fsync for every record gathered since
the last (at most ~50 ms or a chunk of records), as databases and Kafka's log flush do. A record is
read back for replay only from a committed chunk, so the delivery callback of a spilled message, which
fires on the broker's acknowledgement of its replay, always follows its fsync (docs/disaster-recovery.md).

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
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import diskcache
import structlog

from ykafka.dr.chunks import _Chunk
from ykafka.dr.journal import (
    FORMAT,
    PROCESS_TOKEN,
    WATERMARK_KEY,
    CommitMode,
    DeliveryCallback,
    IndexKey,
    SpillRecord,
    _as_bytes,
    _Journal,
    _size,
    normalize_headers,
    read_segment,
)
from ykafka.dr.spilldir import SPILL_DEFAULTS
from ykafka.errors import ClosedError, ConfigError, SpillFullError

log = structlog.get_logger(__name__)

# an accepted record waiting for its chunk commit: (record row as stored, size, journaled, index key);
# journaled: on disk already (sync append), so a failed commit is retried, never dropped. A plain tuple:
# it is made on the hot path.
_Append = tuple[tuple[Any, ...], int, bool, IndexKey | None]
#: handler(records, error) of in-memory records whose commit failed, each with its delivery callback
CommitErrorHandler = Callable[[list[tuple[SpillRecord, DeliveryCallback | None]], Exception], None]


class SpillQueue:
    """A cluster's durable queue of messages waiting to be (re)sent. Thread-safe."""

    def __init__(self, directory: str | os.PathLike[str], cluster: str, *, max_bytes: int = SPILL_DEFAULTS.max_bytes,
                 commit: CommitMode = SPILL_DEFAULTS.commit, fsync: bool = SPILL_DEFAULTS.fsync,
                 async_max_pending: int = SPILL_DEFAULTS.async_max_pending,
                 chunk_records: int = 5000, on_commit_error: CommitErrorHandler | None = None,
                 journal_segment_bytes: int = 4 << 20) -> None:
        if chunk_records < 1 or journal_segment_bytes < 1:
            raise ConfigError(f"spill queue of {cluster}: chunk_records and journal_segment_bytes must be at least 1")
        self.cluster = cluster
        self.path = Path(directory) / re.sub(r"[^A-Za-z0-9._-]", "_", cluster)
        self.max_bytes = max_bytes
        self.commit_mode: CommitMode = commit
        self.fsync = fsync
        self.async_max_pending = async_max_pending
        self.chunk_records = chunk_records
        # journaled records wake the writer per full chunk, else its 50 ms tick commits them: a wake per
        # record would make it contend for the GIL with the appending thread at every os.write
        self._journal_batch = chunk_records
        self._pending_check = max(0, async_max_pending - chunk_records)  # cheap pre-check of _throttle
        self._sync = commit == "sync"
        # async records whose commit failed (they were only in memory), each with its delivery callback: the owner
        # must report them (the engine fails them through its mailbox), or they vanish without a word
        self.on_commit_error = on_commit_error
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fh = self._acquire_owner_lock()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # state and commit progress, for callers waiting on it
        self._wake = threading.Condition(self._lock)  # the writer's bell
        self._chunks: dict[int, _Chunk] = {}  # committed chunks by key (their first seq)
        self._chunk_keys: list[int] = []  # the keys ascending: a seq belongs to the last key not above it
        self._index: dict[IndexKey, int] = {}  # (topic, key) -> spilled records not yet acked
        self._ikeys: dict[IndexKey, IndexKey] = {}  # the one tuple of each key in _index
        self._callbacks: dict[int, DeliveryCallback] = {}  # seq -> user callback (this process only)
        self._appends: list[_Append] = []  # accepted, not yet committed, in seq order
        self._inflight: list[_Append] = []  # taken by the writer, being committed
        self._volatile = 0  # accepted records only in memory (async appends not yet committed)
        self._deletes: list[int] = []  # chunk keys to delete at the next commit
        self._committing = False
        self._retry_at = 0.0  # a failed commit of journaled records is retried from then on
        self._last_commit = 0.0
        self._flushers = 0  # callers of wait_committed: commit now
        self._bytes = 0
        self._depth = 0
        self._next_seq = 0
        self._watermark = -1  # highest seq committed to a chunk (persisted with it)
        self._spilled = 0
        self._totals = {"acked": 0, "commits": 0, "commit_errors": 0, "full": 0, "journal_errors": 0,
                        "fsyncs": 0, "recovered": 0, "dropped": 0}
        self._closed = False
        try:
            self._cache = diskcache.Cache(
                str(self.path), eviction_policy="none", size_limit=1 << 62, cull_limit=0, statistics=0,
                tag_index=0, sqlite_synchronous=2 if fsync else 1)
            self._journal = _Journal(self.path / "journal", fsync, journal_segment_bytes)
            self._load()
            # diskcache keeps one sqlite connection per thread; the opening thread's is closed now (it reopens on
            # its next use): left open in a thread that outlives the queue (an application's main thread, the
            # reaper of a collected producer) its descriptors outlived the queue too
            self._cache.close()
        except BaseException:
            if hasattr(self, "_cache"):
                self._cache.close()
            self._release_owner_lock()
            raise
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
        try:  # who holds it, for the message above; the lock is the flock, a full disk must not undo it
            os.ftruncate(fh.fileno(), 0)
            os.pwrite(fh.fileno(), f"pid {os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        return fh

    def _release_owner_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            self._lock_fh.close()

    def _load(self) -> None:
        """Rebuild the in-memory index from the chunks a previous run left behind, then commit what its
        journal holds beyond them (sync appends that returned before their chunk commit)."""
        last = watermark = -1
        for chunk_key in self._cache.iterkeys():
            row = self._cache.get(chunk_key)
            if chunk_key == WATERMARK_KEY and isinstance(row, int):
                watermark = row
                continue
            if not isinstance(chunk_key, int) or not isinstance(row, tuple) or row[0] != FORMAT:
                log.warning("spill.skip_unknown_row", cluster=self.cluster, key=repr(chunk_key)[:80])
                continue
            records = [SpillRecord._make(raw) for raw in row[1]]
            self._add_chunk(chunk_key, records)
            last = max([last, *(r.seq for r in records)])
        self._watermark = max(watermark, last)  # queues written before the journal have no watermark row
        self._recover_journal()
        self._next_seq = self._watermark + 1
        if self._depth:
            log.info("spill.recovered", cluster=self.cluster, depth=self._depth, bytes=self._bytes,
                     chunks=len(self._chunks), journaled=self._totals["recovered"], path=str(self.path))

    def _recover_journal(self) -> None:
        """Commit journal records above the watermark (in seq order), then delete the segments."""
        files = self._journal.segment_files()
        if not files:
            return
        found: dict[int, SpillRecord] = {}
        ours: list[Path] = []
        for _, path in files:
            is_segment, records = read_segment(path, self.cluster)
            if not is_segment:
                continue
            ours.append(path)
            for record in records:
                if record.seq > self._watermark:
                    found.setdefault(record.seq, record)
        records = [found[seq] for seq in sorted(found)]
        if records:
            rows = [tuple(r) for r in records]
            with self._cache.transact(retry=True):  # if this raises the queue does not open; nothing is lost
                for start in range(0, len(rows), self.chunk_records):
                    part = rows[start:start + self.chunk_records]
                    self._cache.set(part[0][0], (FORMAT, part), retry=True)
                self._cache.set(WATERMARK_KEY, rows[-1][0], retry=True)
            for start in range(0, len(records), self.chunk_records):
                part_records = records[start:start + self.chunk_records]
                self._add_chunk(part_records[0].seq, part_records)
            self._watermark = records[-1].seq
            self._totals["recovered"] = len(records)
            log.info("spill.journal_recovered", cluster=self.cluster, records=len(records), segments=len(ours),
                     first=records[0].seq, last=records[-1].seq)
        for path in ours:
            with contextlib.suppress(OSError):
                path.unlink()

    def _add_chunk(self, chunk_key: int, records: Sequence[SpillRecord]) -> None:
        """Track the records of a chunk read back from disk (on open)."""
        items = []
        for record in records:
            ikey = record.index_key
            self._bytes += record.size
            self._depth += 1
            if ikey is not None:
                ikey = self._count_key(ikey)
            items.append((record.seq, record.size, ikey))
        self._place(chunk_key, _Chunk(items))

    def _place(self, chunk_key: int, chunk: _Chunk) -> None:
        if chunk_key not in self._chunks:
            insort(self._chunk_keys, chunk_key)
        self._chunks[chunk_key] = chunk

    def _count_key(self, ikey: IndexKey) -> IndexKey:
        """Count one more spilled record of ``ikey``; return the one shared tuple of that key (so a million
        records of a hundred keys keep a hundred tuples, not a million)."""
        shared = self._ikeys.setdefault(ikey, ikey)
        self._index[shared] = self._index.get(shared, 0) + 1
        return shared

    def _chunk_of(self, seq: int) -> tuple[int, _Chunk] | None:
        i = bisect_right(self._chunk_keys, seq) - 1
        if i < 0:
            return None
        chunk_key = self._chunk_keys[i]
        return chunk_key, self._chunks[chunk_key]

    # --- appending ---------------------------------------------------------------------------------

    def append(self, topic: str, value: Any = None, key: Any = None, headers: Any = None, timestamp: int = 0,
               partition: int = -1, on_delivery: DeliveryCallback | None = None,
               wait: bool | None = None, timeout: float | None = None) -> int:
        """Spill one message; return its sequence number.

        ``wait`` (default: the queue's commit mode is ``sync``) returns only once the record is on disk:
        written to the journal (survives SIGKILL; with ``fsync`` stable storage follows at the next group
        commit, before the record can be replayed). Without it the
        record is only queued for the writer. Either way the call blocks while more than
        ``async_max_pending`` records await their commit to the store. Raises :class:`SpillFullError`
        when the size cap would be exceeded or the journal write failed (the message is then not
        accepted); nothing is ever dropped silently.
        """
        key_b = key if key is None or key.__class__ is bytes else _as_bytes(key)
        value_b = value if value is None or value.__class__ is bytes else _as_bytes(value)
        hdrs = normalize_headers(headers) if headers else None
        size = _size(topic, key_b, value_b, hdrs)
        sync = self._sync if wait is None else wait
        timestamp = int(timestamp) if timestamp else 0
        partition = -1 if partition is None else int(partition)
        with self._lock:
            if self._closed:
                raise ClosedError(f"spill queue of {self.cluster} is closed")
            if self._bytes + size > self.max_bytes:
                self._totals["full"] += 1
                raise SpillFullError(f"spill queue of cluster {self.cluster} is full: {self._bytes} of "
                                     f"{self.max_bytes} bytes used (ykafka.spill.max.bytes); message to "
                                     f"{topic!r} not accepted")
            seq = self._next_seq
            row = (seq, topic, key_b, value_b, hdrs, timestamp, partition, PROCESS_TOKEN)  # a SpillRecord's fields
            if sync:
                try:
                    self._journal.write(row[:7])  # the origin is the segment header's
                except (OSError, ValueError) as exc:  # disk full, I/O error: not accepted, the caller hears it
                    self._totals["journal_errors"] += 1
                    log.error("spill.journal_write_failed", cluster=self.cluster, seq=seq, error=str(exc))
                    raise SpillFullError(f"spill journal write to {self._journal.dir} failed: {exc}; message to "
                                         f"{topic!r} not accepted") from exc
            self._next_seq = seq + 1
            ikey = None
            if key_b is not None:  # counted from acceptance so later sends of the key queue behind it
                ikey = self._count_key((topic, key_b))
            self._bytes += size
            self._depth += 1
            self._spilled += 1
            if on_delivery is not None:
                self._callbacks[seq] = on_delivery
            appends = self._appends
            appends.append((row, size, sync, ikey))
            if not sync:
                self._volatile += 1
                self._wake.notify()  # only in memory: commit it soon
            elif len(appends) >= self._journal_batch:
                self._wake.notify()  # on disk already: let the writer sleep until a batch is worth a commit
            if len(appends) > self._pending_check:
                self._throttle(timeout)
        return seq

    def _throttle(self, timeout: float | None) -> None:
        """Block while more than ``async_max_pending`` records await their commit (bounded memory)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._appends) + len(self._inflight) > self.async_max_pending and not self._closed:
            if not self._wait(deadline):
                break  # accepted; it stays queued for the writer

    def _wait(self, deadline: float | None) -> bool:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
        return True

    def _settled(self) -> int:
        """Every record up to this seq is committed to the store (or, async only, failed)."""
        if self._inflight:
            return self._inflight[0][0][0] - 1
        if self._appends:
            return self._appends[0][0][0] - 1
        return self._next_seq - 1

    def wait_committed(self, timeout: float | None = None) -> bool:
        """Wait until everything accepted so far is committed to the store (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_seq - 1
            self._flushers += 1  # the writer commits at once instead of gathering a batch
            try:
                if self._settled() < target:
                    self._wake.notify()
                while self._settled() < target:
                    if not self._wait(deadline):
                        return False
            finally:
                self._flushers -= 1
        return True

    # --- the writer --------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        """Moves accepted records into chunks, deletes acknowledged chunks and spent journal segments."""
        with self._cond:
            while True:
                if not self._appends and not self._deletes:
                    if self._closed:
                        return
                    if not self._wake.wait(0.05):  # idle: a fully committed active segment goes too
                        self._prune_journal(idle=True)
                    continue
                now = time.monotonic()
                delay = self._retry_at - now
                if not (self._closed or self._volatile or self._flushers or len(self._appends) >= self._journal_batch):
                    delay = max(delay, self._last_commit + 0.05 - now)  # journaled records only: gather a batch
                if delay > 0 and not self._closed:
                    self._wake.wait(delay)
                    continue
                if not self._commit_waiting() and self._closed:
                    return  # the disk refuses; journaled records wait in the journal for the next start

    def _commit_waiting(self) -> bool:
        """Take what is waiting and commit it as one transaction. Called with ``_cond`` held; False when
        the commit failed."""
        self._committing = True
        self._last_commit = time.monotonic()
        take = self._inflight = self._appends[: self.chunk_records]
        del self._appends[: len(take)]
        deletes, self._deletes = self._deletes, []
        self._cond.release()
        error: Exception | None = None
        try:
            with self._cache.transact(retry=True):
                if take:
                    rows = [a[0] for a in take]
                    self._cache.set(rows[0][0], (FORMAT, rows), retry=True)
                    self._cache.set(WATERMARK_KEY, rows[-1][0], retry=True)
                for chunk_key in deletes:
                    self._cache.delete(chunk_key, retry=True)
        except Exception as exc:  # disk full, I/O error: nothing of this transaction was stored
            error = exc
        finally:
            self._cond.acquire()
            self._committing = False
            self._inflight = []
        self._totals["commits"] += 1
        if self.fsync and error is None:
            self._totals["fsyncs"] += 1  # the commit of a synchronous=FULL store: one group fsync
        dropped: list[tuple[SpillRecord, DeliveryCallback | None]] = []
        if error is None:
            if take:
                chunk_key = take[0][0][0]
                self._place(chunk_key, _Chunk([(row[0], size, ikey) for row, size, _, ikey in take]))
                if self._volatile:
                    self._volatile -= sum(1 for a in take if not a[2])
                self._watermark = take[-1][0][0]
                self._prune_journal()
        else:
            self._totals["commit_errors"] += 1
            self._deletes[:0] = deletes  # retried with the next commit
            keep = [a for a in take if a[2]]  # on disk in the journal: retried, never dropped
            for row, size, journaled, _ in take:
                if not journaled:  # only ever in memory: reported failed, as before
                    record = SpillRecord._make(row)
                    self._volatile -= 1
                    self._forget(record.seq, size, record.index_key)
                    dropped.append((record, self._callbacks.pop(record.seq, None)))
            self._totals["dropped"] += len(dropped)
            self._appends[:0] = keep
            if keep or deletes:
                self._retry_at = time.monotonic() + 1.0
        self._cond.notify_all()
        if error is not None:
            self._cond.release()
            try:
                log.error("spill.commit_failed", cluster=self.cluster, records=len(take), dropped=len(dropped),
                          retried=len(take) - len(dropped), error=str(error))
                if dropped:
                    if self.on_commit_error is not None:
                        self.on_commit_error(dropped, error)
                    else:
                        log.error("spill.dropped_unreported", cluster=self.cluster, records=len(dropped))
            finally:
                self._cond.acquire()
        return error is None

    def _prune_journal(self, idle: bool = False) -> None:
        if self._journal.retired or (idle and self._journal.active is not None):
            self._journal.prune(self._watermark, idle)

    def _forget(self, seq: int, size: int, ikey: IndexKey | None) -> None:
        self._bytes -= size
        self._depth -= 1
        if ikey is not None:
            left = self._index.get(ikey, 0) - 1
            if left > 0:
                self._index[ikey] = left
            else:
                self._index.pop(ikey, None)
                self._ikeys.pop(ikey, None)

    # --- reading and acknowledging ----------------------------------------------------------------

    def holds(self, topic: str, key: Any) -> bool:
        """True while ``key`` of ``topic`` has spilled records not yet delivered: new sends must queue."""
        if key is None or not self._index:
            return False
        return (topic, _as_bytes(key)) in self._index

    def chunks(self, after: int = -1) -> Iterator[tuple[int, list[SpillRecord]]]:
        """Committed chunks whose key is greater than ``after``, oldest first, with their unacked records.

        Records accepted before the call are waited for (up to a second) until the writer committed them,
        so a replayer sees every message spilled so far."""
        if self._appends or self._inflight:
            self.wait_committed(1.0)
        with self._cond:
            keys = [k for k in self._chunks if k > after]
        for chunk_key in keys:
            row = self._cache.get(chunk_key)
            with self._cond:
                chunk = self._chunks.get(chunk_key)
                pending = chunk.pending() if chunk is not None else set()
            if row is None or not pending:
                continue
            yield chunk_key, [r for r in map(SpillRecord._make, row[1]) if r.seq in pending]

    def ack(self, seqs: Sequence[int] | int) -> None:
        """The broker took these records (or they failed for good): forget them, delete emptied chunks."""
        if isinstance(seqs, int):
            seqs = (seqs,)
        with self._cond:
            for seq in seqs:
                found = self._chunk_of(seq)
                if found is None:
                    continue
                chunk_key, chunk = found
                popped = chunk.pop(seq)
                if popped is None:
                    continue
                self._forget(seq, *popped)
                self._totals["acked"] += 1
                if not chunk.left:
                    del self._chunks[chunk_key]
                    del self._chunk_keys[bisect_left(self._chunk_keys, chunk_key)]
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
            partial = [(k, c.pending()) for k, c in self._chunks.items() if c.left < c.size]
        for chunk_key, pending in partial:
            row = self._cache.get(chunk_key)
            if row is None:
                continue
            rows = [r for r in row[1] if r[0] in pending]
            with self._cond:
                chunk = self._chunks.get(chunk_key)
                if chunk is None:
                    continue
                live = chunk.pending()
                rows = [r for r in rows if r[0] in live]
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
        """Records accepted and not yet on disk (async appends waiting for the writer; journaled sync
        appends are on disk)."""
        return self._volatile

    @property
    def journal_bytes(self) -> int:
        """Bytes in journal segment files (records on disk, not yet or just committed to the store)."""
        with self._cond:
            return self._journal.bytes

    def __len__(self) -> int:
        return self._depth

    @property
    def watermark(self) -> int:
        """Highest seq committed to the store; with ``fsync``, every record up to it is on stable storage.
        A lock-free read (delivery callbacks may check it)."""
        return self._watermark

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
                "uncommitted": self._volatile,
                "pending_commit": len(self._appends) + len(self._inflight),
                "journal_bytes": self._journal.bytes,
                "journal_segments": self._journal.segments,
                "commit": self.commit_mode,
                "fsync": self.fsync,
                "spilled": self._spilled,
                "watermark": self._watermark,
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
        with self._cond:
            if not self._writer.is_alive() and not self._appends and not self._inflight:
                with contextlib.suppress(OSError):
                    self._journal.retire()
                    self._journal.prune(self._watermark)  # everything committed: the journal is spent
            self._journal.close()
        self._cache.close()
        self._release_owner_lock()

    def __enter__(self) -> SpillQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
