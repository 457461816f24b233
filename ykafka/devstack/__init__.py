"""The local stack behind ``ykafka dev``: a tool for developers and tests, apart from the client.

The SDK never imports this package. Its pieces: ``config`` (what runs where), ``procs`` (ports, pids, records),
``kafka`` and ``security`` (Apache Kafka brokers, secured or not), ``services`` (one process each) and ``stack``
(up / down / status). The names below are what ``ykafka dev``, the tests and the samples use.
"""

from ykafka.devstack.stack import (
    BROKER_KINDS,
    DEFAULT_CONFIG,
    STORAGES,
    ClusterSpec,
    Service,
    ServiceRecord,
    Stack,
    StackConfig,
    StackError,
    ephemeral_config,
    free_port,
    replica_name,
    services,
    write_private,
    write_record,
)

__all__ = ["BROKER_KINDS", "DEFAULT_CONFIG", "STORAGES", "ClusterSpec", "Service", "ServiceRecord", "Stack",
           "StackConfig", "StackError", "ephemeral_config", "free_port", "replica_name", "services",
           "write_private", "write_record"]
