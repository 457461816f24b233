"""The spill journal: the on-disk format a sync append writes before it returns.

Segments ``<queue>/journal/<n>.wal`` hold CRC-framed marshal records; a record survives a SIGKILL once
``os.write`` returned. Power-loss safety (``fsync``) comes from the store's group commits, not from here.
:class:`ykafka.dr.queue.SpillQueue` moves journaled records into its store and deletes a segment once
its watermark covers it.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import os
import re
import struct
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import structlog

log = structlog.get_logger(__name__)


FORMAT = 1  # chunk row layout: (FORMAT, [record tuples]); bump when the tuple layout changes
PROCESS_TOKEN = uuid.uuid4().hex  # records spilled by this process; only they can still fire callbacks
WATERMARK_KEY = "ykafka.spill.watermark"  # highest seq stored in a chunk, set in the chunk's transaction
JOURNAL_MAGIC = b"YKSPJ1"  # segment header: magic, the writer's PROCESS_TOKEN (32 hex chars), "\n"
JOURNAL_HEADER_LEN = len(JOURNAL_MAGIC) + 32 + 1
MARSHAL_VERSION = 4  # journal frame bodies: marshal of (seq, topic, key, value, headers, timestamp, partition)
_FRAME = struct.Struct("<II")  # body length, crc32(body)
_SEGMENT_RE = re.compile(r"^(\d{12})\.wal$")
_dumps, _crc32, _pack_frame, _write = marshal.dumps, zlib.crc32, _FRAME.pack, os.write  # the append hot path

CommitMode = Literal["sync", "async"]
DeliveryCallback = Callable[..., Any]
IndexKey = tuple[str, bytes]
Headers = tuple[tuple[str, bytes | None], ...]


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
class _Segment:
    number: int
    path: Path
    fd: int | None = None  # open while it is the active segment
    size: int = 0
    last_seq: int = -1  # highest seq written to it; -1: no record


class _Journal:
    """The write-ahead journal of sync appends: numbered segment files, each a header then frames.

    Not thread-safe: the queue calls it under its lock.
    A frame is ``<u32 length><u32 crc32(body)><body>``, written with one ``os.write`` on an ``O_APPEND``
    descriptor, so after a SIGKILL a segment holds whole frames, possibly followed by one torn frame.
    A failed or short write cuts the segment back and retires it: no frame is ever written after a torn one.
    """

    def __init__(self, directory: Path, fsync: bool, segment_bytes: int) -> None:
        self.dir = directory
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.dir.mkdir(exist_ok=True)
        self.active: _Segment | None = None
        self.retired: list[_Segment] = []  # full or broken segments, deleted once the watermark covers them
        self.last_seq = -1  # highest seq written
        self._next_number = 1 + max((n for n, _ in self.segment_files()), default=0)

    def segment_files(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.dir.iterdir():
            match = _SEGMENT_RE.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    # --- writing ---------------------------------------------------------------------------------

    def write(self, row: tuple[Any, ...]) -> None:
        """Append one record row (seq first); raises OSError when it did not reach the file whole."""
        body = _dumps(row, MARSHAL_VERSION)
        frame = _pack_frame(len(body), _crc32(body)) + body
        seg = self.active
        if seg is None or seg.size >= self.segment_bytes:
            if seg is not None:
                self.retire()
            seg = self._open_segment()
        try:
            written = _write(seg.fd, frame)  # type: ignore[arg-type]  # the active segment is open
        except OSError:
            self._cut(seg)
            raise
        if written != len(frame):
            self._cut(seg)
            raise OSError(errno.ENOSPC, f"short write to {seg.path}: {written} of {len(frame)} bytes")
        seg.size += written
        seg.last_seq = self.last_seq = row[0]

    def _cut(self, seg: _Segment) -> None:
        """A write failed: cut the torn frame off and retire the segment (no frame after a torn one)."""
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, seg.size)  # type: ignore[arg-type]
        self.retire()

    def _open_segment(self) -> _Segment:
        number = self._next_number
        self._next_number += 1
        path = self.dir / f"{number:012d}.wal"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        seg = _Segment(number, path, fd)
        try:
            header = JOURNAL_MAGIC + PROCESS_TOKEN.encode() + b"\n"
            if os.write(fd, header) != len(header):
                raise OSError(errno.ENOSPC, f"short write to {path}")
            if self.fsync:
                os.fdatasync(fd)
                dir_fd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)  # the new file's name is durable too
                finally:
                    os.close(dir_fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        seg.size = len(header)
        self.active = seg
        return seg

    def retire(self) -> None:
        """Stop writing to the active segment (full, broken, or fully committed and idle)."""
        seg = self.active
        if seg is None:
            return
        self.active = None
        assert seg.fd is not None
        with contextlib.suppress(OSError):
            os.close(seg.fd)
        seg.fd = None
        self.retired.append(seg)

    # --- cleaning --------------------------------------------------------------------------------

    def prune(self, watermark: int, idle: bool = False) -> int:
        """Delete retired segments whose records are all committed (``idle``: the active one too)."""
        if idle and self.active is not None and self.active.last_seq <= watermark \
                and self.active.size > JOURNAL_HEADER_LEN:
            self.retire()
        keep, removed = [], 0
        for seg in self.retired:
            if seg.last_seq <= watermark:
                try:
                    seg.path.unlink(missing_ok=True)
                    removed += 1
                    continue
                except OSError as exc:
                    log.warning("spill.journal_delete_failed", segment=str(seg.path), error=str(exc))
            keep.append(seg)
        self.retired = keep
        return removed

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.retired) + (self.active.size if self.active is not None else 0)

    @property
    def segments(self) -> int:
        return len(self.retired) + (self.active is not None)

    def close(self) -> None:
        if self.active is not None and self.active.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.active.fd)
            self.active.fd = None


def read_segment(path: Path, cluster: str = "") -> tuple[bool, list[SpillRecord]]:
    """The records of one journal segment, up to its first torn or corrupt frame (logged, dropped).
    Returns (is a journal segment, records); a file that is not one is left alone by the caller."""
    data = path.read_bytes()
    if len(data) < JOURNAL_HEADER_LEN:  # the crash came between creating a segment and writing its header
        if JOURNAL_MAGIC.startswith(data[:len(JOURNAL_MAGIC)]):
            if data:
                log.warning("spill.journal_torn", cluster=cluster, segment=path.name, offset=0,
                            dropped_bytes=len(data), reason="torn segment header", records=0)
            return True, []
        data = b""
    if not data.startswith(JOURNAL_MAGIC):
        log.warning("spill.journal_unknown_file", cluster=cluster, segment=str(path))
        return False, []
    origin = data[len(JOURNAL_MAGIC):JOURNAL_HEADER_LEN - 1].decode("ascii", "replace")
    records: list[SpillRecord] = []
    offset, reason = JOURNAL_HEADER_LEN, ""
    while offset < len(data):
        if len(data) - offset < _FRAME.size:
            reason = "torn frame header"
            break
        length, crc = _FRAME.unpack_from(data, offset)
        end = offset + _FRAME.size + length
        if length == 0 or end > len(data):
            reason = "torn frame" if length else "zero-length frame"
            break
        body = data[offset + _FRAME.size:end]
        if zlib.crc32(body) != crc:
            reason = "checksum mismatch"
            break
        try:
            row = marshal.loads(body)
            if not isinstance(row, tuple) or len(row) != 7 or not isinstance(row[0], int) \
                    or not isinstance(row[1], str):
                raise TypeError("not a record row")
            record = SpillRecord._make((*row, origin))
        except (ValueError, EOFError, TypeError) as exc:
            reason = f"undecodable frame ({exc})"
            break
        records.append(record)
        offset = end
    if offset < len(data):
        log.warning("spill.journal_torn", cluster=cluster, segment=path.name, offset=offset,
                    dropped_bytes=len(data) - offset, reason=reason, records=len(records))
    return True, records


