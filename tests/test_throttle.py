"""Token buckets: pacing, the wait bound, in-place rate changes, buckets shared by the scope that set them."""

from __future__ import annotations

import time

import pytest

from ykafka.errors import ThrottledError
from ykafka.throttle import Throttle, Throttles, TokenBucket


def test_bucket_paces_to_the_rate_after_its_burst() -> None:
    throttle = Throttle(TokenBucket(50), None, max_wait_s=5)
    start = time.monotonic()
    waited = sum(throttle.acquire(10) for _ in range(75))  # burst 50, then 25 more at 50/s
    elapsed = time.monotonic() - start
    assert 0.4 <= elapsed < 1.2 and waited > 0.3


def test_wait_beyond_the_bound_raises_at_once_and_takes_nothing() -> None:
    bucket = TokenBucket(0.5)  # one message per 2 s
    throttle = Throttle(bucket, None, max_wait_s=1.0)
    assert throttle.acquire(1) == 0.0
    start = time.monotonic()
    with pytest.raises(ThrottledError, match="more than the 1000 ms bound"):
        throttle.acquire(1)
    assert time.monotonic() - start < 0.1
    bucket.set_rate(1000)  # raised in place: the next send goes soon
    time.sleep(0.01)
    assert throttle.acquire(1) < 0.5


def test_bytes_limit_gives_back_the_message_token_when_refused() -> None:
    msgs, nbytes = TokenBucket(10), TokenBucket(100)
    throttle = Throttle(msgs, nbytes, max_wait_s=0.2)
    throttle.acquire(100)
    before = msgs._tokens
    with pytest.raises(ThrottledError):
        throttle.acquire(1000)  # 10 s of byte budget
    assert msgs._tokens == pytest.approx(before, abs=0.05)


def test_buckets_are_per_source_scope_and_zero_means_unlimited() -> None:
    throttles = Throttles()
    eff = {"producer.rate.limit.msgs": 100.0, "producer.rate.limit.bytes": 0.0}
    a = throttles.for_topic(eff, {"producer.rate.limit.msgs": "ykafka.global"}, 1.0)
    b = throttles.for_topic(eff, {"producer.rate.limit.msgs": "ykafka.global"}, 1.0)
    c = throttles.for_topic(eff, {"producer.rate.limit.msgs": "ykafka.topic.c"}, 1.0)
    assert a is not None and b is not None and c is not None
    assert a.msgs is b.msgs and a.msgs is not c.msgs and a.bytes is None
    assert throttles.for_topic({"producer.rate.limit.msgs": 0.0, "producer.rate.limit.bytes": 0.0}, {}, 1.0) is None
