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
from ykafka.endpoints import Endpoints, parse_urls
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
