"""Wiring the engine into a :class:`ykafka.Producer` through its :class:`ykafka.dr.port.ProducerPort`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from ykafka.catalog import boolean
from ykafka.config import Option, settings_from
from ykafka.dr.engine import DisasterRecovery, DrOptions, RouteSpec
from ykafka.dr.health import HealthPolicy
from ykafka.dr.port import ProducerPort, SendingClient
from ykafka.dr.spilldir import SpillSettings, SpillSlot, spill_dir
from ykafka.headers import MESSAGE_ID, TRACE_ID
from ykafka.tracing import Tracer, header_text
from ykafka.transport import Message

log = structlog.get_logger(__name__)


#: the DR switch; the spill options are :mod:`ykafka.dr.spilldir`'s
OPTIONS = (
    Option("ykafka.dr.enabled", boolean, True,
           "route sends through the disaster-recovery engine (spill, replay, dual-DC failover)"),
)


def options_from(local: Mapping[str, Any], cache_dir: Path, **overrides: Any) -> DrOptions:
    """DrOptions from ``ykafka.spill.*`` local options."""
    spill = settings_from(SpillSettings, local)
    return DrOptions(spill_dir=spill_dir(local, cache_dir), spill_max_bytes=spill.max_bytes,
                     spill_commit=spill.commit, spill_fsync=spill.fsync,
                     spill_async_max_pending=spill.async_max_pending, **overrides)


def attach(producer: ProducerPort, on_change: Callable[[], None] | None = None,
           on_mail: Callable[[], None] | None = None, **overrides: Any) -> DisasterRecovery:
    """Route every send of a :class:`ykafka.Producer` through a DisasterRecovery engine (its send hook).

    Direct sends still use the Producer's own hot-configured client for the cluster; the engine adds
    spill, replay, standby routing and the failback sync, with its own clients for the standby and for
    replay. The spill directory is ``<ykafka.spill.dir>/<client id>`` so two producers never share one.
    ``on_change``: called when routes or links moved (cached direct paths are stale); ``on_mail``: when a
    callback from the engine's threads waits for the producer's poll().
    """
    existing = producer.disaster_recovery
    if existing is not None:  # the Producer attached itself (ykafka.dr.enabled): one engine per producer
        return existing
    rt = producer.runtime
    local = rt.conf.options
    overrides.setdefault("defer_callbacks", True)  # callbacks run in the producer's poll() / flush() only
    overrides.setdefault("app_id", rt.app_id)
    opts = options_from(local, rt.conf.cache_dir, **overrides)
    slot: SpillSlot | None = None
    if local.get("ykafka.client.id"):  # a stable identity: its own directory
        opts.spill_dir = opts.spill_dir / re.sub(r"[^A-Za-z0-9._-]", "_", str(local["ykafka.client.id"]))
        opts.spill_dir.mkdir(parents=True, exist_ok=True)
    else:  # the first free slot of the app: a restarted process finds what its predecessor left
        slot = SpillSlot(opts.spill_dir / re.sub(r"[^A-Za-z0-9._-]", "_", rt.app_id))
        opts.spill_dir = slot.path
    with contextlib.ExitStack() as undo:  # a failure below releases the slot and closes the engine
        if slot is not None:
            undo.callback(slot.release)
        engine = _wire(producer, opts)
        undo.callback(engine.close, 1.0)
        if slot is not None:
            engine.on_close.append(slot.release)
        producer.add_error_listener(engine.client_error)  # its clients' errors: probes, a broker's refusal
        producer.set_hooks(send=_send_hook(engine, producer.default_delivery))
        if on_change is not None:
            engine.on_change.append(on_change)
        if on_mail is not None:
            engine.mailbox.on_mail = on_mail
        undo.pop_all()
    return engine


def _send_hook(engine: DisasterRecovery, default_dr: Any) -> Any:
    def send_hook(_producer: Any, client: SendingClient, topic: str, value: Any, key: Any, partition: int,
                  on_delivery: Any, timestamp: int, headers: Any) -> bool:
        engine.produce(topic, value, key, partition, on_delivery or default_dr, timestamp, headers,
                       client=client.rd, client_cluster=client.cluster)
        return True

    return send_hook


def _wire(producer: ProducerPort, opts: DrOptions) -> DisasterRecovery:
    """The engine over the producer's runtime: routes, spill timeouts, health policy, rebuilds, trace steps."""
    rt = producer.runtime
    specs: dict[str, tuple[int, RouteSpec]] = {}

    def route(topic: str) -> RouteSpec:
        cached = specs.get(topic)
        version = rt.version
        if cached is not None and cached[0] == version:
            return cached[1]
        primary = rt.route(topic=topic)
        effective = dict(rt.effective(topic=topic, cluster=primary))
        if not effective.get("route.standby"):  # hot config first, then the cluster registry's standby
            with contextlib.suppress(Exception):
                effective["route.standby"] = rt.cluster(primary).standby
        spec = RouteSpec.from_effective(primary, effective)
        specs[topic] = (version, spec)
        return spec

    known: dict[str, dict[str, Any]] = {}

    def client_settings(cluster: str) -> dict[str, Any]:
        # through ``producer`` (a weakref.proxy from the Producer) on each call: the engine's threads must not keep
        # the producer alive (a bound method would). Collected, it has no settings; until the reaper closes the
        # engine its probes use the last ones (not an error that would mark the cluster down)
        try:
            known[cluster] = producer.client_settings(cluster)
        except ReferenceError:
            if cluster not in known:
                raise
        return known[cluster]

    engine = DisasterRecovery(
        client_settings, route, opts,
        spill_after_ms=lambda cluster: int(rt.effective(cluster=cluster)["spill.after.ms"]),
        health_policy=lambda cluster: HealthPolicy.from_effective(rt.effective(cluster=cluster)))

    def rebuild(cluster: str) -> None:
        with contextlib.suppress(ReferenceError):  # the producer was collected: the engine is being closed
            producer.retire_clients(cluster, "cluster recovered: fresh client (idempotence state)")

    engine.on_link_available = rebuild
    rates: dict[str, tuple[int, float]] = {}

    def trace_step(kind: str, cluster: str, topic: str, key: Any, headers: Any, m: Message | None) -> None:
        """A spill step of a message the Producer traced: it carries a ykafka-trace id, a ykafka-id sampled
        by hash, or (rate 1.0) nothing, and is then found by its key and, once replayed, its coordinates."""
        try:
            tracer = producer.tracer()
        except ReferenceError:  # the producer was collected: the engine is being closed
            return
        if not tracer.active:
            return
        cached = rates.get(topic)
        if cached is None or cached[0] != rt.version:
            cached = rates[topic] = (rt.version, Tracer.rate(rt.effective(topic=topic, cluster=rt.route(topic=topic))))
        rate = cached[1]
        if not rate:
            return
        mid = header_text(headers, TRACE_ID)
        if mid is None:
            stamped = header_text(headers, MESSAGE_ID)
            if stamped is not None:
                if not Tracer.sampled(stamped, rate):
                    return
                mid = stamped
            elif rate < 1.0:
                return  # not sampled when produced (it would carry a ykafka-trace header)
        tracer.emit(kind, topic=topic, key=key, msg_id=mid, cluster=cluster,
                    partition=None if m is None else m.partition(), offset=None if m is None else m.offset(),
                    detail="disk spill" if m is None else "replayed from the disk spill")

    engine.trace_step = trace_step
    return engine
