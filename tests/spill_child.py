"""A spilling process for the journal tests: ``python -m tests.spill_child MODE SPILL_DIR RECORD_FILE [options]``.

``append``: open the spill queue of cluster ``c`` (``--fsync``, ``--segment-bytes``), append ``--count``
messages of ``--keys`` keys from one thread (values ``<i>:<padding>``) and write ``<seq> <key> <i>`` to
RECORD_FILE once each ``append`` returned (line-buffered: a line on disk means its append returned);
``--ack`` runs a replayer-like thread that acknowledges every committed record and writes ``K <seq>``
lines just before it calls ``ack``. Then ``DONE``, and it waits to be killed. ``--selfkill`` SIGKILLs itself
right after the last append returned (the writer has not committed the tail yet).
``diskerror``: appends, then lowers RLIMIT_FSIZE so journal writes and commits hit EFBIG, records
``F <n>`` for each append refused with SpillFullError, lifts the limit, appends more, closes cleanly.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ykafka.dr.queue import SpillQueue
from ykafka.errors import SpillFullError
from ykafka.logs import configure


def value(i: int, pad: int = 100) -> bytes:
    head = f"{i}:".encode()
    return head + b"x" * max(0, pad - len(head))


def acker(queue: SpillQueue, out: object, stop: threading.Event) -> None:
    """Acknowledge what reaches the store, as a replayer does once the broker took it."""
    while not stop.is_set():
        seqs = [r.seq for _, records in queue.chunks() for r in records]
        if seqs:  # recorded before the ack: a kill in between leaves an acked-looking record that is still there
            out.write("".join(f"K {seq}\n" for seq in seqs))  # type: ignore[attr-defined]
            queue.ack(seqs)
        time.sleep(0.01)


def append_mode(args: argparse.Namespace) -> None:
    queue = SpillQueue(args.dir, "c", fsync=args.fsync, journal_segment_bytes=args.segment_bytes)
    out = open(args.record, "w", buffering=1)  # noqa: SIM115 - line-buffered, lives until the kill
    stop = threading.Event()
    if args.ack:
        threading.Thread(target=acker, args=(queue, out, stop), daemon=True).start()
    for i in range(args.count):
        key = str(i % args.keys).encode()
        seq = queue.append("t", value(i), key=key)
        if args.selfkill and i == args.count - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        out.write(f"{seq} {key.decode()} {i}\n")
    out.write("DONE\n")
    time.sleep(600)


def diskerror_mode(args: argparse.Namespace) -> None:
    """Journal writes fail for real (EFBIG past RLIMIT_FSIZE): refused appends raise, accepted ones stay."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
    queue = SpillQueue(args.dir, "c", journal_segment_bytes=1 << 30)
    out = open(args.record, "w", buffering=1)  # noqa: SIM115
    i = 0

    def append(n: int) -> None:
        nonlocal i
        for _ in range(n):
            key = str(i % args.keys).encode()
            try:
                seq = queue.append("t", value(i), key=key)
                out.write(f"{seq} {key.decode()} {i}\n")
            except SpillFullError as exc:
                out.write(f"F {i} {str(exc)!r}\n")
            i += 1

    append(200)
    assert queue.wait_committed(10)
    journal = Path(args.dir) / "c" / "journal"
    size = max(p.stat().st_size for p in journal.glob("*.wal"))
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 300, hard))  # ~1.5 more frames fit in the segment
    append(20)
    under_limit = queue.wait_committed(2.5)  # the store's files cannot grow either: commits fail, are retried
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    append(100)
    committed = queue.wait_committed(30)
    status = queue.status()
    queue.close()
    out.write(f"STATUS under_limit={under_limit} committed={committed} journal_errors={status['journal_errors']} "
              f"commit_errors={status['commit_errors']}\n")
    out.write("DONE\n")


def asyncerror_mode(args: argparse.Namespace) -> None:
    """In-memory records (``append(wait=False)``, as a re-routed message is spilled) whose commit fails for real
    (EFBIG past RLIMIT_FSIZE): each is handed to ``on_commit_error`` with its own callback (``D <seq> <i>``)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    out = open(args.record, "w", buffering=1)  # noqa: SIM115

    def dropped(records: list[tuple[Any, Any]], exc: Exception) -> None:
        for record, callback in records:
            out.write(f"D {record.seq} {callback.args[0] if callback is not None else -1}\n")

    queue = SpillQueue(args.dir, "c", journal_segment_bytes=1 << 30, on_commit_error=dropped)
    i = 0

    def append(n: int, wait: bool) -> None:
        nonlocal i
        for _ in range(n):
            key = str(i % args.keys).encode()
            seq = queue.append("t", value(i), key=key, wait=wait, on_delivery=functools.partial(_reported, i))
            out.write(f"{seq} {key.decode()} {i}\n")
            i += 1

    append(50, wait=True)
    assert queue.wait_committed(10)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # no file of the store can grow: commits fail
    append(30, wait=False)
    queue.wait_committed(2.5)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    append(20, wait=False)
    committed = queue.wait_committed(30)
    status = queue.status()
    queue.close()
    out.write(f"STATUS committed={committed} commit_errors={status['commit_errors']} dropped={status['dropped']}\n")
    out.write("DONE\n")


def _reported(i: int, err: Any, msg: Any) -> None:
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["append", "diskerror", "asyncerror"])
    parser.add_argument("dir")
    parser.add_argument("record")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--fsync", action="store_true")
    parser.add_argument("--ack", action="store_true")
    parser.add_argument("--selfkill", action="store_true")
    parser.add_argument("--segment-bytes", type=int, default=4 << 20)
    args = parser.parse_args()
    configure("warning")
    if args.mode == "append":
        append_mode(args)
    elif args.mode == "asyncerror":
        asyncerror_mode(args)
    else:
        diskerror_mode(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- the parent's side ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
CHILD = [sys.executable, "-m", "tests.spill_child"]


class Recorded:
    """What the child wrote: accepted appends (seq, key, i), acknowledged seqs, refused appends, the rest."""

    def __init__(self, path: Path) -> None:
        self.accepted: list[tuple[int, bytes, int]] = []
        self.acked: set[int] = set()
        self.refused: list[str] = []
        self.other: list[str] = []
        text = path.read_text()
        lines = text.split("\n")
        if not text.endswith("\n"):
            lines = lines[:-1]  # a line cut by the kill: its append returned, the write did not finish
        for line in lines:
            parts = line.split(" ")
            if parts[0].isdigit():
                self.accepted.append((int(parts[0]), parts[1].encode(), int(parts[2])))
            elif parts[0] == "K":
                self.acked.add(int(parts[1]))
            elif parts[0] == "F":
                self.refused.append(line)
            elif line:
                self.other.append(line)


def lines_in(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_after(args: list[str], record: Path, lines: int, timeout: float = 120.0) -> None:
    """Run the child until ``record`` has ``lines`` lines, then SIGKILL it mid-stream."""
    import subprocess

    err = record.with_suffix(".err")
    with open(err, "w") as err_fh:
        proc = subprocess.Popen([*CHILD, *args], cwd=ROOT, stderr=err_fh)
    deadline = time.monotonic() + timeout
    try:
        while lines_in(record) < lines and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"child ended early ({proc.returncode}): {err.read_text()[-2000:]}"
        assert lines_in(record) >= lines, "child too slow"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def check_reopened(directory: Path, recorded: Recorded) -> dict[str, int]:
    """Reopen the queue: every accepted, unacknowledged message is there once, with its key and value,
    each key's messages in append order. Beyond the recorded ones only the append the kill interrupted
    (it may have returned before its line was written) may appear. Acknowledged ones may come back
    (the ack's chunk delete rides on the next commit: a replay duplicate, never a loss)."""
    with SpillQueue(directory, "c") as queue:
        records = [r for _, rs in queue.chunks() for r in rs]
        status = queue.status()
        next_seq = queue.append("t", b"after", key=b"0")
    seqs = [r.seq for r in records]
    assert len(seqs) == len(set(seqs)), "a record stored twice"
    assert seqs == sorted(seqs), "chunks out of seq order"
    by_seq = {r.seq: r for r in records}
    accepted = {seq: (key, i) for seq, key, i in recorded.accepted}
    missing = [seq for seq in accepted if seq not in by_seq and seq not in recorded.acked]
    assert not missing, f"{len(missing)} accepted messages lost, first {missing[:5]}"
    for seq, (key, i) in accepted.items():
        if seq in by_seq:
            assert (by_seq[seq].key, by_seq[seq].value) == (key, value(i)), seq
    last = max(accepted, default=-1)
    extra = set(by_seq) - set(accepted)
    assert extra <= {last + 1}, f"unexpected records {sorted(extra)[:5]}"
    per_key: dict[bytes | None, list[int]] = {}
    for record in records:
        per_key.setdefault(record.key, []).append(int((record.value or b"0:").split(b":")[0]))
    assert all(values == sorted(values) for values in per_key.values()), "a key's messages out of order"
    assert next_seq > max(seqs, default=-1) and next_seq > last
    assert status["depth"] == len(records)
    return {"accepted": len(accepted), "present": len(records), "acked": len(recorded.acked),
            "acked_back": len(set(by_seq) & recorded.acked), "recovered": status["recovered"],
            "extra": len(extra)}
