"""A guarded rollout in the console, in a real browser against the real stack with real producers producing
throughout (every message counted): a plan breaking a guard rule is refused with the rule's name; a harmless
plan goes 30 % -> 100 % by itself and the page shows each decision with both sides' figures; the screenshots
illustrate docs/console.md."""

from __future__ import annotations

from typing import Any

from tests.console_fixtures import Console, wait_reported_topic
from tests.helpers import create_topic, unique, wait_until
from tests.rollout_sim import Steady, ids_in_bands, in_force
from tests.sdk_fixtures import check_stream, read_topic


def test_an_operator_runs_a_guarded_rollout_from_the_console(console: Console, page: Any) -> None:
    st = console.stack
    topic = unique("console-plan")
    create_topic(st.clusters["dc-a"], topic, 3)
    app = st.new_app([topic], [topic], ["*"])
    st.push(f"topic:{topic}", {"topic.grade": "P0"})
    ids = ids_in_bands(f"ykafka.topic.{topic}", app[0], [(0, 50), (50, 100), (50, 100)])
    loads = [Steady(st.client_config(app, **{"ykafka.client.id": cid, "ykafka.metrics.interval.ms": 500}), topic)
             for cid in ids]
    try:
        wait_reported_topic(st, app[0], ids, topic)
        console.login(page, "operator")
        page.goto(f"{console.url}/console/config?scope=topic:{topic}")
        page.click("#rollouts-link")
        page.fill("#plan-form textarea[name=changes]", "producer.linger.ms=200")
        page.fill("#plan-form input[name=steps]", "30,100")
        page.fill("#plan-form input[name=bake]", "3")
        page.fill("#plan-form input[name=p99_floor]", "1000")  # a loaded test machine: see tests/test_rollouts.py
        with page.expect_navigation():
            page.click("#plan-form button[type=submit]")
        refused = page.locator("#plan-errors").inner_text()
        assert f"guard:p0-linger: producer.linger.ms is at most 50 on P0 topics: topic {topic} would get " \
               "producer.linger.ms=200" in refused, refused
        assert page.locator("section.plan").count() == 0
        page.fill("#plan-form textarea[name=changes]", "producer.linger.ms=20")
        with page.expect_navigation():  # the form posts and redirects: reloading before it lands fails (no page)
            page.click("#plan-form button[type=submit]")

        def done() -> bool:
            page.reload()
            return page.locator("section.plan[data-state='done']").count() == 1

        wait_until(done, timeout=60, interval=1.0)
        rows = page.locator("section.plan table.decisions tbody tr")
        assert [rows.nth(i).locator(".action").inner_text() for i in range(rows.count())] == [
            "publish", "advance", "promote"]
        advance = rows.nth(1).inner_text()
        assert "within thresholds" in advance and "1 clients" in advance and "2 clients" in advance, advance
        console.shot(page, "rollout-done")
        wait_until(lambda: all(in_force(ld.producer, topic, "producer.linger.ms") == 20 for ld in loads), timeout=20)
        page.goto(f"{console.url}/console/audit?operator=rollout-driver")
        assert page.locator("#audit tr[data-action='config.rollout.advance']").count() >= 1
    finally:
        for ld in loads:
            ld.stop()
    sent = sum(ld.sent for ld in loads)
    assert sent > 0 and not any(ld.failed for ld in loads) and sum(ld.delivered for ld in loads) == sent
    assert check_stream(read_topic(st.clusters["dc-a"], topic, sent), sent)["lost"] == 0


def test_a_client_in_drift_shows_intended_against_in_force_and_the_overview_counts_it(
        console: Console, page: Any) -> None:
    st = console.stack
    topic = unique("console-drift")
    create_topic(st.clusters["dc-a"], topic, 3)
    app = st.new_app([topic], [topic], ["*"])
    load = Steady(st.client_config(app, **{"ykafka.client.id": f"{app[0]}-drift"}), topic)
    try:
        wait_reported_topic(st, app[0], [load.client_id], topic)
        # idempotence asked for, acks=1 in force with it: the client runs without idempotence (librdkafka refuses
        # both), which its report shows as drift
        st.push(f"topic:{topic}", {"producer.acks": "1", "producer.idempotence": "true"})

        want = {topic: {"enable.idempotence": {"intended": "true", "in_force": "false"}}}

        def drifting() -> bool:  # (for a moment acks=1 is asked for and acks=all in force: the rebuild is due)
            seen = {c["client_id"]: c for c in st.client_reports(app[0])}.get(load.client_id) or {}
            return bool((seen.get("extra") or {}).get("drift") == want)

        wait_until(drifting, timeout=30)
        console.login(page, "viewer")
        assert int(page.locator("#drift-count").inner_text()) >= 1
        page.goto(f"{console.url}/console/clients/{app[0]}/{load.client_id}")
        row = page.locator("#drift tbody tr").first.inner_text().split()
        assert row == [topic, "enable.idempotence", "true", "false"], row
        console.shot(page, "client-drift")
    finally:
        load.stop()
    assert load.sent > 0 and not load.failed and load.delivered == load.sent
    assert check_stream(read_topic(st.clusters["dc-a"], topic, load.sent), load.sent)["lost"] == 0


def test_release_markers_are_drawn_on_a_topics_and_a_clients_charts(console: Console, page: Any) -> None:
    import time

    from tests.console_fixtures import write_aggregates

    st = console.stack
    topic = unique("console-marks")
    create_topic(st.clusters["dc-a"], topic, 1)
    app = st.new_app([topic], [topic], ["*"])
    load = Steady(st.client_config(app, **{"ykafka.client.id": f"{app[0]}-marks"}), topic)
    try:
        wait_reported_topic(st, app[0], [load.client_id], topic)
        minute = int(time.time() * 1000) // 60_000 * 60_000
        write_aggregates(st.home / "pipeline", [
            row for age in (4, 3, 2, 1) for who in (None, load.client_id) for row in (
                {"window_start": minute - age * 60_000, "name": "send.msgs", "topic": topic, "client_id": who,
                 "value": 600.0 * age},
                {"window_start": minute - age * 60_000, "name": "send.latency_ms", "topic": topic, "client_id": who,
                 "count": 4, "p99": 10.0 + age})])
        st.push(f"topic:{topic}", {"producer.linger.ms": "9"})
        wait_until(lambda: in_force(load.producer, topic, "producer.linger.ms") == 9, timeout=20)  # it reached us
        st.push(f"topic:{topic}", {"producer.linger.ms": "30"}, ips=["10.9.9.9"])  # a gray release: not to us
        assert st.admin("POST", "/v1/admin/config/gray/abandon", {"scope": f"topic:{topic}"}).status_code == 200
        st.push(f"topic:{unique('other')}", {"producer.linger.ms": "9"})  # another topic's release: not here
        console.login(page, "viewer")
        found = page.request.get(f"{console.url}/console/data/markers?topic={topic}").json()["markers"]
        assert [m["kind"] for m in found] == ["release", "gray", "rollback"], found
        assert [m["label"] for m in found[:2]] == ["release: producer.linger.ms=9", "gray: producer.linger.ms=30"]
        assert page.request.get(f"{console.url}/console/data/markers?since=x").status == 400
        page.goto(f"{console.url}/console/topics/{topic}")
        page.locator("#rate-chart[data-markers-drawn]").wait_for(state="attached")
        assert page.locator("#rate-chart").get_attribute("data-markers-drawn") == "3"
        assert page.locator("#latency-chart").get_attribute("data-markers-drawn") == "3"
        console.shot(page, "topic-markers")

        # the client's page: the markers of every namespace reaching it, a gray release only if it reached it
        url = f"{console.url}/console/data/markers?app={app[0]}&client={load.client_id}"
        ours = [m for m in page.request.get(url).json()["markers"] if m["target"] == f"ykafka.topic.{topic}"]
        assert [m["label"] for m in ours] == ["release: producer.linger.ms=9", "rollback"], ours
        assert page.request.get(f"{url}x").status == 404
        page.goto(f"{console.url}/console/clients/{app[0]}/{load.client_id}")
        for chart in ("#rate-chart", "#latency-chart"):
            page.locator(f"{chart}[data-markers-drawn]").wait_for(state="attached")
            assert int(page.locator(chart).get_attribute("data-markers-drawn")) >= 2
            title = page.locator(chart).get_attribute("title")
            assert "release: producer.linger.ms=9" in title and "rollback" in title, title
            assert "gray: producer.linger.ms=30" not in title, title
        assert page.locator("#errors-chart-note").inner_text() == \
            "No chart: no send or consume errors reported for this client in the window"
        console.shot(page, "client-markers")
    finally:
        load.stop()
    assert load.sent > 0 and not load.failed and load.delivered == load.sent
    assert check_stream(read_topic(st.clusters["dc-a"], topic, load.sent), load.sent)["lost"] == 0


def test_a_percentage_target_previews_the_clients_it_reaches_split_and_publishes_to_them_only(
        console: Console, page: Any) -> None:
    st = console.stack
    topic = unique("console-target")
    create_topic(st.clusters["dc-a"], topic, 3)
    app = st.new_app([topic], [topic], ["*"])
    ids = ids_in_bands(f"ykafka.topic.{topic}", app[0], [(0, 30), (30, 100), (30, 100)])
    loads = [Steady(st.client_config(app, **{"ykafka.client.id": cid}), topic) for cid in ids]
    try:
        wait_reported_topic(st, app[0], ids, topic)
        console.login(page, "operator")
        page.goto(f"{console.url}/console/config?scope=topic:{topic}")
        page.fill("textarea[name=changes]", "producer.linger.ms=15")
        page.fill("input[name=t_percent]", "30")
        page.fill("input[name=t_apps]", app[0])
        page.click("#preview-btn")
        split = page.locator("#reach-split").inner_text()
        assert split.startswith(f"1 of 3 clients in scope (30 %; apps {app[0]})"), split
        assert f"app {app[0]} 1" in split and "cluster dc-a 1" in split and "ykafka 0.1.0 1" in split, split
        assert page.locator("#reach li").count() == 1 and page.locator(f"#reach li[data-client='{ids[0]}']").count()
        console.shot(page, "config-targets")
        page.click("#publish")
        wait_until(lambda: in_force(loads[0].producer, topic, "producer.linger.ms") == 15, timeout=20)
        assert [in_force(ld.producer, topic, "producer.linger.ms") for ld in loads[1:]] == [5, 5]
    finally:
        for ld in loads:
            ld.stop()
    sent = sum(ld.sent for ld in loads)
    assert sent > 0 and not any(ld.failed for ld in loads) and sum(ld.delivered for ld in loads) == sent
    assert check_stream(read_topic(st.clusters["dc-a"], topic, sent), sent)["lost"] == 0
