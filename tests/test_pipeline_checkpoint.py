"""The streaming pipeline survives a driver crash: ``ykafka pipeline run`` (continuous, ``local[2]``) runs as its own
driver process on a checkpointed store while a ykafka Producer keeps sending traced messages to a private Tansu
broker; the driver's whole process group (Python, its JVM, the Python workers) is SIGKILLed by pid in the middle
of a micro-batch, i.e. after the batch's offsets were logged and once its files are in the store but before Spark
recorded it as committed, events keep coming while it is down, and a new driver on the same store picks up.

Counted strictly against what reached the broker: every acknowledged message has exactly one ``acked`` step in the
trace store and every trace event of the topic is stored exactly once (no gap, no double count), and the
``send.msgs`` aggregate per window of the topic equals, window by window, the sum of the producer's ``send.msgs``
metric events in ``__ykafka_metrics`` (and in total the messages the producer sent)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.pipeline_chaos import Driver, Traffic, batch_files, caught_up, checkpoint, verify_exact
from tests.pipeline_fixtures import unique, wait_until

pytest.importorskip("pyspark")


@pytest.mark.slow
def test_streaming_driver_killed_mid_batch_resumes_without_gap_or_double_count(obs_broker: Any,
                                                                              tmp_path: Path) -> None:
    bs = obs_broker.bootstrap
    topic, client = unique("ckpt"), unique("ckpt-prod")
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(10)
    store = tmp_path / "store"
    log = tmp_path / "driver.log"
    started = time.monotonic()
    traffic = Traffic(bs, topic, client).start()
    first = Driver(bs, store, log).start()
    second: Driver | None = None
    try:
        # SIGKILL it in the middle of a metrics micro-batch (not its first): offsets logged, the batch's metric
        # history and aggregate files in the store, the batch not committed
        killed_in: tuple[int, list[str]] | None = None
        deadline = time.monotonic() + 150
        while killed_in is None and time.monotonic() < deadline:
            assert first.alive(), log.read_text()[-3000:]
            state = checkpoint(store, "metrics")
            pending = state["logged"] - state["committed"]
            if pending and state["committed"]:
                batch = max(pending)
                written = batch_files(store, "metrics", batch)
                if any(f.is_relative_to(store / "aggregates") for f in written):
                    first.kill()
                    killed_in = (batch, sorted(f.relative_to(store).as_posix() for f in written))
            time.sleep(0.005)
        assert killed_in is not None, "no metrics micro-batch was caught between its files and its commit"
        batch, written = killed_in
        logged = (store / "_checkpoints" / "metrics" / "offsets" / str(batch)).read_text()
        state = checkpoint(store, "metrics")
        assert batch in state["logged"] and batch not in state["committed"]
        assert {f.relative_to(store).as_posix() for f in batch_files(store, "metrics", batch)} >= set(written)
        killed_at, sent_at_kill = time.monotonic() - started, traffic.sent

        time.sleep(3)  # events keep coming while no driver runs
        second = Driver(bs, store, log).start()
        sent_at_restart = traffic.sent
        # the new driver re-ran the interrupted batch and streams on: it committed batches past it
        wait_until(lambda: second.alive() and max(checkpoint(store, "metrics")["committed"], default=-1) > batch, 120,
                   message="the restarted driver committed batches past the interrupted one")
        # it re-ran the interrupted batch from its logged offsets (same id, same range), not a new range
        assert (store / "_checkpoints" / "metrics" / "offsets" / str(batch)).read_text() == logged
        restarted_at = time.monotonic() - started
        traffic.stop()
        assert traffic.failed == []
        assert len(traffic.acked) == traffic.sent == len(set(traffic.acked))
        wait_until(lambda: second.alive() and caught_up(bs, store), 60,
                   message="the restarted driver caught up with the topics")
    finally:
        traffic.close()
        first.kill()
        if second is not None:
            second.kill()
    # nothing runs now: the store is final
    counted = verify_exact(bs, store, topic, traffic)
    result = {**counted, "sent_at_kill": sent_at_kill, "sent_at_restart": sent_at_restart,
              "killed_in_metrics_batch": batch, "its_files_at_kill": written, "killed_at_s": round(killed_at, 1),
              "restarted_s": round(restarted_at, 1), "seconds": round(time.monotonic() - started, 1)}
    print(f"RESULT {json.dumps(result)}")
