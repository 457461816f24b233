"""The local stack behind ``ykafka dev``: a tool for developers and tests, apart from the client.

The SDK never imports this package. Its pieces: ``config`` (what runs where), ``procs`` (ports, pids, records),
``kafka`` and ``security`` (Apache Kafka brokers, secured or not), ``services`` (one process each) and ``stack``
(up / down / status). The names below are what ``ykafka dev``, the tests and the samples use.
"""

from ykafka.devstack.stack import *  # noqa: F403  (stack.__all__: Stack, StackConfig, free_port, ...)
from ykafka.devstack.stack import __all__ as __all__
