"""Disaster recovery: spill, replay, dual-DC failover and failback, one module per concern.

* :mod:`ykafka.dr.engine` - :class:`~ykafka.dr.engine.DisasterRecovery`, routes each send to its cluster
* :mod:`ykafka.dr.routes` - the route decision (pure) and the routes committed so far
* :mod:`ykafka.dr.outages` - outages of the primaries and the failback syncs that close them
* :mod:`ykafka.dr.attach` - wires an engine into a producer
* :mod:`ykafka.dr.port` - the seam: what the engine may use of a producer, and the producer of the engine
* :mod:`ykafka.dr.link` - one cluster's link: direct sends, re-routes, spill on failure
* :mod:`ykafka.dr.replay` - drains a spill queue once its cluster answers again
* :mod:`ykafka.dr.sync` - the failback sync (standby -> primary after an outage)
* :mod:`ykafka.dr.queue` / :mod:`ykafka.dr.journal` - the durable spill queue and its write-ahead journal
  (:mod:`ykafka.dr.chunks`: what memory keeps of its committed chunks)
* :mod:`ykafka.dr.spilldir` - the ``ykafka.spill.*`` options, the spill directory and its per-process slots
* :mod:`ykafka.dr.mailbox` - user callbacks reached on engine threads, run by the owner's ``poll()``
* :mod:`ykafka.dr.health` - cluster health (UP / SUSPECT / DOWN) from probes and client errors

See docs/architecture.md and docs/disaster-recovery.md.
"""
