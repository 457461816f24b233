"""Lifecycle of the librdkafka consumer behind a ykafka Consumer: build, subscribe, rebuild, leave, pause.

librdkafka cannot change fetch sizes or the assignment strategy of a live handle, so such changes close
the handle (its revoke callback lets the framework finish and commit in-flight work) and build a new one
that rejoins the group from the committed positions. Pausing has several independent reasons (operator,
back-pressure, retry hold); a partition fetches again only when none remains. Everything here runs on
the thread that polls the consumer.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import structlog

from ykafka import catalog
from ykafka.transport import RawConsumer, TopicPartition

log = structlog.get_logger(__name__)

TP = tuple[str, int]
RebalanceCallback = Callable[[Any, list[TopicPartition]], None]
OPERATOR = "operator"  # consumer.paused
BACKPRESSURE = "backpressure"  # in-flight window full
HOLD = "hold"  # retry copy not yet due


class RebalanceHooks(Protocol):
    """What the framework does around a rebalance (the drop-in client has none)."""

    def assigned(self, partitions: list[TopicPartition]) -> None: ...

    def revoked(self, partitions: list[TopicPartition]) -> None: ...

    def lost(self, partitions: list[TopicPartition]) -> None: ...


class PollGate:
    """Whether the drop-in ``Consumer.poll`` may hand the call straight to librdkafka's ``poll`` (``fast``: that
    bound method, else None), and when it may ask again.

    ``poll`` owes a call nothing but librdkafka's own work when no live change waits, the consumer has not left,
    no rate limit holds, a handle is built and no topic the handle may return is traced; then the per-call checks
    and the per-message trace test (``Message.topic`` builds a str a message, hashed for the look-up: ~2,700
    instructions a call in all, docs/benchmarks.md *Call forms*) are skipped. Whatever could make one of those
    untrue disarms the gate from any thread (:meth:`disarm`: a queued live change, a version move, a new
    partition, a handle built or closed, ``close()``); the polling thread arms it again after the checks passed,
    unless ``epoch`` moved meanwhile (a disarm that raced the arming wins).

    The consumer's ``poll`` is ``entry``, a ``functools.partial`` whose target the gate swaps: librdkafka's bound
    ``poll`` while armed, the checked call (``checked``) otherwise. A partial calls its target from C, so an armed
    call costs no Python frame (one frame a call was ~500-700 instructions, more than 5 % of librdkafka's own
    ``poll``: docs/benchmarks.md). Nothing of ours runs after an armed call either, so a message it returns must
    need nothing: the gate arms only while every topic of the subscription is resolved and untraced too (a
    rebalance inside the call can give a partition of any of them; a pattern subscription, whose topics are not
    known before, never arms) and every subscription change disarms it. The drop-in ``consume`` reads the same
    gate: armed, it is the handle's own ``consume`` (``fast.__self__``), without the per-message trace test.
"""

    __slots__ = ("checked", "closed", "entry", "epoch", "fast", "handles", "tried")

    def __init__(self) -> None:
        self.fast: Callable[..., Any] | None = None
        self.epoch = 0  # moved by every disarm
        self.tried = -1  # the epoch at which arming last failed: not tried again until it moves
        self.closed = False
        self.entry: functools.partial[Any] | None = None
        self.checked: Callable[..., Any] | None = None
        #: every handle's ``poll`` ever armed: a call may still be inside one when another thread disarms, and the
        #: partial holds its target only by its own reference (one a handle built, so a few)
        self.handles: list[Callable[..., Any]] = []

    def bind(self, entry: functools.partial[Any], checked: Callable[..., Any]) -> None:
        """The drop-in ``poll`` this gate steers (its target is ``checked`` until armed)."""
        self.entry, self.checked = entry, checked
        if self.fast is not None:
            _retarget(entry, self.fast)

    def arm(self, fast: Callable[..., Any]) -> None:
        """Let the drop-in ``poll`` be ``fast`` (librdkafka's bound ``poll``; the polling thread, checks done)."""
        if not self.handles or self.handles[-1] != fast:
            self.handles.append(fast)
        self.fast = fast
        if self.entry is not None:
            _retarget(self.entry, fast)

    def unarm(self) -> None:
        """Back to the checked call without moving ``epoch`` (an arming that a disarm raced)."""
        self.fast = None
        if self.entry is not None and self.checked is not None:
            _retarget(self.entry, self.checked)

    def disarm(self) -> None:
        self.epoch += 1
        self.unarm()


def _retarget(entry: functools.partial[Any], target: Callable[..., Any]) -> None:
    """Point ``entry`` at ``target`` (the pickling protocol's ``__setstate__``: atomic under the GIL)."""
    entry.__setstate__((target, (), None, None))  # type: ignore[attr-defined]  # (typeshed omits it)


class ConsumerSession:
    """Owns the current confluent-kafka ``Consumer`` and rebuilds it when its settings change."""

    def __init__(self, props: Mapping[str, Any], facade: Any = None,
                 factory: Callable[[dict[str, Any]], RawConsumer] = RawConsumer) -> None:
        self.props: dict[str, Any] = dict(props)
        # passed to user rebalance callbacks as their first argument; weakly: the session outlives a collected
        # Consumer for the time its shutdown takes (ykafka/lifecycle.py), and must not keep it alive
        self._facade = None if facade is None else weakref.ref(facade)
        self.factory = factory
        self.consumer: RawConsumer | None = None
        self.generation = 0  # how many handles were built
        self.client_config: dict[str, Any] = {}  # the settings of the current handle
        self.hooks: RebalanceHooks | None = None
        self.left = False  # consumer.leave in force: no handle, not in the group
        self.operator_paused = False
        self.rebalancing = False  # the user's on_assign runs (its assign calls are the group's assignment)
        self.user_assigned = False  # ... and it made the assignment itself
        self._topics: list[str] | None = None
        self._manual: list[TopicPartition] | None = None
        self._user: dict[str, RebalanceCallback | None] = {}
        self._reasons: dict[TP, set[str]] = {}
        # Kept by the rebalance callbacks so other threads can read them without calling into the handle
        # (librdkafka calls from a second thread can block behind the polling thread for a long time).
        self.member_id: str | None = None
        self.assigned: set[TP] = set()
        #: Paused partitions rewound to an offset: messages of them fetched before the seek are dropped
        #: (they come again from that offset once the partition resumes).
        self.rewound: dict[TP, int] = {}
        #: Every partition the current handle was ever given (group assignments, the user's own assigns in a
        #: rebalance callback, manual and incremental assigns), kept across revokes until the handle closes: a
        #: message ``consume`` returns is of one of these, whatever rebalance or subscription change ran inside it.
        self._fetchable: set[TP] = set()
        #: partition number -> the only topic of ``_fetchable`` that has that number. The fetch loop names a run of
        #: one partition number by it without asking each message its topic (``Message.topic`` a message cost ~300
        #: instructions, docs/benchmarks.md); a number two topics share is absent, and its runs are split by topic.
        #: Replaced, never mutated, so the fetch thread reads a consistent map without a lock.
        self.topic_of: dict[int, str] = {}
        #: the drop-in poll's short cut (disarmed whenever the handle or the fetchable partitions change)
        self.gate = PollGate()

    # -- handle -----------------------------------------------------------------------------------------

    @property
    def cooperative(self) -> bool:
        """Incremental rebalances: a cooperative assignor, or the consumer protocol (KIP-848, always incremental)."""
        return str(self.client_config.get("partition.assignment.strategy", "")).startswith("cooperative") \
            or catalog.consumer_protocol(self.client_config)

    def open(self) -> RawConsumer:
        """Build the handle (if there is none) and restore the subscription or manual assignment."""
        if self.consumer is None:
            self.client_config = dict(self.props)
            self.consumer = self.factory(self.client_config)
            self.generation += 1
            self.gate.disarm()  # the short cut is the old handle's poll, or none
            log.debug("consumer built", generation=self.generation,
                      strategy=self.client_config.get("partition.assignment.strategy"))
            self._restore()
        return self.consumer

    def require(self) -> RawConsumer:
        """The live handle; builds it unless the consumer has left its group."""
        if self.consumer is None:
            if self.left:
                from ykafka.errors import ClosedError

                raise ClosedError("the consumer has left its group (consumer.leave=true)")
            return self.open()
        return self.consumer

    @property
    def facade(self) -> Any:
        """The ykafka Consumer this session belongs to (None once it is collected)."""
        return None if self._facade is None else self._facade()

    def close(self, timeout: float | None = None) -> None:
        """Close the handle: librdkafka revokes (our hooks commit) and leaves the group.

        ``timeout``: give up waiting after that many seconds and abandon the handle (its close goes on in a
        daemon thread). A handle whose group state broke (a broker frozen past the session timeout) was seen to
        block in close for 40 s and more, so a SIGTERM never ended the process; the watchdog's rebuild and
        ``Consumer.run``'s shutdown pass a bound."""
        consumer = self.consumer
        self.gate.disarm()
        if consumer is not None:
            try:
                if timeout is None:
                    consumer.close()  # the revoke callback runs in here and still sees the handle
                else:
                    closer = threading.Thread(target=_close_quietly, args=(consumer,), daemon=True,
                                              name="ykafka-consumer-close")
                    closer.start()
                    closer.join(timeout)
                    if closer.is_alive():
                        log.warning("consumer.close_abandoned", timeout_s=timeout, generation=self.generation)
                        # its revoke / lost callbacks may still come, from the closer thread, after a fresh handle
                        # took over (they are ignored then: _current); what it held is gone now
                        self.consumer = None
                        held = [TopicPartition(t, p) for t, p in sorted(self.assigned)]
                        if held and self.hooks is not None:
                            self.hooks.lost(held)
            finally:
                self.consumer = None
                self._reasons.clear()
                self.rewound.clear()
                self.assigned = set()
                self.member_id = None
                self._fetchable = set()  # a new handle's queue holds nothing of this one's
                self.topic_of = {}

    def may_fetch(self, partitions: Iterable[TopicPartition]) -> None:
        """Note partitions the handle is about to be given (before the assign, so :attr:`topic_of` never names
        a run a message of theirs could be in wrongly). Only grows until the handle closes: a revoked
        partition's messages may still be in a batch fetched around the revoke."""
        new = {(tp.topic, tp.partition) for tp in partitions} - self._fetchable
        if not new:
            return
        self._fetchable = fetchable = self._fetchable | new
        self.gate.disarm()  # a new topic may be traced: the drop-in poll looks at its messages until re-armed
        owners: dict[int, set[str]] = {}
        for topic, partition in fetchable:
            owners.setdefault(partition, set()).add(topic)
        self.topic_of = {partition: next(iter(topics)) for partition, topics in owners.items() if len(topics) == 1}

    def fetchable_topics(self) -> set[str]:
        """The topics of every partition the current handle was given (see ``_fetchable``)."""
        return {topic for topic, _ in self._fetchable}

    # -- subscription -----------------------------------------------------------------------------------

    def subscribe(self, topics: Sequence[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None, on_lost: RebalanceCallback | None = None) -> None:
        self.gate.disarm()  # a new topic may be traced (PollGate: the armed poll runs the rebalances)
        self._topics = list(topics)
        self._manual = None
        self._user = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        if self.consumer is not None:
            self._subscribe()

    def resubscribe(self, topics: Sequence[str]) -> None:
        """Change the topic list keeping the user's callbacks (the framework adds retry topics this way)."""
        self.gate.disarm()
        self._topics = list(topics)
        if self.consumer is not None and not self.left:
            self._subscribe()

    @property
    def topics(self) -> list[str]:
        return list(self._topics or [])

    def _subscribe(self) -> None:
        if self._topics is None or self.consumer is None:
            return
        self.consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.rebalancing:  # the user's on_assign makes the group's assignment: not a manual one
            self.may_fetch(partitions)
            self.require().assign(partitions)
            self.user_assigned = True
            return
        self._manual = list(partitions)
        self._topics = None
        self.require()
        self._assign_manual()

    def _assign_manual(self) -> None:
        if self._manual is None or self.consumer is None:
            return
        partitions = self._manual
        self.may_fetch(partitions)
        self.consumer.assign(partitions)
        if self.operator_paused:
            self.pause([(tp.topic, tp.partition) for tp in partitions], OPERATOR)

    def unassign(self) -> None:
        self._manual = None
        self.require().unassign()
        self._reasons.clear()

    def unsubscribe(self) -> None:
        self._topics = None
        self.require().unsubscribe()

    def _restore(self) -> None:
        if self._topics is not None:
            self._subscribe()
        elif self._manual is not None:
            self._assign_manual()

    # -- live changes -----------------------------------------------------------------------------------

    def set_credentials(self, username: str, password: str) -> None:
        """New SASL credentials (a rotation at grant renewal): the current handle authenticates with them at
        its next (re-)authentication (librdkafka's ``set_sasl_credentials``: no rebuild, the group is kept), and
        every later handle is built with them."""
        self.props.update({"sasl.username": username, "sasl.password": password})
        self.client_config.update({"sasl.username": username, "sasl.password": password})
        if self.consumer is not None:
            self.consumer.set_sasl_credentials(username, password)
        log.info("consumer credentials replaced", username=username)

    @property
    def subscribed(self) -> bool:
        """A group subscription is in force (not a manual assignment, not left)."""
        return bool(self._topics) and self._manual is None and not self.left

    def rebuild(self, changes: Mapping[str, Any], removed: Sequence[str] = (),
                close_timeout: float | None = None) -> bool:
        """Apply librdkafka settings that need a new handle; committed positions carry over.

        The new handle is built before the old one closes, so settings librdkafka refuses are rejected
        (returns False) while the old handle keeps running.
        """
        props = {**self.props, **changes}
        for name in removed:
            props.pop(name, None)
        if self.left or self.consumer is None:
            self.props = props  # the next open() uses them
            return True
        try:
            fresh = self.factory(dict(props))
        except Exception as exc:
            log.error("consumer settings refused by librdkafka; previous settings stay", changes=dict(changes),
                      error=str(exc))
            return False
        log.info("rebuilding consumer", changes=dict(changes), removed=list(removed))
        self.close(close_timeout)  # revoke: the framework finishes and commits in-flight work of the old handle
        self.props = props
        self.client_config = dict(props)
        self.consumer = fresh
        self.generation += 1
        self.gate.disarm()
        self._restore()
        return True

    def leave(self) -> None:
        if self.left:
            return
        log.info("leaving consumer group")
        self.close()
        self.left = True

    def rejoin(self) -> None:
        if not self.left:
            return
        log.info("rejoining consumer group")
        self.left = False
        self.open()

    def set_operator_paused(self, paused: bool) -> None:
        self.operator_paused = paused
        if self.consumer is None:
            return
        tps = [(tp.topic, tp.partition) for tp in self.consumer.assignment()]
        if paused:
            self.pause(tps, OPERATOR)
        else:
            self.resume(tps, OPERATOR)
        log.info("consumer paused" if paused else "consumer resumed", partitions=len(tps))

    # -- pause reasons ----------------------------------------------------------------------------------

    def pause(self, tps: Sequence[TP], reason: str) -> None:
        newly = []
        for tp in tps:
            reasons = self._reasons.setdefault(tp, set())
            if not reasons:
                newly.append(TopicPartition(tp[0], tp[1]))
            reasons.add(reason)
        if newly and self.consumer is not None:
            self.consumer.pause(newly)

    def resume(self, tps: Sequence[TP], reason: str) -> None:
        freed = []
        for tp in tps:
            reasons = self._reasons.get(tp)
            if not reasons or reason not in reasons:
                continue
            reasons.discard(reason)
            if not reasons:
                del self._reasons[tp]
                freed.append(TopicPartition(tp[0], tp[1]))
        if freed and self.consumer is not None:
            for part in freed:
                offset = self.rewound.pop((part.topic, part.partition), None)
                if offset is not None:
                    self._seek(part.topic, part.partition, offset)
            self.consumer.resume(freed)

    def rewind(self, tp: TP, offset: int, reason: str) -> None:
        """Pause ``tp`` and move its fetch position back to ``offset`` (re-fetched on resume)."""
        self.pause([tp], reason)
        current = self.rewound.get(tp)
        if current is None or offset < current:
            self.rewound[tp] = offset
            self._seek(tp[0], tp[1], offset)

    def _seek(self, topic: str, partition: int, offset: int) -> None:
        if self.consumer is None:
            return
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except Exception as exc:  # e.g. the partition was just revoked
            log.warning("seek failed", topic=topic, partition=partition, offset=offset, error=str(exc))

    def paused_for(self, tp: TP, reason: str) -> bool:
        return reason in self._reasons.get(tp, ())

    @property
    def pauses(self) -> Mapping[TP, set[str]]:
        """Paused partitions and why (read only; empty when everything fetches)."""
        return self._reasons

    # -- rebalance callbacks ----------------------------------------------------------------------------

    def _current(self, consumer: RawConsumer, which: str, partitions: list[TopicPartition]) -> bool:
        """A rebalance callback of the live handle. One of a handle whose close was abandoned arrives late, from
        the closer thread, and must not touch the state of the handle that replaced it: issue 38's soak saw the
        watchdog's rebuild abandon a close and the fresh handle assigned 25 ms later; a late revoke of the old one
        would drop the new one's pause reasons (a partition librdkafka keeps paused for good: the framework no
        longer knows to resume it) and its trackers."""
        if consumer is self.consumer:
            return True
        log.warning("consumer.stale_rebalance_callback", callback=which, partitions=len(partitions),
                    generation=self.generation)
        return False

    def _on_assign(self, consumer: RawConsumer, partitions: list[TopicPartition]) -> None:
        if not self._current(consumer, "assign", partitions):
            return
        if not self.cooperative:
            self._reasons.clear()
            self.rewound.clear()
        if partitions:
            # librdkafka may keep a partition's pause flag across revoke / re-assign; start from "fetching"
            # (before the user's callback, which may pause them itself)
            try:
                consumer.resume(partitions)
            except Exception as exc:
                log.debug("resume before assign failed", error=str(exc))
        # As confluent-kafka: the user's on_assign runs before the assignment and may make it itself
        # (assign / incremental_assign with its own offsets); when it does not, it is made here.
        self.user_assigned = False
        self.rebalancing = True
        self.may_fetch(partitions)
        try:
            self._call_user("assign", partitions)
        finally:
            self.rebalancing = False
        if not self.user_assigned:
            if self.cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self.assigned = (self.assigned | set(tps)) if self.cooperative else set(tps)
        self.member_id = consumer.memberid()
        if self.operator_paused:
            self.pause(tps, OPERATOR)
        log.info("partitions assigned", partitions=_names(partitions), generation=self.generation)
        if self.hooks is not None:
            self.hooks.assigned(partitions)

    def _on_revoke(self, consumer: RawConsumer, partitions: list[TopicPartition]) -> None:
        if not self._current(consumer, "revoke", partitions):
            return
        log.info("partitions revoked", partitions=_names(partitions), generation=self.generation)
        if self.hooks is not None:
            self.hooks.revoked(partitions)
        for tp in partitions:
            self._reasons.pop((tp.topic, tp.partition), None)
            self.rewound.pop((tp.topic, tp.partition), None)
        self.assigned = self.assigned - {(tp.topic, tp.partition) for tp in partitions}
        self._call_user("revoke", partitions)

    def _on_lost(self, consumer: RawConsumer, partitions: list[TopicPartition]) -> None:
        if not self._current(consumer, "lost", partitions):
            return
        log.warning("partitions lost", partitions=_names(partitions), generation=self.generation)
        if self.hooks is not None:
            self.hooks.lost(partitions)
        for tp in partitions:
            self._reasons.pop((tp.topic, tp.partition), None)
            self.rewound.pop((tp.topic, tp.partition), None)
        self.assigned = self.assigned - {(tp.topic, tp.partition) for tp in partitions}
        if self._user.get("lost") is None:
            self._call_user("revoke", partitions)  # confluent-kafka's behaviour without on_lost
        else:
            self._call_user("lost", partitions)

    def _call_user(self, which: str, partitions: list[TopicPartition]) -> None:
        callback = self._user.get(which)
        if callback is not None:
            facade = self.facade
            callback(facade if facade is not None else self.consumer, partitions)


def _close_quietly(consumer: RawConsumer) -> None:
    try:
        consumer.close()
    except Exception as exc:  # a closed or broken handle: nothing left to release
        log.warning("consumer.close_failed", error=str(exc))


def _names(partitions: list[TopicPartition]) -> list[str]:
    return [f"{tp.topic}[{tp.partition}]" for tp in partitions]
