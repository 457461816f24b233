"""Pure logic of the DR engine: health verdicts, route specs and decisions, admin changes, outage progress files."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ykafka import catalog
from ykafka.admin.failover import failover_changes
from ykafka.catalog import Scope, ScopeKind
from ykafka.dr.engine import RouteSpec
from ykafka.dr.health import ClusterHealth, ClusterState, HealthPolicy
from ykafka.dr.routes import RouteTable
from ykafka.dr.sync import Outage, OutageStore, connection_only


class ScriptedProbe:
    """Answers probes from a switch the test flips (the probe is the unit's input, not the thing tested)."""

    def __init__(self) -> None:
        self.up = True
        self.calls = 0

    def __call__(self, timeout: float) -> None:
        self.calls += 1
        if not self.up:
            raise RuntimeError("connection refused")


def _health(probe: ScriptedProbe, **policy: float) -> tuple[ClusterHealth, list[ClusterState]]:
    changes: list[ClusterState] = []
    health = ClusterHealth("dc-a", {"bootstrap.servers": "127.0.0.1:1"},
                           HealthPolicy(**{"down_failures": 3, "down_after_s": 0, "probe_interval_s": 0.02,
                                           **policy}),  # type: ignore[arg-type]
                           on_change=lambda _c, s: changes.append(s), probe=probe)
    return health, changes


def _until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_consecutive_probe_failures_mark_down_and_one_probe_brings_it_back() -> None:
    probe = ScriptedProbe()
    health, changes = _health(probe)
    try:
        health.suspect("_TRANSPORT")  # a dropped connection only makes it probe sooner
        assert health.state is ClusterState.UP
        probe.up = False
        _until(lambda: health.state is ClusterState.DOWN)
        assert health.status()["consecutive_failures"] >= 3
        assert "connection refused" in (health.last_error or "")
        health.record_success()  # a late acknowledgement is no proof the cluster is back
        assert health.state is ClusterState.DOWN
        probe.up = True
        _until(lambda: health.state is ClusterState.UP)
        assert changes == [ClusterState.DOWN, ClusterState.UP]
    finally:
        health.close()


def test_a_refusal_of_the_credentials_is_not_an_outage_and_new_credentials_lift_it() -> None:
    probe = ScriptedProbe()
    creds = {"bootstrap.servers": "127.0.0.1:1", "sasl.username": "app.a@dc-a.g1"}
    refusals: list[int] = []
    health = ClusterHealth("dc-a", dict(creds), HealthPolicy(down_failures=2, down_after_s=0, probe_interval_s=60),
                           probe=probe, conf_source=lambda: dict(creds))
    health.on_refused = lambda: refusals.append(1)
    try:
        probe.up = False  # the broker refuses every connection: what follows the refusal fails too
        health.on_error(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
        health.on_error(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
        for _ in range(3):
            health.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
            assert not health.probe_now()
        assert health.state is ClusterState.UP and health.is_refused() and refusals == [1]
        assert "_AUTHENTICATION" in health.status()["refused"]
        health.on_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))  # one topic's ACL: counted nowhere
        assert health.status()["consecutive_failures"] == 0
        creds["sasl.username"] = "app.a@dc-a.g2"  # a grant renewal brought new credentials
        time.sleep(0.6)  # checked at most twice a second
        assert not health.is_refused() and health.status()["refused"] is None
        health.on_error(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED))
        assert health.is_refused() and refusals == [1, 1]
        probe.up = True  # a probe that authenticates (on a fresh connection) lifts it too
        assert health.probe_now() and not health.is_refused()
        probe.up = False  # now the cluster is really gone
        for _ in range(2):
            health.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        assert health.state is ClusterState.DOWN  # failures count again once lifted
    finally:
        health.close()


def test_a_probe_that_began_under_a_refusal_and_failed_after_its_lift_is_not_an_outage() -> None:
    """A probe waits up to down_failures probe timeouts; one begun while the broker refused the old credentials
    that fails after the refusal was lifted (the app enabled again: new credentials) says nothing about an outage.
    Counted, it was three failures at once and the cluster was called down 1.5 s after the app was let back in."""
    creds = {"bootstrap.servers": "127.0.0.1:1", "sasl.username": "app.a@dc-a.g1"}
    started, release = threading.Event(), threading.Event()

    def probe(timeout: float) -> None:  # the old credentials' connection: no answer until it times out
        started.set()
        release.wait(10)
        raise RuntimeError("Failed to get metadata: Local: Timed out")

    health = ClusterHealth("dc-a", dict(creds), HealthPolicy(down_failures=3, down_after_s=0, probe_interval_s=60,
                                                             probe_timeout_s=0.5),
                           probe=probe, conf_source=lambda: dict(creds))
    try:
        health.on_error(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))  # wakes a probe
        assert started.wait(5)
        creds["sasl.username"] = "app.a@dc-a.g2"
        time.sleep(0.6)  # checked at most twice a second
        assert not health.is_refused()
        time.sleep(0.9)
        release.set()  # the probe begun under the refusal fails now, after its three probe timeouts
        _until(lambda: "Timed out" in (health.status()["last_error"] or ""))  # said, not counted:
        time.sleep(0.05)
        status = health.status()
        assert health.state is ClusterState.UP and status["consecutive_failures"] == 0, status
        assert status["transitions"] == 0 and (health.last_probe_ms or 0) >= 1400, (status, health.last_probe_ms)
    finally:
        release.set()
        health.close()


def test_librdkafka_errors_count_as_failures() -> None:
    probe = ScriptedProbe()
    health, changes = _health(probe, probe_interval_s=60)
    try:
        health.on_error(KafkaError(KafkaError._TRANSPORT))
        health.on_error(KafkaError(KafkaError._TRANSPORT))
        assert health.state is ClusterState.UP  # suspect only
        probe.up = False  # the cluster is really gone: probes stop resetting the count
        for _ in range(3):
            health.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        assert health.state is ClusterState.DOWN and changes == [ClusterState.DOWN]
    finally:
        health.close()


def test_failing_for_long_enough_marks_down_before_the_count() -> None:
    probe = ScriptedProbe()
    probe.up = False
    health, _ = _health(probe, down_failures=1000, down_after_s=0.2, probe_interval_s=60)
    try:
        health.record_failure("timeout")
        assert health.state is ClusterState.UP
        time.sleep(0.25)
        health.record_failure("timeout")
        assert health.state is ClusterState.DOWN
    finally:
        health.close()


def test_policy_from_catalog_values() -> None:
    effective = catalog.resolve([{"health.down.failures": 5, "health.probe.interval.ms": 250}])
    policy = HealthPolicy.from_effective(effective)
    assert (policy.down_failures, policy.down_after_s, policy.probe_interval_s) == (5, 2.0, 0.25)


def test_route_spec_from_catalog_values() -> None:
    layer = catalog.validate_layer({"route.standby": "dc-b", "route.failover": "auto", "spill.enabled": "false"},
                                   scope=Scope(ScopeKind.CLUSTER, "dc-a")).values
    spec = RouteSpec.from_effective("dc-a", catalog.resolve([layer]))
    assert spec == RouteSpec("dc-a", "dc-b", "auto", "primary", False)
    assert RouteSpec.from_effective("dc-a", {"route.standby": "dc-a"}).standby is None  # never itself
    with pytest.raises(catalog.InvalidConfigValue, match="must be one of primary, standby"):
        catalog.parse("route.active", "both")


def test_a_route_decision_changes_nothing_and_its_commit_records_the_move_once() -> None:
    """decide() answers from spec, switches and health without recording anything (a send asks it per message);
    commit() records the route and, on a move, the cluster left, which exactly one send takes to hand it over."""
    up = {"dc-a": True, "dc-b": True}
    spec = RouteSpec("dc-a", "dc-b", "auto")
    table = RouteTable(lambda _topic: spec, lambda cluster: up[cluster])
    assert table.decide("orders") == (spec, "dc-a")
    assert table.commit("orders", spec, "dc-a") is False and table.moved == {}
    up["dc-a"] = False
    for _ in range(3):  # asked again and again: still nothing recorded
        assert table.decide("orders") == (spec, "dc-b")
    assert table.committed == {"orders": (spec, "dc-a")} and table.moved == {}
    assert not table.is_committed("orders", spec, "dc-b")
    assert table.commit("orders", spec, "dc-b") is True and table.commit("orders", spec, "dc-b") is False
    assert table.moved == {"orders": "dc-a"}
    assert table.status()["orders"] == {"primary": "dc-a", "standby": "dc-b", "failover": "auto",
                                        "active": "dc-b", "failed_over": True}
    assert table.take_move("orders", "dc-b") is False  # a send that still writes to dc-a does not take it
    assert table.take_move("orders", "dc-a") is True and table.take_move("orders", "dc-a") is False
    up["dc-b"] = False  # auto failover needs an answering standby
    assert table.decide("orders")[1] == "dc-a"
    table.forced["dc-a"] = "standby"  # an in-process switch wins over health
    assert table.decide("orders")[1] == "dc-b"
    manual = RouteSpec("dc-a", "dc-b", "manual")
    table.forced.clear()
    assert RouteTable(lambda _t: manual, lambda _c: False).decide("orders")[1] == "dc-a"
    assert RouteTable(lambda _t: RouteSpec("dc-a"), lambda _c: False).decide("orders")[1] == "dc-a"


def test_failover_changes_for_the_admin_command() -> None:
    assert failover_changes("standby", cluster="dc-a", mode="manual") == [
        (Scope(ScopeKind.CLUSTER, "dc-a"), "route.active", "standby"),
        (Scope(ScopeKind.CLUSTER, "dc-a"), "route.failover", "manual")]
    assert failover_changes("primary", topic="orders") == [(Scope(ScopeKind.TOPIC, "orders"), "route.active",
                                                           "primary")]
    for scope, name, value in failover_changes("standby", cluster="dc-a", mode="auto"):
        catalog.parse(name, value, scope)  # every change passes the catalog's own validation
    with pytest.raises(ValueError, match="exactly one"):
        failover_changes("standby")
    with pytest.raises(ValueError, match="primary or standby"):
        failover_changes("sideways", cluster="dc-a")


def test_outage_progress_survives_a_restart(tmp_path: Path) -> None:
    store = OutageStore(tmp_path)
    outage = Outage("dc-a", "dc-b", "orders", 1.0, {"0": 5, "1": 7})
    store.save(outage)
    outage.ended, outage.synced = 2.0, 40
    store.save(outage)
    (tmp_path / "garbage.json").write_text("{not json")
    loaded = OutageStore(tmp_path).load_all()
    assert loaded == [outage]
    assert loaded[0].group == "ykafka-failback.dc-a.orders"
    store.delete(outage)
    assert OutageStore(tmp_path).load_all() == []


def test_an_outage_saved_by_two_threads_at_once_raises_nothing_and_stays_readable(tmp_path: Path) -> None:
    """A send reopening an outage (a route decision made just before its primary came back) and the failback ending
    it save the same file at once: each write must land whole, and neither raise (one shared temporary name made
    the second rename fail with FileNotFoundError, out of the sender's produce())."""
    store = OutageStore(tmp_path)
    outage = Outage("dc-a", "dc-b", "orders", 1.0, {"0": 5})
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def save_often(ended: float | None) -> None:
        copy = Outage("dc-a", "dc-b", "orders", 1.0, {"0": 5}, ended=ended)
        start.wait()
        for _ in range(300):
            try:
                store.save(copy)
            except BaseException as exc:  # noqa: BLE001 - the failure under test, reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=save_often, args=(ended,)) for ended in (None, 2.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    loaded = store.load_all()
    assert len(loaded) == 1 and loaded[0].ended in (None, 2.0) and loaded[0].start_offsets == outage.start_offsets
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dc-a__orders.json"]  # no temporary file left behind


def test_connection_only_keeps_security_and_drops_producer_settings() -> None:
    conf = {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.username": "u", "ssl.ca.location": "x",
            "acks": "all", "linger.ms": 5, "error_cb": print}
    assert connection_only(conf) == {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
                                     "sasl.username": "u", "ssl.ca.location": "x"}


def test_a_probe_client_that_keeps_failing_is_replaced() -> None:
    """Issue 38's soak: one producer's probe client kept failing for minutes after its cluster was SIGKILLed and
    restarted while another process's probe of the same cluster answered, so its writes never returned from the
    standby. The real metadata probe (librdkafka admin client, nothing listening on the port) gets a new client
    every PROBE_CLIENT_FAILURES consecutive failures."""
    from ykafka.devstack.procs import free_port
    from ykafka.dr.health import PROBE_CLIENT_FAILURES

    health = ClusterHealth("dc-a", {"bootstrap.servers": f"127.0.0.1:{free_port()}"},
                           HealthPolicy(down_failures=3, down_after_s=0, probe_interval_s=0.02, probe_timeout_s=0.05))
    clients: list[tuple[int, int]] = []  # (the client, the failures counted when it was first seen)
    try:
        deadline = time.monotonic() + 20
        while len(clients) < 3 and time.monotonic() < deadline:
            admin, failures = health._admin, health._probe_failures
            if admin is not None and (not clients or clients[-1][0] != id(admin)):
                clients.append((id(admin), failures))
            time.sleep(0.005)
    finally:
        health.close()
    assert health.state is ClusterState.DOWN
    # the first client, and a new one after each run of failures (a probe counts one per probe timeout it waited)
    assert len(clients) >= 3, clients
    assert [failures // PROBE_CLIENT_FAILURES for _, failures in clients[:3]] == [0, 1, 2], clients


def test_a_cluster_of_several_brokers_none_answering_is_still_marked_down() -> None:
    """The probe asks each bootstrap address on its own after a failed probe (one frozen node of three must not
    call the cluster down: tests/test_kafka_durability.py); when none of them answers the cluster is down all the
    same, after the policy's failures, through the real librdkafka probe (nothing listens on either port)."""
    from ykafka.devstack.procs import free_port

    health = ClusterHealth("dc-a", {"bootstrap.servers": f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"},
                           HealthPolicy(down_failures=3, down_after_s=0, probe_interval_s=3600, probe_timeout_s=0.2))
    try:
        answers = [health.probe_now() for _ in range(3)]
    finally:
        health.close()
    assert answers == [False, False, False] and health.state is ClusterState.DOWN, (answers, health.status())


class _AlwaysUp:
    """The outages' view of cluster health (an input here: every cluster answers)."""

    def is_up(self, _cluster: str) -> bool:
        return True


def _outages(directory: Path) -> Any:
    from ykafka.dr.outages import Outages

    return Outages(directory, lambda _c: {"bootstrap.servers": "127.0.0.1:1"}, _AlwaysUp(),  # type: ignore[arg-type]
                   lambda _c: True, sync_idle_s=1.0, progress_interval_s=1.0)


def test_an_outage_whose_record_cannot_be_written_still_opens_and_the_send_goes_on(tmp_path: Path) -> None:
    """Issue 38's disk-full fault: the outage record shares the spill's disk; a write that fails (ENOSPC there,
    ENOTDIR here: the directory replaced by a file) raised out of ``produce`` and killed the soak's producer."""
    outages = _outages(tmp_path / "failback")
    shutil.rmtree(tmp_path / "failback")  # (it holds the writer id, read at start)
    (tmp_path / "failback").write_text("not a directory")
    outages.begin("dc-a", "dc-b", "orders")  # raised NotADirectoryError before
    assert outages.is_open("dc-a", "orders") and outages.known("dc-a", "orders")


def test_a_cancelled_sync_that_never_ends_holds_the_next_one_back_only_for_a_while(tmp_path: Path) -> None:
    """A soak's cancelled sync never ended (stuck in a call to a frozen cluster) and the next sync of its outage
    never started: 22,624 records stayed on the standby. The next one waits for it at most CANCELLED_SYNC_WAIT_S."""
    from ykafka.dr import outages as outages_module

    class StuckJob:  # the cancelled job as the outages see it: its thread still alive
        running = True
        cancelled_at = time.monotonic()

    outages = _outages(tmp_path / "failback")
    outages._open[("dc-a", "orders")] = Outage("dc-a", "dc-b", "orders", time.time(), {"0": 0})
    outages._cancelled[("dc-a", "orders")] = StuckJob()
    try:
        outages.end("dc-a", "orders")
        assert not outages.syncing("dc-a", "orders")  # a cancelled job that just stopped is waited for
        StuckJob.cancelled_at = time.monotonic() - outages_module.CANCELLED_SYNC_WAIT_S - 1
        outages.end("dc-a", "orders")
        assert outages.syncing("dc-a", "orders")  # ...but not for ever: the next sync starts
    finally:
        outages.stop()
