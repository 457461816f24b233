"""The Parquet store: layout, idempotent per-micro-batch writes, and pruned reads without Spark.

Layout under the store root (any pyarrow filesystem URI or a local path)::

    trace/date=YYYY-MM-DD/hour=HH/topic=T/b<batch>-trace-0.parquet   trace events
    metrics/date=.../hour=.../                                       metric events (incl. lag samples)
    aggregates/date=.../                                             per-window partial aggregates
    clients/date=.../                                                client events (history)
    alerts/date=.../                                                 alerts raised
    inventory/, groups/                                              batch outputs (replaced each run)
    _checkpoints/<query>/                                            Spark streaming checkpoints
    _state/                                                          alert de-duplication state

Exactly once: a micro-batch's files are named after its batch id, so when Spark re-runs a batch after a
failure (same offsets, same rows, from the checkpoint) it overwrites the same files instead of adding
copies. Readers list only the partition directories a query's time range / topic needs.

Spark parses and aggregates on the executors; each micro-batch's result is then collected to the driver
as Arrow and written from there with pyarrow (which names the files). On a cluster, bound the size of a
micro-batch with ``maxOffsetsPerTrigger`` (``ykafka pipeline run --max-offsets-per-trigger``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

PARTITION_TYPES: dict[str, str] = {"date": "string", "hour": "string", "topic": "string"}


class Store:
    """Paths and file I/O of one store root."""

    def __init__(self, root: str) -> None:
        import pyarrow.fs as pafs

        if "://" not in root:
            root = os.path.abspath(os.path.expanduser(root))
            os.makedirs(root, exist_ok=True)
        self.root = root.rstrip("/")
        self.fs, self.base = pafs.FileSystem.from_uri(self.root if "://" in self.root else f"file://{self.root}")

    def path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def uri(self, *parts: str) -> str:
        """A path Spark understands (checkpoints)."""
        return "/".join([self.root if "://" in self.root else self.root, *parts])

    # --- writing ---------------------------------------------------------------------------------

    def write(self, table: Any, dataset: str, partition_by: Sequence[str], batch_id: int, name: str) -> int:
        """Write an Arrow table under ``dataset`` partitioned hive-style; idempotent per (batch_id, name)."""
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        if table.num_rows == 0:
            return 0
        staging = self.path("_tmp", dataset, f"b{batch_id:012d}-{name}")
        self.fs.delete_dir_contents(staging, missing_dir_ok=True)
        ds.write_dataset(
            table, staging, format="parquet", filesystem=self.fs,
            partitioning=list(partition_by) or None, partitioning_flavor="hive" if partition_by else None,
            basename_template=f"b{batch_id:012d}-{name}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore", max_rows_per_group=1_000_000)
        # publish file by file with a rename, so concurrent readers never see a half-written file
        for entry in self.fs.get_file_info(pafs.FileSelector(staging, recursive=True)):
            if entry.type != pafs.FileType.File:
                continue
            target = self.path(dataset, entry.path[len(staging):].lstrip("/"))
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            self.fs.move(entry.path, target)
        self.fs.delete_dir(staging)
        return int(table.num_rows)

    def replace(self, table: Any, dataset: str) -> None:
        """Replace a batch output (inventory, group candidates) as one file."""
        import pyarrow.parquet as pq

        self.fs.create_dir(self.path(dataset), recursive=True)
        tmp = self.path(dataset, "_data.parquet.tmp")
        pq.write_table(table, tmp, filesystem=self.fs)
        self.fs.move(tmp, self.path(dataset, "data.parquet"))

    def read_json(self, *parts: str) -> Any:
        try:
            with self.fs.open_input_stream(self.path(*parts)) as stream:
                return json.loads(stream.read())
        except (FileNotFoundError, OSError):
            return None

    def write_json(self, value: Any, *parts: str) -> None:
        target = self.path(*parts)
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        tmp = target + ".tmp"
        with self.fs.open_output_stream(tmp) as stream:
            stream.write(json.dumps(value, default=str).encode())
        self.fs.move(tmp, target)

    # --- reading ---------------------------------------------------------------------------------

    def files(self, dataset: str, prefixes: Iterable[str] | None = None) -> list[str]:
        """Parquet files of ``dataset`` under the given partition sub-paths (all when None)."""
        import pyarrow.fs as pafs

        roots = [self.path(dataset)] if prefixes is None else [self.path(dataset, p) for p in prefixes]
        found: list[str] = []
        for root in roots:
            info = self.fs.get_file_info(root)
            if info.type != pafs.FileType.Directory:
                continue
            for entry in self.fs.get_file_info(pafs.FileSelector(root, recursive=True)):
                if entry.type == pafs.FileType.File and entry.path.endswith(".parquet"):
                    found.append(entry.path)
        return sorted(found)

    def read(self, dataset: str, prefixes: Iterable[str] | None = None, filter: Any = None,
             columns: Sequence[str] | None = None) -> Any:
        """An Arrow table of ``dataset`` restricted to partition sub-paths and a row filter."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        files = self.files(dataset, prefixes)
        if not files:
            return pa.table({})
        present = _partition_names(files, self.path(dataset))
        partitioning = ds.partitioning(
            pa.schema([(n, pa.string()) for n in present]), flavor="hive") if present else None
        dataset_ = ds.dataset(files, filesystem=self.fs, format="parquet", partitioning=partitioning,
                              partition_base_dir=self.path(dataset))
        return dataset_.to_table(filter=filter, columns=list(columns) if columns else None)


def _partition_names(files: Sequence[str], base: str) -> list[str]:
    rel = files[0][len(base):].strip("/").split("/")[:-1]
    return [segment.split("=", 1)[0] for segment in rel if "=" in segment]


def hours_between(start: dt.datetime, end: dt.datetime) -> list[tuple[str, str]]:
    """``(date, hour)`` partition values covering [start, end] (UTC)."""
    cursor = start.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    stop = end.astimezone(dt.UTC)
    out = []
    while cursor <= stop:
        out.append((cursor.strftime("%Y-%m-%d"), cursor.strftime("%H")))
        cursor += dt.timedelta(hours=1)
    return out


def days_between(start: dt.datetime, end: dt.datetime) -> list[str]:
    cursor = start.astimezone(dt.UTC).date()
    out = []
    while cursor <= end.astimezone(dt.UTC).date():
        out.append(cursor.isoformat())
        cursor += dt.timedelta(days=1)
    return out


def hour_prefixes(start: dt.datetime, end: dt.datetime, topic: str | None = None) -> list[str]:
    return [f"date={d}/hour={h}" + (f"/topic={topic}" if topic else "") for d, h in hours_between(start, end)]


def parse_duration(text: str) -> dt.timedelta:
    """``90s``, ``15m``, ``1h``, ``2d`` or a number of seconds."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
        seconds = float(number) * unit
        if not math.isfinite(seconds):
            raise ValueError(seconds)
        return dt.timedelta(seconds=seconds)
    except (ValueError, OverflowError):  # 1e400d, inf, nan: not a duration either
        raise ValueError("invalid duration: use a number with s, m, h, d or w, e.g. 90s, 15m, 1h, 2d") from None

