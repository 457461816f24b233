"""The ykafka consumer: drop-in ``Consumer`` plus the ``run(handler)`` worker-pool framework."""

from __future__ import annotations

from ykafka.consumer.client import Consumer
from ykafka.consumer.dedupe import Dedupe, message_id
from ykafka.consumer.retry import RetryPolicy, dlq_topic, retry_topic

__all__ = ["Consumer", "Dedupe", "RetryPolicy", "dlq_topic", "message_id", "retry_topic"]
