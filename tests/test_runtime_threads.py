"""The runtime's shared state under its four threads, and its background thread under failure (issue 32 item 3).

Against the real stack: placements served by the MetaServer, grants renewed over HTTP.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from tests.helpers import wait_until
from tests.support import LocalStack
from ykafka.runtime import Runtime


def _runtime(sdk_stack: LocalStack, app: tuple[str, str]) -> Runtime:
    rt = Runtime.from_conf(sdk_stack.client_config(app, **{"ykafka.local.default.cluster": "dc-a"}), "producer")
    rt.start()
    return rt


def test_concurrent_placement_lookups_and_renewals_stay_consistent(sdk_stack: LocalStack) -> None:
    alias = f"place-{uuid.uuid4().hex[:6]}"  # a cluster the grant lacks: each placement on it is a want
    resp = sdk_stack.admin("PUT", f"/v1/admin/clusters/{alias}",
                           {"bootstrap_servers": sdk_stack.clusters["dc-b"], "dc": "b", "status": "active"})
    assert resp.status_code == 200, resp.text
    topics = [f"{alias}.t{i:02d}" for i in range(24)]
    placed = {t: alias if i % 2 else "dc-a" for i, t in enumerate(topics)}
    app = sdk_stack.new_app([f"{alias}.*"])
    assert sdk_stack.admin("PUT", "/v1/admin/placements", {"placements": placed}).status_code == 200
    rt = _runtime(sdk_stack, app)
    failures: list[BaseException] = []
    seen: dict[str, set[str | None]] = {t: set() for t in topics}
    stop = threading.Event()

    def lookups(offset: int) -> None:
        i = offset
        try:
            while not stop.is_set():
                topic = topics[i % len(topics)]
                seen[topic].add(rt.placement(topic))
                i += 1
        except BaseException as exc:  # noqa: BLE001 - counted below
            failures.append(exc)

    def renewals() -> None:
        try:
            while not stop.is_set():
                rt._renew()  # the renewal thread's step, here as often as the server answers
        except BaseException as exc:  # noqa: BLE001 - counted below
            failures.append(exc)

    workers = [threading.Thread(target=lookups, args=(n * 5,)) for n in range(4)] + \
        [threading.Thread(target=renewals) for _ in range(2)]
    try:
        for w in workers:
            w.start()
        time.sleep(3)
        stop.set()
        for w in workers:
            w.join(30)
        assert failures == []
        assert seen == {t: {c} for t, c in placed.items()}
        assert rt._thread is not None and rt._thread.is_alive()
        grant = rt.grant
        assert grant is not None and alias in grant.clusters  # the wants made it into the renewed grant
    finally:
        rt.close()
        sdk_stack.admin("DELETE", f"/v1/admin/clusters/{alias}")
        for topic in topics:
            sdk_stack.admin("DELETE", f"/v1/admin/placements/{topic}")


def test_a_failing_background_step_is_reported_and_the_thread_keeps_running(sdk_stack: LocalStack) -> None:
    rt = _runtime(sdk_stack, sdk_stack.new_app(["bg.*"]))
    client = rt._grant_client
    assert client is not None
    real_report = client.report
    broken = threading.Event()
    broken.set()

    def report(grant: Any, body: Any) -> bool:  # the first report after the injection fails unexpectedly
        if broken.is_set():
            broken.clear()
            raise RuntimeError("injected: report step failed")
        return bool(real_report(grant, body))

    try:
        wait_until(lambda: rt.reports_sent >= 1, 30, message="the first report")
        client.report = report  # type: ignore[method-assign]
        rt.report_now()
        wait_until(lambda: not broken.is_set(), 10, message="the failing report")
        sent = rt.reports_sent
        rt.report_now()
        wait_until(lambda: rt.reports_sent > sent, 10, message="a report after the failure (thread alive)")
        assert rt._thread is not None and rt._thread.is_alive()
        errors = rt.report_body()["extra"]["errors"]
        assert [(e["type"], e["step"]) for e in errors if e["type"] == "background_failed"] == [("background_failed",
                                                                                                "report")]
        assert "injected: report step failed" in str(errors)
    finally:
        rt.close()
