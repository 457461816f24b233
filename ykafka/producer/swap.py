"""The client-swap state machine: a client is retired, drains through the user's ``poll()`` / ``flush()``,
releases the topics held behind it (their pending messages, in order), and is closed once drained."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import structlog

from ykafka.dr.port import DrEngine
from ykafka.producer.state import (
    _RETIRED_GRACE_S,
    DeliveryCallback,
    ProducerBase,
    _Client,
)
from ykafka.transport import (
    close_producer,
)

log = structlog.get_logger(__name__)




class ClientSwaps(ProducerBase):
    """Retire, drain, release, close (mixed into :class:`ykafka.producer.core.Producer`)."""

    def _retire(self, client: _Client, reason: str) -> None:
        """Stop sending on ``client``; it drains through poll()/flush(), then is closed."""
        if self._clients.get(client.key) is client:
            del self._clients[client.key]
        client.retiring_since = time.monotonic()
        client.deadline = client.retiring_since + self._swap_timeout_s
        self._retiring.append(client)
        self._states.clear()
        self._swaps += 1
        log.info("ykafka.producer.client_retiring", reason=reason, **client.describe())
        self._rebind_poll()

    # --- draining swaps ----------------------------------------------------------------------------

    def _service(self) -> None:
        """Advance swaps: release held topics whose old client drained; close drained retired clients."""
        if not self._retiring and not self._held:
            return
        drained: list[_Client] = []
        with self._lock:
            now = time.monotonic()
            for client in list(self._retiring):
                if len(client.rd) == 0:
                    if client.drained_at is None:
                        client.drained_at = now
                        self._release(client)
                    elif now - client.drained_at >= _RETIRED_GRACE_S:
                        self._retiring.remove(client)
                        for topic in [t for t, c in self._home.items() if c is client]:
                            del self._home[topic]  # drained: nothing to wait for
                        drained.append(client)
                elif client.drained_at is not None:
                    client.drained_at = None  # a late send arrived during the grace period
                elif now > client.deadline and not client.abandoned:
                    client.abandoned = True
                    log.warning("ykafka.producer.swap_timeout", cluster=client.cluster, in_queue=len(client.rd),
                                timeout_s=self._swap_timeout_s,
                                consequence="held topics released before the old client drained; per-key "
                                            "order across the swap is not guaranteed")
                    self._runtime.record_error({"type": "swap_timeout", "cluster": client.cluster,
                                                "in_queue": len(client.rd)})
                    self._release(client)
            if any(waiting is None for waiting in self._held.values()):
                self._release(None)
            self._rebind_poll()
        for client in drained:  # outside the lock: closing joins librdkafka's threads (milliseconds)
            self._close_client(client, self._dr)
            log.info("ykafka.producer.client_closed", cluster=client.cluster)

    def _release(self, old: _Client | None) -> None:
        """Send, in order, the pending messages of topics that waited for ``old`` (None: retry leftovers).

        Each topic's messages go to ONE client for the whole release (resolved once), so a config change
        arriving mid-release cannot split them over two clients; the next ``_prepare`` sees that move and
        holds the topic again.
        """
        topics = {t for t, waiting in self._held.items() if waiting is old or waiting is None}
        if not topics:
            return
        for topic in topics:
            if old is not None and self._held[topic] is old:
                self._home.pop(topic, None)  # all it sent on ``old`` is delivered (or given up on)
            self._held[topic] = None
            self._states.pop(topic, None)
        keep: deque[tuple[str, Any, Any, int, DeliveryCallback | None, int, Any]] = deque()
        blocked: set[str] = set()
        targets: dict[str, _Client] = {}
        while self._pending:
            item = self._pending.popleft()
            topic = item[0]
            if topic not in topics or topic in blocked:
                keep.append(item)
                continue
            client = targets.get(topic)
            if client is None:
                try:
                    state = self._prepare(topic)
                except Exception as exc:
                    log.warning("ykafka.producer.release_failed", topic=topic, error=repr(exc))
                    blocked.add(topic)
                    keep.append(item)
                    continue
                if self._held.get(topic) is not None:  # held again: it moved while partly released
                    blocked.add(topic)
                    keep.append(item)
                    continue
                client = targets[topic] = state.client
            try:
                self._send(client, *item)
            except BufferError:
                blocked.add(topic)
                keep.append(item)
            except Exception as exc:
                log.warning("ykafka.producer.release_failed", topic=topic, error=repr(exc))
                blocked.add(topic)
                keep.append(item)
        self._pending.extend(keep)  # drained above: what could not be sent, in its order
        released = sorted(topics - blocked)
        for topic in released:
            if self._held.get(topic, False) is None:
                del self._held[topic]
            self._states.pop(topic, None)
        self._retire_idle()
        if released:
            log.info("ykafka.producer.topics_released", topics=released, pending=len(self._pending))
            self._runtime.report_now()

    def _retire_idle(self) -> None:
        """Retire active clients no topic sends to any more (e.g. left behind by a second change mid-swap)."""
        used = {id(c) for c in self._home.values()} | {id(st.client) for st in self._states.values()}
        for client in list(self._clients.values()):
            if id(client) not in used:
                self._retire(client, reason="no topic uses it")

    @staticmethod
    def _close_client(client: _Client, dr: DrEngine | None) -> None:
        """Release a drained client's librdkafka handle now (threads, connections, descriptors)."""
        client.rd.flush(0)
        if dr is not None:
            dr.forget_client(client.rd)  # the engine keeps no reference to it
        if client.hastener is not None:
            client.hastener.join()
        close_producer(client.rd)

    def _dr_changed(self) -> None:
        self._states.clear()
        self._unbind_poll()  # the engine may hand back work for poll() (retired clients to drain)

    def _unbind_poll(self) -> None:
        self.__dict__.pop("poll", None)

    def _all_clients(self) -> list[_Client]:
        return list(self._clients.values()) + list(self._retiring)

    def _rebind_poll(self) -> None:
        """With one client and nothing to service, ``poll`` IS that client's poll (no Python per call).

        Under the producer's lock: ``poll()`` calls it on the application's thread while the DR engine's thread
        retires clients (a cluster recovered: fresh clients). Without it the client count was read as 1 and the
        dict found empty a moment later: a 30-minute soak's producer died of ``StopIteration`` in ``poll()``
        (seed 3, round 7), and a poll bound to a client retired meanwhile would have served only that client."""
        with self._lock:
            clients = list(self._clients.values())
            if (len(clients) == 1 and not self._retiring and not self._held and not self._closed
                    and self._delivery_hook is None and (self._dr is None or not self._dr.needs_poll)):
                self.__dict__["poll"] = clients[0].rd.poll
                if self._dr is not None and self._dr.needs_poll:  # work arrived meanwhile: poll() serves it
                    self.__dict__.pop("poll", None)
            else:
                self.__dict__.pop("poll", None)
