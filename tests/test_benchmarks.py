"""Every benchmark runs at its ``--quick`` size and ends with a ``RESULT {json}`` line holding its fields, so a
broken benchmark fails the suite (bench/pipeline_throughput.py was broken on main and nothing noticed).

A benchmark not listed in EXPECTED is still run; its RESULT must parse as a non-empty JSON object.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: callgrind_budget runs in tests/test_callgrind_budget.py (which checks its budgets), soak in tests/test_soak.py (which
#: checks its invariants on the session's durable clusters), not twice
BENCHES = sorted(p.stem for p in (ROOT / "bench").glob("*.py")
                 if not p.name.startswith("_") and p.stem not in ("callgrind_budget", "soak"))

#: fields each benchmark's RESULT must carry (the figures docs/benchmarks.md quotes)
EXPECTED: dict[str, set[str]] = {
    "aio_throughput": {"confluent_aio_msgs_s", "ykafka_aio_msgs_s", "ratio", "consume_ratio"},
    "broker_startup": {"kafka_fresh_start_s", "kafka_fresh_cpu_s", "kafka_fresh_rss_mb", "kafka_restart_start_s",
                       "tansu_start_s", "tansu_rss_mb"},
    "capacity_memory": {"raw_producer_mb", "ykafka_producer_mb", "spill_messages", "spill_msgs_s"},
    "config_propagation": {"changes", "p50_ms", "p99_ms", "lost", "duplicated"},
    "configcenter_namespaces": {"namespaces", "start_s", "rss_mb", "release_p50_ms", "release_p99_ms",
                                "wrongly_answered", "errors"},
    "configcenter_longpoll": {"pollers", "p50_ms", "p99_ms", "answered", "errors"},
    "control_plane_scale": {"sizes", "by_size", "targets", "met", "errors", "missed", "fd_limit"},
    "controlplane_failover": {"clients", "procs", "repark_p99_s", "all_reparked_s", "release_after_kill_p99_ms",
                              "notified_p99_ms", "fetch_p99_ms", "missed",
                              "applied_after_cc_kill_ms", "applied_after_ms_kill_ms", "lost", "survivor_rss_mb"},
    "console_pages": {"pages_p95_ms", "pages_cpu_p95_ms", "clients_filter_p95_ms", "pages_p95_max_ms",
                      "slowest_page", "targets_met", "publish_applied_p50_ms", "publish_applied_p99_ms"},
    "consumer_scaling": {"runs", "raw_noop_msgs_s", "ykafka_noop_msgs_s", "noop_ratio", "noop_ratio_median",
                         "poll_ratio_median"},
    "failover": {"failover_s", "failback_s", "sent", "delivered", "lost", "duplicated", "retried", "key_order",
                 "overtaken", "health"},
    "install_footprint": {"packages", "mb", "toplevel", "servers_present", "import_ykafka_ms",
                          "import_confluent_kafka_ms", "ratio", "client_ratio", "targets_met"},
    "metaserver_auth": {"sqlite", "target"},
    "metaserver_clients": {"clients", "reports_s", "grants_s", "sqlite"},
    "pipeline_throughput": {"events", "events_s", "event_to_alert_s", "cpu_s_per_1k_events", "jit_cpu_s", "continuous"},
    "placement_scale": {"topics", "clusters", "lookup_p50_ms", "lookup_p99_ms", "rss_mb"},
    "producer_throughput": {"raw_msgs_s", "ykafka_msgs_s", "ratio", "messages"},
    "rollout": {"clients", "applied_s", "decision_s", "cpu_per_1000_clients_s", "state"},
    "scale_client": {"rdkafka_producers", "longest_request_line", "release_ms"},
    "spill_replay": {"spill_msgs_s", "replay_msgs_s", "lost", "duplicated", "key_order"},
    "startup": {"raw_ms", "cold_ms", "warm_ms", "median_ms"},
    "trace_overhead": {"raw_msgs_s", "off_ratio", "sampled_1pct_ratio", "full_ratio"},
}
#: outcomes a quick run must still get right (a benchmark that loses messages or lets a key's message overtake an
#: older one is broken, not slow)
ZERO = ("lost", "duplicated", "errors", "missed", "overtaken")
#: ...and checks that must hold (per-key order kept)
TRUE = ("key_order",)

pytestmark = pytest.mark.slow


#: benchmarks also run on Apache Kafka (``--broker kafka``): the live swaps and the dual-DC failover proofs
ON_KAFKA = ["config_propagation", "failover"]


#: The runs are spread over three modules (this one: every other benchmark; tests/test_benchmarks_odd.py: the
#: rest; tests/test_benchmarks_kafka.py: ON_KAFKA): ``--dist loadfile`` gives a module to one xdist worker, and as
#: one module they were ~12 minutes on one worker, the tail of the whole pass.
EVEN, ODD = BENCHES[0::2], BENCHES[1::2]


@pytest.mark.parametrize("name", EVEN)
def test_benchmark_quick_run_reports_its_fields(name: str) -> None:
    check_quick(name)


def check_quick(name: str, *extra: str) -> None:
    """Run ``bench/<name>.py --quick`` and check its RESULT line."""
    if name == "pipeline_throughput":
        pytest.importorskip("pyspark")
    _check(name, *extra)


def _check(name: str, *extra: str) -> None:
    proc = subprocess.run([sys.executable, f"bench/{name}.py", "--quick", *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("RESULT "), tail
    result = json.loads(lines[-1][len("RESULT "):])
    assert isinstance(result, dict) and result, lines[-1]
    missing = EXPECTED.get(name, set()) - set(result)
    assert not missing, f"{name} RESULT lacks {sorted(missing)}: {lines[-1]}"
    for key in ZERO:
        if isinstance(result.get(key), int):
            assert result[key] == 0, f"{name}: {key}={result[key]}"
    for key in TRUE:
        if key in result:
            assert result[key] is True, f"{name}: {key}={result[key]}"
