"""`producer.partitions.exclude` naming partitions the topic lacks: rejected with the reason, the rest applied."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

from tests.sdk_fixtures import create_topic, wait_until
from tests.support import LocalStack
from ykafka import Producer


def _admin(sdk_stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YKAFKA_METASERVER": sdk_stack.metaserver, "YKAFKA_ADMIN_TOKEN": sdk_stack.admin_token,
           "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_missing_partitions_rejected_valid_part_applied_and_reported(sdk_stack: LocalStack) -> None:
    topic = f"excl-{uuid.uuid4().hex[:8]}"
    create_topic(sdk_stack.clusters["dc-a"], topic, 4)
    with Producer(sdk_stack.client_config()) as producer:
        sdk_stack.push(f"topic:{topic}", {"producer.partitions.exclude": "1"})
        wait_until(lambda: (producer.produce(topic, b"v", b"k"), producer.poll(0),
                            (producer.in_force(topic) or {}).get("producer.partitions.exclude") == (1,))[-1],
                   timeout=15, message="exclude=1 in force")
        assert producer.flush(15) == 0
        producer.runtime.report_now()

        def counted() -> bool:
            rows = sdk_stack.client_reports(sdk_stack.app_id)
            return any((r.get("extra") or {}).get("partitions", {}).get(topic) == 4 for r in rows)

        wait_until(counted, timeout=15, message="the partition count in the client report")
        dry = _admin(sdk_stack, "config", "set", f"topic:{topic}", "producer.partitions.exclude=0,9", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"warning: topic {topic} has 4 partitions (0-3)" in dry.stderr
        assert "partition(s) 9 do not exist; clients will reject them and exclude 0" in dry.stderr

        sdk_stack.push(f"topic:{topic}", {"producer.partitions.exclude": "0,9"})
        wait_until(lambda: (producer.produce(topic, b"v", b"k"), producer.poll(0.05),
                            (producer.in_force(topic) or {}).get("producer.partitions.exclude") == (0,))[-1],
                   timeout=15, message="the valid part (0) in force")
        reasons = [r.reason for r in producer.runtime.hot.rejections() if r.key == "producer.partitions.exclude"]
        assert reasons == [f"partition(s) 9 do not exist: topic {topic} has 4 partitions (0-3); applied 0"]
        for _ in range(20):
            producer.produce(topic, b"v", f"k{_}".encode())
        assert producer.flush(15) == 0
        producer.runtime.report_now()
        client_id = producer.runtime.client_id

        def listed() -> str | None:
            out = _admin(sdk_stack, "clients", "--app", sdk_stack.app_id).stdout
            rows: list[dict[str, Any]] = []
            lines = [line for line in out.splitlines() if not line.startswith("# ")]
            header = lines[0].split("\t") if lines else []
            rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
            mine = [r for r in rows if r["client"] == client_id]
            return mine[0]["errors"] if mine and "do not exist" in mine[0]["errors"] else None

        errors = wait_until(listed, timeout=15, message="the rejection in `ykafka admin clients`")
        assert "producer.partitions.exclude" in errors and f"topic {topic} has 4 partitions" in errors
