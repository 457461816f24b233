"""Replay of a spill queue, oldest first, once its cluster answers again.

:class:`Replayer` drains a spill queue through a dedicated idempotent producer that never
times a message out (``message.timeout.ms=0``), so a key's records reach their partition in sequence
order. A record leaves the queue only after the broker acknowledged it. If the cluster fails again, or
nothing is acknowledged for ``stall_s``, the replay producer is purged and rebuilt and replay restarts
from the oldest record still queued.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka.dr.link import ClientFactory, Outgoing, is_resendable, produce_outgoing
from ykafka.dr.mailbox import Mailbox, mark_internal
from ykafka.dr.queue import SpillQueue, SpillRecord
from ykafka.transport import KafkaException, Message, RawKafkaError, RawProducer, close_producer

log = structlog.get_logger(__name__)


class Replayer:
    """Drains one cluster's spill queue into the cluster when it answers again (one thread)."""

    def __init__(self, queue: SpillQueue, client_factory: ClientFactory, is_up: Callable[[], bool],
                 max_in_flight: int = 20_000, stall_s: float = 15.0, progress_interval_s: float = 5.0,
                 on_failed: Callable[[SpillRecord, RawKafkaError], None] | None = None,
                 mailbox: Mailbox | None = None) -> None:
        self.queue = queue
        self._mailbox = mailbox if mailbox is not None else Mailbox()  # records' callbacks: the owner polls
        self.cluster = queue.cluster
        self._factory = client_factory
        self._is_up = is_up
        self.max_in_flight = max_in_flight
        self.stall_s = stall_s
        self.progress_interval_s = progress_interval_s
        self._on_failed = on_failed
        self.on_replayed: Callable[[SpillRecord, Message], None] | None = None  # message trace: "replayed"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._in_flight = 0
        self._last_ack = time.monotonic()
        self._abort: str | None = None
        self.replayed = 0
        self.failed = 0
        self.rounds = 0
        self.active = False
        self._round_started = 0.0
        self._round_done = 0
        self._thread = threading.Thread(target=self._run, name=f"ykafka-replay-{self.cluster}", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Look at the queue now (the cluster came back, or records were spilled)."""
        self._wake.set()

    # --- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        mark_internal()
        while not self._stop.is_set():
            self._wake.wait(0.25)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self.queue.depth == 0 or not self._is_up():
                continue
            try:
                self._replay_round()
            except Exception:
                log.exception("spill.replay_error", cluster=self.cluster)
                time.sleep(1.0)

    def _replay_round(self) -> None:
        self.rounds += 1
        self.active = True
        self._abort = None
        self._round_started = time.monotonic()
        self._round_done = 0
        start_depth = self.queue.depth
        log.info("spill.replay_start", cluster=self.cluster, left=start_depth, round=self.rounds)
        producer = self._factory()
        last_log = time.monotonic()
        after = -1
        self._last_ack = time.monotonic()
        try:
            while not self._stop.is_set() and self._abort is None:
                progressed = False
                for chunk_key, records in self.queue.chunks(after):
                    after = chunk_key
                    progressed = True
                    for record in records:
                        while self._in_flight >= self.max_in_flight and self._abort is None:
                            self._serve(producer, 0.05)
                        if self._abort is not None or self._stop.is_set():
                            break
                        self._send(producer, record)
                    if self._abort is not None or self._stop.is_set():
                        break
                    self._serve(producer, 0)
                    if time.monotonic() - last_log >= self.progress_interval_s:
                        self._log_progress()
                        last_log = time.monotonic()
                if progressed:
                    continue
                # nothing new to send: wait for the acknowledgements of what is in flight
                while self._in_flight and self._abort is None and not self._stop.is_set():
                    self._serve(producer, 0.05)
                    if time.monotonic() - last_log >= self.progress_interval_s:
                        self._log_progress()
                        last_log = time.monotonic()
                if self._abort is None and not any(True for _ in self.queue.chunks(after)):
                    break
        finally:
            if self._in_flight:
                with contextlib.suppress(KafkaException):
                    producer.purge(in_queue=True, in_flight=True, blocking=False)
                deadline = time.monotonic() + 5
                while self._in_flight and time.monotonic() < deadline:
                    producer.poll(0.05)
            close_producer(producer)  # one producer per round: its threads and connections go with the round
            self.active = False
            elapsed = max(1e-6, time.monotonic() - self._round_started)
            log.info("spill.replay_end", cluster=self.cluster, done=self._round_done, left=self.queue.depth,
                     rate=round(self._round_done / elapsed), aborted=self._abort)
            if self._abort is not None:
                time.sleep(0.5)  # let health catch up before the next round
                self._wake.set()

    def _send(self, producer: RawProducer, record: SpillRecord) -> None:
        def delivered(err: RawKafkaError | None, m: Message) -> None:
            self._in_flight -= 1
            if err is None:
                self._last_ack = time.monotonic()
                self.queue.ack(record.seq)
                self.replayed += 1
                self._round_done += 1
                if self.on_replayed is not None:
                    self.on_replayed(record, m)
                self._mailbox.deliver(self.queue.pop_callback(record.seq), None, m)
            elif is_resendable(err):
                if self._abort is None:
                    self._abort = err.name()
            else:  # the broker refuses this record for good: report it, do not retry forever
                self.queue.ack(record.seq)
                self.failed += 1
                log.error("spill.replay_rejected", cluster=self.cluster, topic=record.topic, seq=record.seq,
                          error=err.str())
                self._mailbox.deliver(self.queue.pop_callback(record.seq), err, m)
                if self._on_failed is not None:
                    self._on_failed(record, err)

        msg = Outgoing(record.topic, record.value, record.key, record.partition, record.timestamp,
                       list(record.headers) if record.headers else None, None)
        while True:
            try:
                produce_outgoing(producer, msg, delivered)
                break
            except BufferError:
                self._serve(producer, 0.05)
        self._in_flight += 1

    def _serve(self, producer: RawProducer, timeout: float) -> None:
        producer.poll(timeout)
        if self._abort is None:
            if not self._is_up():
                self._abort = "cluster down"
            elif self._in_flight and time.monotonic() - self._last_ack > self.stall_s:
                self._abort = f"no acknowledgement for {self.stall_s:g}s"

    def _log_progress(self) -> None:
        elapsed = max(1e-6, time.monotonic() - self._round_started)
        log.info("spill.replay_progress", cluster=self.cluster, done=self._round_done, left=self.queue.depth,
                 rate=round(self._round_done / elapsed))

    def status(self) -> dict[str, Any]:
        elapsed = max(1e-6, time.monotonic() - self._round_started) if self.active else 0.0
        return {"active": self.active, "replayed": self.replayed, "failed": self.failed, "rounds": self.rounds,
                "left": self.queue.depth, "in_flight": self._in_flight,
                "rate": round(self._round_done / elapsed) if elapsed else 0}

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)


def replay_config(base: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings of a replay producer: the cluster's connection settings, ordered and patient."""
    conf = {k: v for k, v in base.items() if k not in ("on_delivery", "message.timeout.ms", "delivery.timeout.ms")}
    conf.update({"enable.idempotence": True, "acks": "all", "message.timeout.ms": 0,
                 "max.in.flight.requests.per.connection": 5, "linger.ms": conf.get("linger.ms", 5),
                 "reconnect.backoff.max.ms": 1000})
    return conf
