"""Property tests (hypothesis) of every parser that takes outside input: whatever arrives, the answer is a
value or the parser's one documented error, the error never carries the input back, and good input
round-trips. The servers' HTTP surface is fuzzed separately (tests/test_fuzz.py)."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import click
import pytest
from fastapi import HTTPException
from hypothesis import given, settings
from hypothesis import strategies as st

from metaserver.configcenter.configservice import BAD_NOTIFICATIONS, parse_notifications
from metaserver.configcenter.errors import BadRequest
from metaserver.domain import sealing
from metaserver.domain.auth import AuthFailed, _check_signature
from metaserver.routes.observe import MAX_SINCE, parse_since
from metaserver.settings import Settings
from pipeline.store import parse_duration
from ykafka import acl, catalog, signing
from ykafka.admin.dlq import parse_since as dlq_since

PROPS = settings(max_examples=300, deadline=None, derandomize=True, database=None)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=4),
    max_leaves=20)
entries = st.fixed_dictionaries({}, optional={"namespaceName": json_values | st.text(min_size=1, max_size=30),
                                              "notificationId": json_values | st.integers()})
durations = st.one_of(st.text(max_size=30),
                      st.from_regex(r"\A[-+]?[0-9]{0,400}(\.[0-9]*)?(e[-+]?[0-9]{1,4})?[smhdw]?\Z"),
                      st.sampled_from(["inf", "nan", "-1s", "1e400d", "1e9d", "0", " 15m ", "1_000s", "Infinity",
                                       "9" * 400 + "d", "99999999999d"]))


@PROPS
@given(raw=st.one_of(st.text(max_size=200), json_values.map(json.dumps), st.lists(entries, max_size=5).map(json.dumps),
                     st.integers(1, 5000).map(lambda depth: "[" * depth + "]" * depth)))
def test_notifications_parse_to_pairs_or_apollos_400(raw: str) -> None:
    try:
        parsed = parse_notifications(raw)
    except BadRequest as exc:
        assert exc.status == 400 and exc.message == BAD_NOTIFICATIONS  # never the input, never internal text
        return
    assert parsed and all(isinstance(name, str) and name and isinstance(nid, int) for name, nid in parsed)


@PROPS
@given(pairs=st.lists(st.tuples(st.text(min_size=1, max_size=40), st.integers(-1, 2**40)), min_size=1, max_size=8))
def test_good_notifications_round_trip(pairs: list[tuple[str, int]]) -> None:
    raw = json.dumps([{"namespaceName": name, "notificationId": nid} for name, nid in pairs])
    assert parse_notifications(raw) == pairs


@PROPS
@given(text=durations)
def test_since_is_a_bounded_positive_span_or_a_422_without_the_input(text: str) -> None:
    try:
        span = parse_since(text)
    except HTTPException as exc:
        assert exc.status_code == 422 and str(exc.detail).startswith("since: use a positive duration")
        return
    assert dt.timedelta(0) < span <= MAX_SINCE


@PROPS
@given(text=durations)
def test_pipeline_durations_parse_or_raise_value_error(text: str) -> None:
    try:
        span = parse_duration(text)
    except ValueError as exc:
        assert str(exc).startswith("invalid duration")
        return
    assert isinstance(span, dt.timedelta)


@PROPS
@given(number=st.integers(0, 10**6), unit=st.sampled_from(["s", "m", "h", "d", "w"]))
def test_pipeline_durations_round_trip(number: int, unit: str) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit] * number
    assert parse_duration(f"{number}{unit}") == dt.timedelta(seconds=seconds)


@PROPS
@given(text=st.one_of(durations, st.datetimes().map(dt.datetime.isoformat)))
def test_dlq_since_is_epoch_ms_or_a_click_error(text: str) -> None:
    try:
        value = dlq_since(text, now=1_800_000_000.0)
    except click.BadParameter:
        return
    assert isinstance(value, int)


SVC = SimpleNamespace(settings=Settings(), sealer=sealing.load(Settings(), b"k" * 32))  # signing keys as stored
APP = {"app_id": "orders", "signing_key": signing.derive_key("orders", "s3cret")}
header_text = st.one_of(st.none(), st.text(max_size=64), st.from_regex(r"\A[0-9]{1,400}\Z"))


@PROPS
@given(app=header_text, timestamp=header_text, nonce=header_text, signature=header_text)
def test_signature_headers_never_fail_other_than_auth_failed(app: str | None, timestamp: str | None,
                                                            nonce: str | None, signature: str | None) -> None:
    headers = {name: value for name, value in ((signing.HEADER_APP, app), (signing.HEADER_TIMESTAMP, timestamp),
                                               (signing.HEADER_NONCE, nonce), (signing.HEADER_SIGNATURE, signature))
               if value is not None}
    with pytest.raises(AuthFailed):  # random headers never pass, and never fail any other way
        _check_signature(SVC, APP, headers, "POST", "/v1/auth/grant", b"{}", 1_800_000_000.0)  # type: ignore[arg-type]


@PROPS
@given(body=st.binary(max_size=64))
def test_a_correct_signature_is_accepted_and_any_change_refused(body: bytes) -> None:
    headers = signing.signed_headers("orders", APP["signing_key"], "POST", "/v1/auth/grant", body)
    now = int(headers[signing.HEADER_TIMESTAMP]) / 1000
    nonce, _ = _check_signature(SVC, APP, headers, "POST", "/v1/auth/grant", body, now)  # type: ignore[arg-type]
    assert nonce == headers[signing.HEADER_NONCE]
    with pytest.raises(AuthFailed):
        _check_signature(SVC, APP, headers, "POST", "/v1/auth/grant", body + b"x", now)  # type: ignore[arg-type]


@PROPS
@given(name=st.sampled_from(sorted(catalog.KEYS)), value=st.one_of(st.text(max_size=40), st.integers().map(str),
                                                                   st.floats().map(str)))
def test_hot_config_values_parse_or_are_rejected_with_a_reason(name: str, value: str) -> None:
    try:
        parsed = catalog.parse(name, value)
    except catalog.InvalidConfigValue as exc:
        assert exc.reason and exc.key == name
        return
    assert catalog.parse(name, catalog.render(name, parsed)) == parsed  # what the SDK applies, rendered, is stable


@PROPS
@given(raw=st.dictionaries(st.one_of(st.sampled_from(sorted(catalog.KEYS)), st.text(max_size=20)),
                           st.text(max_size=30), max_size=8))
def test_a_whole_namespace_never_raises_and_keeps_only_good_values(raw: dict[str, Any]) -> None:
    update = catalog.validate_layer(raw)
    assert set(update.values) | set(update.rejected) | set(update.unknown) >= set(raw)
    for name, value in update.values.items():
        assert catalog.parse(name, catalog.render(name, value)) == value


@PROPS
@given(name=st.text(max_size=140))
def test_one_name_rule_for_apps_clusters_topics_and_groups(name: str) -> None:
    problem = acl.name_problem(name)
    if problem is None:
        assert acl.pattern_problem(name) is None and acl.pattern_problem(name + "*") is None
        assert catalog.Scope.parse(f"topic:{name}").name == name
    else:
        assert name not in problem or len(name) <= 2 and name in problem  # the reason never echoes the name
