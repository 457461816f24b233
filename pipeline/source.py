"""A streaming Kafka source for Spark on PySpark's Python Data Source API and confluent-kafka.

No JVM Kafka connector jar: the driver plans offset ranges with a confluent-kafka consumer, each Kafka
partition becomes one input partition per micro-batch (or several, see ``minPartitions``), and executors
read their range with their own consumer (no group, no commits). Offsets live in Spark's checkpoint
(``{"topic": {"partition": next}}``), so a restarted query resumes exactly where its last committed
micro-batch ended.

Rows look like those of Spark's JVM ``kafka`` source: ``topic, partition, offset, timestamp (ms), key,
value`` (binary). Options:

* ``bootstrap`` (required), ``topics`` (comma-separated; an entry ending in ``*`` is a prefix: every topic
  starting with it, looked up at each micro-batch, so topics made later join with all they hold),
  ``startingOffsets`` = ``earliest`` | ``latest``;
* ``maxOffsetsPerTrigger``: cap of records per micro-batch (split over partitions in proportion to backlog);
* ``minPartitions``: read a micro-batch in at least this many tasks, cutting a partition's range into
  sub-ranges (none below ``minRecordsPerPartition`` records, default 1);
* ``endOffsets`` = ``scan`` (default) | ``watermark``: with ``scan`` the driver fetches the last record batch
  of each partition to learn its real end, because some brokers (Tansu) report a high watermark that is
  the *base* offset of the last batch + 1; ``watermark`` trusts the broker (cheaper, right on Apache Kafka);
* ``kafka.<librdkafka property>``: passed to every consumer (security settings and the like);
* ``decode`` = ``trace`` | ``metric`` | ``client``: the executors decode the SDK's event batches of that kind where
  they read them, and the frame is packed (``pipeline.decode.PACKED_DDL``: a row an Arrow IPC stream of up to
  50,000 typed events; ``pipeline.decode.unpack`` opens a collected one).

Option names may be given in any case: Spark hands them over lower-cased (:class:`Options`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

try:  # PySpark 4.3+: Trigger.AvailableNow in bounded micro-batches (maxOffsetsPerTrigger)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark runs AvailableNow as one micro-batch
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

from ykafka import events

SCHEMA = "topic string, partition int, offset bigint, timestamp bigint, key binary, value binary"
NAME = "ykafka-kafka"

Offsets = dict[str, dict[str, int]]


class KafkaRange(InputPartition):
    """One Kafka partition's offsets [start, end) in one micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


def consumer_conf(options: Mapping[str, str], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": options["bootstrap"],
        "group.id": options.get("groupId", "ykafka-pipeline-reader"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,  # we read up to known offsets: never wait at the end of a partition
        "socket.timeout.ms": 10_000,
        "log_level": 3,
    }
    conf.update({k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")})
    conf.update(extra or {})
    return conf


class Options(dict[str, str]):
    """A source's options, their names in any case. Spark hands a Python data source its options with the names
    lower-cased (``minpartitions``), so a plain ``dict`` of them never found ``minPartitions``,
    ``maxOffsetsPerTrigger`` and the others given in Spark's own spelling: Spark's runs read every micro-batch in
    one task a Kafka partition and uncapped (found in issue 39; ``tests/test_pipeline_source.py``)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__((str(k).lower(), v) for k, v in options.items())

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(str(key).lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; reads them on executors. Under ``Trigger.AvailableNow`` (a one-shot run)
    it reads up to the ends the partitions had when the query started, in micro-batches of at most
    ``maxOffsetsPerTrigger`` records: without the hook Spark read the whole backlog in one micro-batch, whatever
    the cap, which is what bounds a batch on a cluster (pipeline/store.py)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = Options(options)
        self.topics = [t.strip() for t in self.options.get("topics", "").split(",") if t.strip()]
        if not self.topics or "bootstrap" not in self.options:
            raise ValueError("ykafka-kafka source needs options 'bootstrap' and 'topics'")
        if self.options.get("decode") not in (None, *events.TELEMETRY_KINDS):
            raise ValueError(f"ykafka-kafka source: decode must be one of {', '.join(events.TELEMETRY_KINDS)}")
        self.timeout_s = float(self.options.get("timeoutMs", "10000")) / 1000.0
        self.scan = self.options.get("endOffsets", "scan") == "scan"
        self._consumer: Any = None
        self._target: dict[tuple[str, int], int] | None = None  # AvailableNow: the ends to stop at

    # --- driver side -----------------------------------------------------------------------------

    def _driver_consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(consumer_conf(self.options))
        return self._consumer

    def _partitions(self) -> list[tuple[str, int]]:
        consumer = self._driver_consumer()
        found: list[tuple[str, int]] = []
        prefixes = tuple(t[:-1] for t in self.topics if t.endswith("*"))
        every = consumer.list_topics(timeout=self.timeout_s).topics if prefixes else {}
        named = [t for t in self.topics if not t.endswith("*")]
        named += sorted(t for t in every if t.startswith(prefixes) and t not in named)
        for topic in named:
            meta = every.get(topic) or consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
            if meta is None or meta.error is not None:
                continue  # not created yet: no data yet
            found.extend((topic, p) for p in sorted(meta.partitions))
        return found

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import TopicPartition

        consumer = self._driver_consumer()
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, partition in self._partitions():
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s)
            marks[(topic, partition)] = (max(0, low), max(0, high))
        if self.scan:
            self._scan_ends(marks)
        return marks

    def _scan_ends(self, marks: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Learn each partition's real end by reading its last record batch (see module docstring)."""
        from confluent_kafka import KafkaError, TopicPartition

        todo = {tp: high for tp, (low, high) in marks.items() if high > low}
        if not todo:
            return
        consumer = self._driver_consumer()
        consumer.assign([TopicPartition(t, p, high - 1) for (t, p), high in todo.items()])
        deadline = time.monotonic() + self.timeout_s
        try:
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.05):
                    tp = (msg.topic(), msg.partition())
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and tp in todo:
                            todo.pop(tp)
                        continue
                    low, high = marks[tp]
                    if msg.offset() + 1 > high:
                        marks[tp] = (low, msg.offset() + 1)
        finally:
            consumer.unassign()

    def initialOffset(self) -> dict:
        marks = self._watermarks()
        latest = self.options.get("startingOffsets", "earliest") == "latest"
        offsets: Offsets = {}
        for (topic, partition), (low, high) in marks.items():
            offsets.setdefault(topic, {})[str(partition)] = high if latest else low
        return offsets

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        cap = self.options.get("maxOffsetsPerTrigger")
        return ReadMaxRows(int(cap)) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: high for tp, (_low, high) in self._watermarks().items()}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The end of the next micro-batch. PySpark 4.2+ passes the start and a read limit; 4.0 / 4.1 call
        it without arguments, and then every partition is read up to its end (no limit)."""
        marks = self._watermarks()
        if self._target is not None:  # nothing past the ends of when an AvailableNow query started
            marks = {tp: (low, min(high, self._target.get(tp, low))) for tp, (low, high) in marks.items()}
        end: Offsets = {topic: dict(parts) for topic, parts in (start or {}).items()}
        backlog: dict[tuple[str, int], tuple[int, int]] = {}
        for (topic, partition), (low, high) in marks.items():
            begin = int((start or {}).get(topic, {}).get(str(partition), low))
            begin = max(begin, low)  # retention may have removed what we had not read yet
            backlog[(topic, partition)] = (begin, high)
        cap = getattr(limit, "max_rows", None)  # ReadMaxRows; ReadAllAvailable has none
        total = sum(max(0, high - begin) for begin, high in backlog.values())
        limit_rows = int(cap) if cap is not None else total
        budget = limit_rows if total > limit_rows else None
        # largest backlogs first, each a share in proportion to its backlog, never above the limit in total
        for (topic, partition), (begin, high) in sorted(backlog.items(), key=lambda kv: kv[1][0] - kv[1][1]):
            stop = high
            if budget is not None:
                share = min(high - begin, max(1, (high - begin) * limit_rows // max(1, total)), budget)
                budget -= max(0, share)
                stop = begin + max(0, share)
            end.setdefault(topic, {})[str(partition)] = max(begin, stop)
        return end

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        ranges: list[KafkaRange] = []
        for topic, parts in end.items():
            for pid, stop in parts.items():
                begin = int(start.get(topic, {}).get(pid, 0)) if start else 0
                if int(stop) > begin:
                    ranges.append(KafkaRange(topic, int(pid), begin, int(stop)))
        return split_ranges(ranges, int(self.options.get("minPartitions") or 0),
                            int(self.options.get("minRecordsPerPartition") or 1))

    def commit(self, end: dict) -> None:
        """Offsets are in Spark's checkpoint; nothing to store in Kafka."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # --- executor side ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        kind = self.options.get("decode")
        if kind:
            from .decode import packed

            yield from packed(kind, read_range(self.options, partition))
        else:
            yield from read_range(self.options, partition)


def split_ranges(ranges: list[KafkaRange], want: int, min_records: int = 1) -> list[KafkaRange]:
    """At least ``want`` ranges where the records allow it (as Spark's own source does with ``minPartitions``):
    each range is cut into parts in proportion to its share of all records, no part below ``min_records``.
    One emitter's events sit in one Kafka partition, so without this one task parses a whole micro-batch; and
    that holds with more partitions than ``want`` too, when one of them holds nearly everything (a range is cut
    even then: the 200,000 trace events of a benchmark batch in one partition beside one record in another were
    one task on one of the two cores)."""
    total = sum(r.end - r.start for r in ranges)
    if want <= 1 or total == 0:
        return ranges
    out: list[KafkaRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(round(want * size / total), size // max(1, min_records)))
        out.extend(KafkaRange(r.topic, r.partition, r.start + size * i // parts, r.start + size * (i + 1) // parts)
                   for i in range(parts))
    return out


def read_range(options: Mapping[str, str], part: KafkaRange, batch: int = 20_000) -> Iterator[Any]:
    """Yield Arrow record batches of the records in ``[part.start, part.end)`` of one partition."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    # a fetch as large as the broker allows (a record here is a batch of up to 1,000 events, ~100 KB): at the
    # 1 MB a partition default a range of 200 records took 20 round trips
    consumer = Consumer(consumer_conf(options, {"fetch.max.bytes": 52_428_800,
                                                "max.partition.fetch.bytes": 52_428_800}))
    consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
    timeout_s = float(options.get("timeoutMs", "10000")) / 1000.0
    deadline = time.monotonic() + max(30.0, timeout_s * 3)
    position = part.start
    try:
        while position < part.end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {part.topic}[{part.partition}] {position}..{part.end} timed out")
            offsets: list[int] = []
            stamps: list[int] = []
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            eof = False
            # consume() returns when it has num_messages or at the timeout: ask for exactly what is left
            for msg in consumer.consume(max(1, min(batch, part.end - position)), 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof = True
                        continue
                    raise RuntimeError(f"Kafka read error on {part.topic}[{part.partition}]: {err}")
                offset = int(msg.offset() or 0)
                if offset >= part.end:
                    position = part.end
                    continue
                offsets.append(offset)
                stamps.append(msg.timestamp()[1])
                keys.append(msg.key())
                values.append(msg.value())
                position = offset + 1
            if offsets:
                deadline = time.monotonic() + max(30.0, timeout_s * 3)
                n = len(offsets)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([part.topic] * n, pa.string()), pa.array([part.partition] * n, pa.int32()),
                     pa.array(offsets, pa.int64()), pa.array(stamps, pa.int64()),
                     pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                    names=["topic", "partition", "offset", "timestamp", "key", "value"])
            elif eof:
                break  # the range ends in a gap (compaction / aborted transactions): nothing more to read
    finally:
        consumer.close()


class KafkaDataSource(DataSource):
    """``spark.readStream.format("ykafka-kafka").option("bootstrap", ...).option("topics", ...)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        if self.options.get("decode"):
            from .decode import PACKED_DDL

            return PACKED_DDL
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)
