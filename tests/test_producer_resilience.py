"""Start-up and renewal when the MetaServer or the config center is away; the grant and config caches."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import TcpRelay
from tests.sdk_fixtures import read_topic, wait_until
from tests.support import LocalStack, start_config_service
from ykafka import AclDenied, AuthError, MetaServerUnavailable, Producer
from ykafka.auth import GrantStore
from ykafka.devstack import free_port


def _topic(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def _grant_path(conf: dict[str, object]) -> Path:
    return GrantStore(Path(str(conf["ykafka.cache.dir"])), str(conf["ykafka.app.id"]),
                      str(conf["ykafka.metaserver"]).split(",")).path


def test_starts_with_metaserver_down_from_a_valid_cached_grant(sdk_stack: LocalStack) -> None:
    app = sdk_stack.new_app(produce=["cached-*"])
    relay = TcpRelay(sdk_stack.metaserver.removeprefix("http://"))  # the MetaServer's address, to take down
    conf = sdk_stack.client_config(app, **{"ykafka.metaserver": relay.url})
    with Producer(conf) as producer:
        assert producer.runtime.grant is not None
    topic = _topic("cached")
    relay.close()  # the same address, nothing answering now
    with Producer(conf) as producer:
        grant = producer.runtime.grant
        assert grant is not None and grant.app_id == app[0]
        with pytest.raises(AclDenied):  # the cached grant's ACL is enforced too
            producer.produce(_topic("other"), b"x:0")
        for i in range(20):
            producer.produce(topic, f"k:{i}".encode(), b"k")
        assert producer.flush(15) == 0
    assert len(read_topic(sdk_stack.clusters["dc-a"], topic, 20)) == 20


def test_expired_cached_grant_does_not_start(sdk_stack: LocalStack) -> None:
    relay = TcpRelay(sdk_stack.metaserver.removeprefix("http://"))
    conf = sdk_stack.client_config(**{"ykafka.metaserver": relay.url})
    with Producer(conf):
        pass
    path = _grant_path(conf)
    data = json.loads(path.read_text())
    data["expires_at"] = time.time() - 1
    path.write_text(json.dumps(data))
    relay.close()
    with pytest.raises(MetaServerUnavailable, match="no unexpired cached grant"):
        Producer(conf)


def test_a_grant_cached_from_one_metaserver_never_starts_a_client_pointed_at_another(sdk_stack: LocalStack) -> None:
    conf = sdk_stack.client_config()
    with Producer(conf) as producer:
        issuer = producer.runtime.grant.issuer if producer.runtime.grant else ""
    assert len(issuer) == 16 and _grant_path(conf).exists()
    with pytest.raises(MetaServerUnavailable, match="no unexpired cached grant"):  # valid grant, other server
        Producer(dict(conf, **{"ykafka.metaserver": _dead_url()}))
    # the same address now answered by another deployment (another id): the old folder's caches are dropped
    store = GrantStore(Path(conf["ykafka.cache.dir"]), sdk_stack.app_id, [sdk_stack.metaserver])
    assert store.load() is not None
    (store.folder / "server.id").write_text("another-deployment")
    assert store.load() is None, "a grant from another issuer is never used"


def test_wrong_secret_is_refused_even_with_a_cached_grant(sdk_stack: LocalStack) -> None:
    conf = sdk_stack.client_config()
    with Producer(conf):
        pass
    with pytest.raises(AuthError, match="refused"):
        Producer(dict(conf, **{"ykafka.app.secret": "not-the-secret"}))


def test_starts_with_config_center_down_from_cached_config(sdk_stack: LocalStack, tmp_path: Path) -> None:
    svc = start_config_service(tmp_path / "cc")
    topic = _topic("cccache")
    ns = f"ykafka.topic.{topic}"
    conf = {"bootstrap.servers": sdk_stack.clusters["dc-a"], "ykafka.configcenter.url": svc.url,
            "ykafka.cache.dir": str(tmp_path / "cache"), "ykafka.configcenter.fetch.timeout.ms": 500}
    try:
        svc.publish(ns, {"producer.acks": "1", "producer.compression": "gzip"})
        with Producer(conf) as producer:
            producer.produce(topic, b"k:0", b"k")
            assert producer.applied_config(topic)["producer.compression"] == "gzip"
            assert producer.flush(15) == 0
    finally:
        svc.stop()
    with Producer(conf) as producer:  # config center unreachable now
        for i in range(1, 11):
            producer.produce(topic, f"k:{i}".encode(), b"k")
        applied = producer.applied_config(topic)
        assert applied["producer.compression"] == "gzip" and applied["producer.acks"] == "1"
        assert producer.flush(15) == 0
    assert len(read_topic(sdk_stack.clusters["dc-a"], topic, 11)) == 11


def test_acl_change_reaches_a_running_producer_through_renewal(sdk_stack: LocalStack) -> None:
    app = sdk_stack.new_app(produce=["renew-*"])
    topic = _topic("renew")
    with Producer(sdk_stack.client_config(app)) as producer:
        producer.produce(topic, b"k:0", b"k")
        assert producer.flush(15) == 0
        resp = sdk_stack.admin("PUT", f"/v1/admin/apps/{app[0]}/acl", {"produce": ["other-*"], "consume": [],
                                                                       "group": []})
        assert resp.status_code == 200, resp.text

        def denied() -> bool:
            try:
                producer.produce(topic, b"k:x", b"k")
                return False
            except AclDenied:
                return True

        wait_until(denied, timeout=15, interval=0.2, message="ACL change applied via renewal")
        producer.purge()


def test_rejected_token_triggers_reauthentication(sdk_stack: LocalStack) -> None:
    with Producer(sdk_stack.client_config()) as producer:
        rt = producer.runtime
        assert rt.grant is not None
        rt._grant = dataclasses.replace(rt.grant, token="v1.bogus.token")  # as if the server forgot it
        wait_until(lambda: rt.grant is not None and rt.grant.token != "v1.bogus.token", timeout=15,
                   message="re-authenticated grant")
        assert rt.reports_sent >= 1
