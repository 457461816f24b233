"""Graceful stop of ``Consumer.run`` on SIGTERM / SIGINT: stop fetching, finish, commit, leave the group."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import structlog

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: Callable[[], None], signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[bool]:
    """Within the block, the signals call ``stop`` instead of killing the process.

    Signal handlers can only be installed from the main thread; elsewhere this does nothing (yields False)
    and the caller stops the consumer itself.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: dict[signal.Signals, Any] = {}
    requested = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if requested.is_set():
            log.warning("already stopping; waiting for in-flight work to finish", signal=name)
            return
        requested.set()
        log.info("stop requested by signal; finishing in-flight work", signal=name)
        stop()

    for sig in signals:
        previous[sig] = signal.signal(sig, handle)
    try:
        yield True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
