"""confluent-kafka's own asyncio example (a transactional AIOProducer and a cooperative-sticky AIOConsumer whose
``async`` on_assign / on_revoke await the consumer) runs under ykafka with only its import changed, beside the
original run on confluent-kafka: both produce in transactions, consume, shut down on SIGINT and exit 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import create_topic, unique

EXAMPLE = Path(__file__).parent / "examples" / "asyncio_example.py"
YKAFKA_IMPORT = "from ykafka.aio import AIOConsumer, AIOProducer  # ykafka: the only change"
CONFLUENT_IMPORT = "from confluent_kafka.aio import AIOConsumer, AIOProducer"


@pytest.mark.parametrize("impl", ["confluent", "ykafka"])
def test_the_asyncio_example_produces_in_transactions_consumes_and_stops_on_sigint(impl: str, brokers: dict[str, str],
                                                                                     tmp_path: Path) -> None:
    bootstrap, topic = brokers["dc-a"], unique("asyncio-example")
    create_topic(bootstrap, topic, 2)
    source = EXAMPLE.read_text()
    assert YKAFKA_IMPORT in source
    script = tmp_path / "asyncio_example.py"
    script.write_text(source if impl == "ykafka" else source.replace(YKAFKA_IMPORT, CONFLUENT_IMPORT))
    env = {**os.environ, "YKAFKA_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, str(script), bootstrap, topic], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []

    def tail() -> str:  # what to show when it fails: no debug lines, no statistics documents
        kept = [line for line in list(lines) if not line.startswith(("DEBUG", "INFO:__main__:Kafka stats"))]
        return "".join(kept[-40:])

    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while sum("Consumed: " in line for line in list(lines)) < 20 and proc.poll() is None:
            assert time.monotonic() < deadline, tail()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, tail()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    out = "".join(lines)
    produced = re.findall(r"Produced to: (\S+) \[(\d+)\] @ (\d+)", out)
    consumed = re.findall(r"Consumed: b'testvalue(\d+)'", out)
    assert len(produced) >= 20 and {t for t, _, _ in produced} == {topic}
    assert len(consumed) >= 20 and set(consumed) <= {str(i) for i in range(10)}
    assert "on_assign" in out and "Closed producer" in out and "Closed consumer" in out and "End of example" in out
    errors = [line for line in lines if line.startswith("ERROR:__main__") and "Kafka error" not in line]
    assert errors == [], errors
