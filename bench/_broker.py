"""A private Tansu broker held for profile drivers (``--broker-only``): started on a free port, its bootstrap
printed, stopped by pid when this process is told to stop (SIGTERM or Ctrl-C)."""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path


def hold_broker(name: str) -> None:
    """Start a broker, print its bootstrap, keep it until SIGTERM / SIGINT, then stop it by pid."""
    from tests.support import Broker

    broker = Broker(name, Path(tempfile.mkdtemp(prefix="ykafka-prof-"))).start()
    print(broker.bootstrap, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill PID` stops the broker too
    try:
        while True:
            time.sleep(3600)
    finally:
        broker.kill()
