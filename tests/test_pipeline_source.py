"""The ykafka-kafka streaming source's planning and reading on a real broker (driver / executor code, no Spark)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pipeline.source import KafkaStreamReader, read_range
from tests.pipeline_fixtures import unique

# the source's reads past a high watermark that lags the log (Tansu's quirk: the last batch's base offset + 1)
pytestmark = pytest.mark.broker("tansu")


def _topic(bootstrap: str, partitions: int) -> str:
    name = unique("src")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep it alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def _read(options: dict[str, str], reader: KafkaStreamReader, start: dict, end: dict) -> list[tuple[int, int, bytes]]:
    rows = []
    for part in reader.partitions(start, end):
        for batch in read_range(options, part):
            for p, o, v in zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                               batch.column("value").to_pylist(), strict=True):
                rows.append((p, o, v))
    return sorted(rows)


def test_ranges_cover_every_record_once_even_when_the_watermark_lags(obs_broker) -> None:
    bs = obs_broker.bootstrap
    topic = _topic(bs, 2)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 200})
    for i in range(5):  # one record batch of five: Tansu reports the high watermark as 1
        producer.produce(topic, f"a{i}".encode(), partition=0)
    producer.flush(10)
    for i in range(3):
        producer.produce(topic, f"b{i}".encode(), partition=1)
        producer.flush(10)
    options = {"bootstrap": bs, "topics": topic}
    reader = KafkaStreamReader(options)
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 5, "1": 3}}  # the scan found the real end of partition 0
    rows = _read(options, reader, start, end)
    assert rows == [(0, i, f"a{i}".encode()) for i in range(5)] + [(1, i, f"b{i}".encode()) for i in range(3)]
    # minPartitions: the ranges are cut into read tasks (one starting inside partition 0's record batch),
    # and together they still read every record once
    split = {**options, "minPartitions": "4"}
    cut = KafkaStreamReader(split)
    assert sorted((r.partition, r.start, r.end) for r in cut.partitions(start, end)) == [
        (0, 0, 2), (0, 2, 5), (1, 0, 1), (1, 1, 3)]
    assert _read(split, cut, start, end) == rows
    coarse = KafkaStreamReader({**split, "minRecordsPerPartition": "3"})  # no part below 3 records: no cut
    assert len(coarse.partitions(start, end)) == 2
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new: same offsets, empty batch
    assert reader.partitions(end, end) == []
    reader.stop()


def test_read_limit_splits_the_backlog_over_micro_batches_without_gaps(obs_broker) -> None:
    bs = obs_broker.bootstrap
    topic = _topic(bs, 2)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(12):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
        producer.flush(10)
    options = {"bootstrap": bs, "topics": topic, "maxOffsetsPerTrigger": "4"}
    reader = KafkaStreamReader(options)
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    start = reader.initialOffset()
    seen: list[tuple[int, int, bytes]] = []
    batches = 0
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        batch = _read(options, reader, start, end)
        assert 1 <= len(batch) <= 4
        seen.extend(batch)
        start = end
        batches += 1
    assert batches == 3
    assert sorted(seen) == sorted((i % 2, i // 2, f"v{i}".encode()) for i in range(12))
    reader.stop()


def test_a_prefix_entry_reads_every_matching_topic_including_one_made_after_the_start(obs_broker) -> None:
    """The pipeline reads ``__ykafka_trace`` and every app's own ``__ykafka_trace.<app>`` (issue 37): an entry
    ending in ``*`` is a prefix, looked up at each micro-batch, so an app's topic made later is read from its
    start; a topic outside the prefix is not read."""
    bs = obs_broker.bootstrap
    base = unique("tele")
    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the futures resolve
    for name in (base, f"{base}.app-a", f"{base}x"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": bs})
    for name in (base, f"{base}.app-a", f"{base}x"):
        producer.produce(name, name.encode())
    producer.flush(10)
    options = {"bootstrap": bs, "topics": f"{base},{base}.*"}
    reader = KafkaStreamReader(options)
    start = reader.initialOffset()
    assert start == {base: {"0": 0}, f"{base}.app-a": {"0": 0}}
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {base: {"0": 1}, f"{base}.app-a": {"0": 1}}
    admin.create_topics([NewTopic(f"{base}.app-b", 1, 1)])[f"{base}.app-b"].result(10)
    for i in range(2):
        producer.produce(f"{base}.app-b", f"b{i}".encode())
    producer.flush(10)
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {base: {"0": 1}, f"{base}.app-a": {"0": 1}, f"{base}.app-b": {"0": 2}}
    assert [v for _p, _o, v in _read(options, reader, first, second)] == [b"b0", b"b1"]


def test_options_are_found_in_the_spelling_spark_hands_them_over() -> None:
    """Spark gives a Python data source its options with lower-cased names: read as a plain dict, ``minPartitions``
    and ``maxOffsetsPerTrigger`` were never found in a Spark run (issue 39)."""
    from pipeline.source import Options

    reader = KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t", "minpartitions": "2",
                                "maxoffsetspertrigger": "7", "minrecordsperpartition": "8"})
    assert reader.options.get("minPartitions") == "2" and "maxOffsetsPerTrigger" in reader.options
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 7
    assert Options({"Kafka.Security.Protocol": "SSL"})["kafka.security.protocol"] == "SSL"
    with pytest.raises(ValueError, match="decode must be one of trace, metric, client"):
        KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t", "Decode": "traces"})


def test_a_partition_holding_nearly_everything_is_cut_even_with_more_partitions_than_tasks() -> None:
    """One emitter's events sit in one partition: 202 records there and 1 in another, read in 2 tasks, were one task
    of 202 records (the 2 ranges already met ``want``), so one core parsed the micro-batch alone."""
    from pipeline.source import KafkaRange, split_ranges

    ranges = [KafkaRange("t", 0, 16, 218), KafkaRange("t", 1, 0, 1)]
    cut = sorted((r.partition, r.start, r.end) for r in split_ranges(ranges, 2, 8))
    assert cut == [(0, 16, 117), (0, 117, 218), (1, 0, 1)]
    even = [KafkaRange("t", p, 0, 50) for p in range(4)]  # already balanced: left as it is
    assert [(r.partition, r.start, r.end) for r in split_ranges(even, 2, 8)] == [(p, 0, 50) for p in range(4)]
