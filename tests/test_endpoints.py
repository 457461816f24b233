"""Instance lists (ykafka.endpoints): random start, move on failure, back-off once all failed; and the
Apollo client failing over between real config-service processes."""

from __future__ import annotations

import random
import socket
import time
import uuid
from pathlib import Path

import pytest

from tests.sdk_fixtures import wait_until
from tests.support import start_config_service
from ykafka.apollo import ApolloClient, NamespaceConfig
from ykafka.config import load
from ykafka.endpoints import Endpoints, parse_urls, retry_after_s
from ykafka.errors import ConfigError


def test_parse_urls_strips_dedupes_and_rejects_bad_entries() -> None:
    assert parse_urls(" http://a:1/ , https://b:2,http://a:1") == ["http://a:1", "https://b:2"]
    with pytest.raises(ValueError, match="comma-separated"):
        parse_urls("http://a:1,ftp://b")
    with pytest.raises(ValueError, match="empty"):
        parse_urls(" , ")


def test_start_is_spread_at_random_over_the_list() -> None:
    urls = [f"http://h{i}:80" for i in range(4)]
    starts = {Endpoints(urls, rng=random.Random(seed)).current for seed in range(200)}
    assert starts == set(urls)


def test_failure_moves_on_and_backs_off_only_after_every_instance_failed() -> None:
    ep = Endpoints("http://a:1,http://b:2,http://c:3", rng=random.Random(7), base_backoff_s=1.0)
    first = ep.current
    assert ep.failed(first) == 0.0 and ep.current != first
    second = ep.current
    assert ep.failed("http://stale:9") == 0.0 and ep.current == second  # a stale report changes nothing
    assert ep.failed(second) == 0.0
    wait = ep.failed(ep.current)  # third failure in a row: every instance tried once
    assert 1.0 <= wait <= 2.0
    ep.succeeded()
    assert ep.failed(ep.current) == 0.0  # a success starts a new round


def test_a_round_tries_every_instance_once_before_waiting() -> None:
    # a random pick among all the others went back to a dead instance and left a live one untried: with
    # 3 instances about a third of the rounds never reached the third (issue 41: refused watchers after a kill)
    urls = ["http://a:1", "http://b:2", "http://c:3"]
    for seed in range(200):
        ep = Endpoints(urls, rng=random.Random(seed))
        for _ in range(5):  # rounds in a row, none succeeding
            tried = [ep.current]
            assert ep.failed(tried[0]) == 0.0
            tried.append(ep.current)
            assert ep.failed(tried[1]) == 0.0
            tried.append(ep.current)
            assert ep.failed(tried[2]) > 0.0
            assert sorted(tried) == urls, (seed, tried)
            assert ep.current != tried[2]  # the next round does not start where this one ended


def test_an_instance_that_says_retry_after_is_waited_for_that_long_round_after_round() -> None:
    # before: the wait after a round of 503 + Retry-After grew to 30 s like one after a round of dead
    # instances, so a watcher no instance could park learnt of a release up to 30 s late (issue 41)
    urls = ["http://a:1", "http://b:2", "http://c:3"]
    ep = Endpoints(urls, rng=random.Random(3))
    waits = []
    for _ in range(40):  # 120 refusals in a row
        for k in range(3):
            wait = ep.failed(ep.current, retry_after=2.0 if k else None)  # one instance dead, two refusing
            if k < 2:
                assert wait == 0.0
        waits.append(wait)
    assert min(waits) >= 2.0 and max(waits) <= 2.5, (min(waits), max(waits))
    # a round where no instance said when (all down) still backs off, growing
    down = Endpoints(urls, rng=random.Random(3), base_backoff_s=1.0)
    rounds = [[down.failed(down.current) for _ in range(3)][-1] for _ in range(6)]
    assert rounds[-1] > 8.0 and rounds[-1] > rounds[0]


def test_retry_after_header_values() -> None:
    assert retry_after_s("5") == 5.0 and retry_after_s(" 1.5 ") == 1.5 and retry_after_s("0") == 0.0
    assert retry_after_s("86400") == 300.0  # a wrong header cannot silence a client for a day
    assert retry_after_s(None) is None and retry_after_s("-3") is None and retry_after_s("nan") is None
    assert retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT") is None


def test_config_accepts_a_comma_separated_configcenter_list() -> None:
    conf = load({"ykafka.configcenter.url": "http://a:1/, http://b:2", "bootstrap.servers": "h:9092"}, "producer",
                env={})
    assert conf.get("ykafka.configcenter.url") == "http://a:1,http://b:2"
    with pytest.raises(ConfigError):
        load({"ykafka.configcenter.url": "http://a:1,nope", "bootstrap.servers": "h:9092"}, "producer", env={})


def _dead_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_apollo_client_fails_over_from_a_killed_instance_and_reparks(tmp_path: Path) -> None:
    a = start_config_service(tmp_path / "a", longpoll_timeout=30)
    b = start_config_service(tmp_path / "b", longpoll_timeout=30)
    ns = f"ykafka.topic.t-{uuid.uuid4().hex[:8]}"
    got: list[NamespaceConfig] = []
    client = ApolloClient(f"{a.url},{b.url}", "ykafka", "default", "127.0.0.1", None, got.append)
    try:
        client.endpoints = Endpoints([a.url, b.url], rng=random.Random(0))
        while client.endpoints.current != a.url:  # park on A first
            client.endpoints = Endpoints([a.url, b.url])
        client.subscribe(ns)
        client.start()
        a.wait_parked(1)  # parked on A (its /stats), instead of sleeping
        a.proc.kill()
        a.proc.wait()
        killed = time.monotonic()
        wait_until(lambda: client.url == b.url, timeout=5, message="moved to B")
        b.publish(ns, {"producer.acks": "all"})
        wait_until(lambda: any(c.configurations.get("producer.acks") == "all" for c in got), timeout=5,
                   message="release through B reached the client")
        assert time.monotonic() - killed < 5.0
    finally:
        client.close()
        a.stop()
        b.stop()


def test_fetch_skips_a_dead_instance(tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc")
    ns = f"ykafka.topic.t-{uuid.uuid4().hex[:8]}"
    svc.publish(ns, {"k": "v"})
    client = ApolloClient(f"{_dead_url()},{svc.url}", "ykafka", "default", "127.0.0.1", None, lambda c: None)
    try:
        dead = next(u for u in client.endpoints.urls if u != svc.url)
        while client.endpoints.current != dead:
            client.endpoints = Endpoints(client.endpoints.urls)
        assert client.fetch(ns).configurations == {"k": "v"}
        assert client.url == svc.url
    finally:
        client.close()
        svc.stop()
