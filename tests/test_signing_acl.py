"""Request signing and ACL patterns shared by the SDK and the MetaServer (pure logic)."""

from __future__ import annotations

from ykafka import acl, signing


def test_signature_verifies_and_detects_any_change() -> None:
    key = signing.derive_key("orders-app", "s3cret")
    headers = signing.signed_headers("orders-app", key, "POST", "/v1/auth/grant", b'{"a":1}')
    args = ("POST", "/v1/auth/grant", b'{"a":1}', headers[signing.HEADER_TIMESTAMP], headers[signing.HEADER_NONCE])
    assert signing.verify(key, *args, headers[signing.HEADER_SIGNATURE])
    tampered = [("GET",) + args[1:], args[:1] + ("/v1/x",) + args[2:], args[:2] + (b'{"a":2}',) + args[3:],
                args[:3] + ("1",) + args[4:], args[:4] + ("other-nonce",)]
    for variant in tampered:
        assert not signing.verify(key, *variant, headers[signing.HEADER_SIGNATURE])
    other_key = signing.derive_key("orders-app", "wrong")
    assert not signing.verify(other_key, *args, headers[signing.HEADER_SIGNATURE])
    assert signing.derive_key("other-app", "s3cret") != key  # salted by app id


def test_acl_patterns() -> None:
    grant = {"produce": ["orders", "logs.*"], "consume": ["*"], "group": ["billing-*"]}
    assert acl.check(grant, "produce", "orders")
    assert acl.check(grant, "produce", "logs.eu")
    assert not acl.check(grant, "produce", "orders2")
    assert not acl.check(grant, "produce", "logs")
    assert acl.check(grant, "consume", "anything")
    assert acl.check(grant, "group", "billing-eu") and not acl.check(grant, "group", "shipping")
    assert acl.valid_pattern("a.*") and acl.valid_pattern("*") and not acl.valid_pattern("a*b*")
