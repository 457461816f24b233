"""What memory keeps of the spill queue's committed chunks (the rows themselves stay on disk)."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable

from ykafka.dr.journal import IndexKey


class _Chunk:
    """What memory keeps of one committed chunk: its records' seqs (ascending), sizes and index keys in
    parallel arrays and a live flag each, about 21 bytes a record, so the queue's memory stays bounded
    while its depth is on disk (docs/benchmarks.md: a million spilled messages). The rows stay on disk."""

    __slots__ = ("seqs", "sizes", "ikeys", "live", "left", "size")

    def __init__(self, items: Iterable[tuple[int, int, IndexKey | None]] = ()) -> None:
        self.seqs = array("q")
        self.sizes = array("I")
        self.ikeys: list[IndexKey | None] = []
        self.live = bytearray()
        for seq, size, ikey in sorted(items, key=_first):
            self.seqs.append(seq)
            self.sizes.append(size)
            self.ikeys.append(ikey)
        self.live = bytearray(b"\x01") * len(self.seqs)
        self.left = len(self.seqs)  # records not acked yet
        self.size = len(self.seqs)  # records in the stored row

    def pop(self, seq: int) -> tuple[int, IndexKey | None] | None:
        """Mark ``seq`` acked; its (size, index key), or None when it is not a live record here."""
        i = bisect_left(self.seqs, seq)
        if i == len(self.seqs) or self.seqs[i] != seq or not self.live[i]:
            return None
        self.live[i] = 0
        self.left -= 1
        ikey, self.ikeys[i] = self.ikeys[i], None
        return self.sizes[i], ikey

    def pending(self) -> set[int]:
        return {seq for seq, live in zip(self.seqs, self.live, strict=True) if live}


def _first(item: tuple[int, int, IndexKey | None]) -> int:
    return item[0]
