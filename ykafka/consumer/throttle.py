"""Token bucket for ``consumer.rate.limit.msgs``: bounds how many messages are dispatched per second."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """Refills ``rate`` tokens per second up to a burst of 100 ms worth (at least one); rate 0 = unlimited."""

    def __init__(self, rate: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._rate = 0.0
        self._capacity = 1.0
        self._tokens = 0.0
        self._stamp = time.monotonic()
        self.set_rate(rate)

    @property
    def rate(self) -> float:
        return self._rate

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = max(0.0, float(rate))
            self._capacity = max(1.0, self._rate / 10.0)
            self._tokens = min(self._tokens, self._capacity) if self._rate else 0.0
            self._stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    def allowance(self, wanted: int) -> int:
        """How many of ``wanted`` messages may be taken now (all of them when unlimited)."""
        if not self._rate:
            return wanted
        with self._lock:
            self._refill()
            return min(wanted, int(self._tokens))

    def take(self, count: int) -> None:
        if not self._rate or count <= 0:
            return
        with self._lock:
            self._refill()
            self._tokens -= count

    def wait_time(self) -> float:
        """Seconds until one token is available (0 when one is)."""
        if not self._rate:
            return 0.0
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self._rate
