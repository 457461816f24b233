"""Exactly-once read-process-write with Kafka transactions through ``ykafka.Producer`` and ``ykafka.Consumer``.

Reads ``--input`` in group ``--group`` (``isolation.level=read_committed``, no auto-commit), writes each value
upper-cased to ``--output`` and commits the consumed offsets inside the same transaction
(``send_offsets_to_transaction``), so after a crash the next run resumes exactly where the last committed
transaction ended: every input appears once in the committed output. Run it again with the same
``--transactional-id``: ``init_transactions`` fences the crashed run and aborts what it left open.

    python samples/transactions.py --bootstrap 127.0.0.1:9092 --input orders --output orders-upper \\
        --group upper --transactional-id upper-1 [--until 1000] [--batch 50]

Needs a broker with transactions (Apache Kafka: ``ykafka dev up --broker kafka``). Prints ``committed <n>``
after each transaction (``<n>``: inputs committed so far by this run) and ``done <n>`` when ``--until`` inputs
were processed, or when nothing new arrived for ``--idle`` seconds.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import TopicPartition

from ykafka import Consumer, KafkaError, Producer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch", type=int, default=50, help="inputs per transaction")
    parser.add_argument("--until", type=int, default=0, help="stop after this many inputs (0: at --idle)")
    parser.add_argument("--idle", type=float, default=5.0, help="stop when nothing arrived for this long")
    parser.add_argument("--hold-ms", type=int, default=0, help="pause inside each transaction before it commits")
    args = parser.parse_args()

    common = {"bootstrap.servers": args.bootstrap, "ykafka.report.enabled": False, "log_level": 0}
    producer = Producer({**common, "transactional.id": args.transactional_id})
    # static membership: a restart with the same id takes its place in the group at once (a crashed member is
    # otherwise waited for until its session times out) and its transactional id fences the crashed producer
    consumer = Consumer({**common, "group.id": args.group, "group.instance.id": args.transactional_id,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer.init_transactions(30)  # fences an earlier run with this id; its open transaction is aborted
    consumer.subscribe([args.input])
    done, last_data = 0, time.monotonic()
    try:
        while (not args.until or done < args.until) and time.monotonic() - last_data < args.idle:
            msgs = [m for m in consumer.consume(args.batch, 1.0) if m.error() is None]
            if not msgs:
                continue
            last_data = time.monotonic()
            producer.begin_transaction()
            try:
                for m in msgs:
                    producer.produce(args.output, (m.value() or b"").upper(), m.key())
                # the consumed positions become part of the transaction: committed with its outputs or not at all
                positions = consumer.position([TopicPartition(m.topic(), m.partition()) for m in msgs])
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                print(f"open {done + len(msgs)}", flush=True)
                time.sleep(args.hold_ms / 1000)
                producer.commit_transaction(30)
            except KafkaError:
                producer.abort_transaction(30)  # its outputs are discarded; a new run resumes at the committed offsets
                raise
            done += len(msgs)
            print(f"committed {done}", flush=True)
    finally:
        consumer.close()
        producer.close()
    print(f"done {done}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
