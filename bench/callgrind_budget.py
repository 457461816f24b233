"""Instructions per message of every call form, ykafka and raw confluent-kafka side by side, against budgets.

Wall-clock ratios on a shared 2-core machine move by ±10-20 % (docs/benchmarks.md); callgrind's instruction
counts do not move with the load. Three processes run under ``valgrind --tool=callgrind --separate-threads=yes
--instr-atstart=no`` (raw, ykafka, ykafka ``Consumer.run``), instrumenting only each form's measured span
(callgrind's client requests, reached through a small C helper built with the system compiler): start-up, imports
and warm-ups run uninstrumented and count nowhere, so one span per form suffices.

Every form is measured on the thread that runs it: counters zeroed and instrumentation on after its warm-up, that
thread's counters dumped (``DUMP_STATS_AT``) and instrumentation off after its messages. A producing thread's
instructions include serving the delivery reports (``poll`` / ``flush`` run the callbacks on it); librdkafka's
own threads work outside the GIL. ``Consumer.run`` runs a no-op handler inline on its fetch thread (the path a
native run takes: see consume_ykafka), so that thread holds the whole dispatch; ykafka's background threads,
which tick by wall time (~50x longer under valgrind), are left out as the raw side's librdkafka threads are.

Forms (the Producer's and Consumer's defaults: disaster recovery, metrics on; local mode):

* producer ``keyword`` ``produce(topic, value, key=None, on_delivery=cb)``, ``positional``
  ``produce(topic, value, None, -1, cb, None, 0, None)``, ``keyed1k`` / ``keyed100k`` (keyword, keys ``i % K``),
  each followed by ``poll(0)``, ``flush`` at the end (bench/_loop.py's loop): the producing thread's
  instructions (librdkafka's own threads work outside the GIL);
* consumer ``run`` (``Consumer.run`` with a no-op handler vs a raw ``consume(500)`` loop with the fetch setting
  ``Consumer.run`` applies; both spans start after a pause that lets librdkafka prefetch the rest, so every
  measured batch is a full one) and ``poll`` (a ``Consumer.poll()`` loop vs raw ``poll()``).

Each figure is the form's instructions divided by its messages. ``--check`` compares the ykafka figures with
``bench/callgrind_budget.json`` and lists the forms more than ``tolerance`` (5 %) over (``over_budget``);
``--record`` writes the measured figures as the new budgets. tests/test_callgrind_budget.py runs it.

    python bench/callgrind_budget.py [--quick] [--broker tansu|kafka] [--check] [--record] [--forms keyword,run]
                                     [--empty-wrapper [calls|reports|compiled]]

``--empty-wrapper`` puts the thinnest pure-Python drop-in (:class:`EmptyProducer`, :class:`EmptyConsumer`: one
Python frame a call, forwarding) in ykafka's place: what no pure-Python wrapper can go under. ``compiled``: the
thinnest compiled one (``bench/_cfloor.c``, built here with the interpreter's headers: one C call a send and one
a report), what a C-accelerated step could at best reach. For ``run`` it is the least an exact handler loop does
(:func:`consume_run_floor`: the error and partition scans, the partition runs, an offset stored a run).

Last line: RESULT {"forms": {form: {"ykafka": Ir/msg, "raw": Ir/msg, "ratio": raw/ykafka}}, "over_budget": [...],
"broker": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUDGETS = ROOT / "bench" / "callgrind_budget.json"
PRODUCER_FORMS = ("keyword", "positional", "keyed1k", "keyed100k")
CONSUMER_FORMS = ("run", "poll")
FORMS = PRODUCER_FORMS + CONSUMER_FORMS
#: measured on request (``--forms trace1,trace100``), not budgeted: the keyword form with the topic traced, 1 % and
#: 100 % sampled (the producing thread only: the trace sink's batching and sending run on its own thread)
TRACE_FORMS: dict[str, dict[str, Any]] = {"trace1": {"trace.enabled": True, "trace.sample.rate": 0.01},
                                          "trace100": {"trace.enabled": True, "trace.sample.rate": 1.0}}
SENDING_FORMS = PRODUCER_FORMS + tuple(TRACE_FORMS)
SPANS = 2  # measured spans per producer form
WARM_PRODUCE = 1000  # sends before a producer form's span: the topic's state, connections, the first batches
KEYS = {"keyed1k": 1000, "keyed100k": 100_000}
#: what ``Consumer.run`` sets unless the application does (ykafka/consumer/engine.py): the raw peer gets it too
RUN_FETCH = {"fetch.queue.backoff.ms": 20}
RAW_PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
                "compression.type": "none", "partitioner": "murmur2_random"}
#: the cluster health probe's metadata request times out under valgrind's ~50x slow-down, which would take the
#: disaster-recovery engine off its healthy direct path (the path being measured): it is told to be patient
UNDER_VALGRIND = {"health.down.failures": 1000, "health.down.after.ms": 3_600_000,
                  # the engine's clients' message.timeout.ms: since they are idempotent (acks=all) their first
                  # sends wait for a producer id, which under valgrind at load 40 took longer than the default
                  # 10 s, so the messages timed out and the cluster was marked down (208 of 1,000 delivered)
                  "spill.after.ms": 600_000}
#: the ``run`` form's pause before its span (uninstrumented, both sides): librdkafka prefetches the topic's rest,
#: so the measured batches do not hang on how fast the broker answers under valgrind and the load
SETTLE_S = 3.0
#: both sides: under valgrind on loaded cores (load average 25 seen) librdkafka's 30 s request timeout expired
#: with the broker's answer already there, unread, and the run failed
PATIENT = {"request.timeout.ms": 300_000, "socket.timeout.ms": 300_000, "message.timeout.ms": 600_000}
HELPER_C = """
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); CALLGRIND_STOP_INSTRUMENTATION; }
"""


# --- in the process under callgrind ---------------------------------------------------------------------------

class Counters:
    """The client requests, through the helper library (no-ops without one: a plain run)."""

    def __init__(self, lib: str | None) -> None:
        import ctypes

        self._lib = ctypes.CDLL(lib) if lib else None

    def zero(self) -> None:
        """Zero this thread's counters and instrument from here (every thread)."""
        if self._lib is not None:
            self._lib.cg_start()

    def dump(self, name: str, messages: int) -> None:
        """Dump this thread's counters as ``name:messages`` and stop instrumenting."""
        if self._lib is not None:
            self._lib.cg_dump(f"{name}:{messages}".encode())

    def dump_and_exit(self, name: str, messages: int) -> None:
        """:meth:`dump`, then end the process at once when measuring (its consumer's close under valgrind would
        only cost the run seconds); a plain run returns."""
        if self._lib is not None:
            self.dump(name, messages)
            os._exit(0)


def _noop(_msg: Any) -> None:
    return None


class EmptyProducer:
    """``--empty-wrapper``: the thinnest pure-Python drop-in of a producer, the floor of any wrapper that sees each
    send: ``produce`` one Python frame forwarding its arguments positionally, ``poll`` / ``flush`` librdkafka's own
    (as ykafka's one-client ``poll`` is). ``--empty-wrapper reports`` adds what any wrapper that must see each
    delivery report (disaster recovery: a failed message is re-routed) cannot go under either: one Python frame a
    report, a closure forwarding a success to the user's callback (as ykafka's ``shared_report``)."""

    def __init__(self, raw: Any, reports: bool = False) -> None:
        self._raw = raw
        self.poll, self.flush = raw.poll, raw.flush
        self._reports = reports
        self._bound: dict[Any, Any] = {}

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1, on_delivery: Any = None,
                callback: Any = None, timestamp: int = 0, headers: Any = None) -> None:
        on_delivery = on_delivery or callback
        if self._reports:
            on_delivery = self._bound.get(on_delivery) or self._bound.setdefault(on_delivery,
                                                                                 _forwarder(on_delivery))
        self._raw.produce(topic, value, key, partition, on_delivery, None, timestamp, headers)


def compiled_producer(raw: Any) -> Any:
    """``--empty-wrapper compiled``: :class:`EmptyProducer`'s place taken by ``bench/_cfloor.c``'s ``Fast`` (a C
    ``produce`` that swaps the callback for a C forwarder), loaded from ``YKAFKA_CFLOOR_DIR`` (:func:`build_cfloor`)."""
    sys.path.insert(0, os.environ["YKAFKA_CFLOOR_DIR"])
    from _cfloor import Fast  # type: ignore[import-not-found]

    wrapper = EmptyProducer(raw)
    wrapper.produce = Fast(raw.produce)  # type: ignore[method-assign]
    return wrapper


def build_cfloor(workdir: Path) -> Path:
    """Compile ``bench/_cfloor.c`` against this interpreter (gcc and its headers), into ``workdir``."""
    import sysconfig

    cc = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if cc is None or not (Path(include) / "Python.h").exists():
        raise SystemExit("callgrind_budget: --empty-wrapper compiled needs a C compiler and Python.h")
    out = workdir / f"_cfloor{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(ROOT / "bench" / "_cfloor.c")],
                   check=True)
    return workdir


def _forwarder(user: Any) -> Any:
    """A delivery report seen by the wrapper, one closure per user callback (as ykafka's ``shared_report``):
    failures would be handled here; a success goes to the user."""
    def forward(err: Any, msg: Any) -> None:
        if err is None:
            user(None, msg)
            return
        user(err, msg)
    return forward


class EmptyConsumer:
    """``--empty-wrapper``: the thinnest pure-Python drop-in ``poll`` (an instance's closure, one Python frame
    forwarding to librdkafka's, as ykafka's armed drop-in poll): the floor of any wrapper that sees each call."""

    def __init__(self, raw: Any) -> None:
        raw_poll = raw.poll
        self.subscribe, self.close = raw.subscribe, raw.close

        def poll(timeout: float | None = None) -> Any:
            return raw_poll(-1 if timeout is None else timeout)

        self.poll = poll


def produce_form(make: Callable[[], Any], form: str, side: str, messages: int, cg: Counters) -> None:
    from bench._loop import produce_loop

    producer = make()
    topic = f"cg-budget-{form}-{side}-{uuid.uuid4().hex[:6]}"
    keys = KEYS.get(form, 0)
    value = b"x" * 100
    key_list: list[bytes | None] = [str(i).encode() for i in range(keys)] if keys else [None]
    produce_loop(producer, topic, WARM_PRODUCE, value, key_list=key_list, positional=form == "positional")
    for span in range(SPANS):  # the least of them: a span can only gain from thread switches, never lose
        cg.zero()
        produce_loop(producer, topic, messages, value, key_list=key_list, positional=form == "positional")
        cg.dump(f"{form}/{side}#{span}", messages)
    if hasattr(producer, "close"):
        producer.close()


def consumer_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": f"cg-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def consume_raw(bootstrap: str, topic: str, form: str, warm: int, messages: int, cg: Counters) -> None:
    from confluent_kafka import Consumer as RawConsumer

    consumer = RawConsumer({**consumer_conf(bootstrap), **(RUN_FETCH if form == "run" else {})})
    consumer.subscribe([topic])
    noop, got, target, zeroed = _noop, 0, warm + messages, False
    try:
        if form == "run":
            while got < target:
                if got >= warm and not zeroed:
                    time.sleep(SETTLE_S)  # as Consumer.run's span: the rest prefetched, full batches
                    cg.zero()
                    zeroed, start = True, got
                for msg in consumer.consume(500, 1.0):
                    if msg.error() is None:
                        noop(msg)
                        got += 1
        else:
            poll = consumer.poll
            while got < target:
                if got == warm and not zeroed:
                    cg.zero()
                    zeroed, start = True, got
                polled = poll(1.0)
                if polled is not None and polled.error() is None:
                    noop(polled)
                    got += 1
        cg.dump(f"{form}/raw", got - start)
    finally:
        consumer.close()


def consume_empty(bootstrap: str, topic: str, warm: int, messages: int, cg: Counters) -> None:
    """The ``poll`` form through :class:`EmptyConsumer` (``--empty-wrapper``), counted as ykafka's."""
    from confluent_kafka import Consumer as RawConsumer

    consumer = EmptyConsumer(RawConsumer(consumer_conf(bootstrap)))
    consumer.subscribe([topic])
    poll, noop, got, target = consumer.poll, _noop, 0, warm + messages
    try:
        while got < target:
            if got == warm:
                cg.zero()
            msg = poll(1.0)
            if msg is not None and msg.error() is None:
                noop(msg)
                got += 1
        cg.dump("poll/ykafka", messages)
    finally:
        consumer.close()


def consume_run_floor(bootstrap: str, topic: str, warm: int, messages: int, cg: Counters,
                      handler: Callable[[Any], None] = _noop) -> dict[int, int]:
    """The ``run`` form's floor (``--empty-wrapper``), counted as ykafka's: the least a handler loop must do to
    commit each partition exactly (at least once) and keep its order: take the errors out without running the
    handler on them (one C call a message, ``map``), learn each message's partition (one more: a batch may hold
    several, and one partition's failure must not commit another's), cut the batch into partition runs, call the
    handler on each message of a run, then store the run's last offset (one call a run). No workers, no metrics,
    no retries, no rebalance bookkeeping. Returns the offsets it committed at the end, by partition
    (tests/test_callgrind_budget.py holds it to being exact)."""
    from itertools import compress, islice, pairwise
    from operator import ne

    from confluent_kafka import Consumer as RawConsumer
    from confluent_kafka import Message

    error, partition = Message.error, Message.partition
    consumer = RawConsumer({**consumer_conf(bootstrap), **RUN_FETCH, "enable.auto.offset.store": False})
    consumer.subscribe([topic])
    noop, got, target, zeroed, start = handler, 0, warm + messages, False, 0
    try:
        while got < target:
            if got >= warm and not zeroed:
                time.sleep(SETTLE_S)
                cg.zero()
                zeroed, start = True, got
            msgs = consumer.consume(500, 1.0)
            if any(map(error, msgs)):
                msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            parts = list(map(partition, msgs))
            n = len(parts)
            if parts.count(parts[0]) == n:
                runs: Any = (msgs,)
            else:
                cuts = [0, *compress(range(1, n), map(ne, parts, islice(parts, 1, None))), n]
                runs = (msgs[a:b] for a, b in pairwise(cuts))
            for run in runs:
                for msg in run:
                    noop(msg)
                consumer.store_offsets(run[-1])
            got += n
        cg.dump("run/ykafka", got - start)
        consumer.commit(asynchronous=False)
        return {tp.partition: tp.offset for tp in consumer.committed(consumer.assignment(), timeout=10)}
    finally:
        consumer.close()


def consume_ykafka(bootstrap: str, topic: str, form: str, warm: int, messages: int, cg: Counters) -> None:
    from ykafka.consumer import Consumer

    consumer = Consumer({**consumer_conf(bootstrap), "ykafka.cache.dir": tempfile.mkdtemp(prefix="ykafka-cg-"),
                         "ykafka.consumer.retry.topics": False, "ykafka.consumer.revoke.timeout.ms": 2000})
    try:
        if form == "poll":
            consumer.subscribe([topic])
            poll, noop, got, target = consumer.poll, _noop, 0, warm + messages
            while got < target:
                if got == warm:
                    cg.zero()
                msg = poll(1.0)
                if msg is not None and msg.error() is None:
                    noop(msg)
                    got += 1
            cg.dump("poll/ykafka", messages)
            return
        # Consumer.run chooses its path by the handler's wall time a message (a moving average): under
        # FAST_HANDLER_S it runs on the fetch thread, not the worker pool; under SPARSE_TIMING_BELOW_S one message
        # in 256 is timed, not every one. Natively the no-op is far under both (~0.1 µs); under valgrind's
        # 40-100x slow-down (more on loaded cores) it measured anywhere from under to over them, and the path
        # with it: 7,100-21,800 instructions a message, most of the top in the workers timing every message.
        # The thresholds are lifted so the measured path is the native no-op's, whatever the slow-down.
        from ykafka.consumer import engine as engine_module
        from ykafka.consumer import observe, ordering

        ordering.FAST_HANDLER_S = engine_module.FAST_HANDLER_S = 3600.0
        observe.SPARSE_TIMING_BELOW_S = observe.SAMPLED_TIMING_BELOW_S = 3600.0
        # The span runs from the end of one batch's dispatch to the end of another's on the fetch thread, as the raw
        # loop's runs between its consume calls: once ``warm`` messages were handled the loop pauses (letting
        # librdkafka prefetch the rest, so both sides' batches are full ones) and zeroes the counters; the batch
        # that reaches ``messages`` more ends the process. Sampling engine.processed from another thread instead
        # ended the span anywhere from 1,000 to 6,000 messages in (its 50 ms sleeps are seconds under valgrind), the
        # tail idling on an empty topic. The wrapper is one Python call a batch (~500 messages); Consumer.run calls
        # the raw loop's very no-op.
        dispatch, span = engine_module.Engine._dispatch, {"start": -1}

        def measured_dispatch(engine: Any, msgs: list[Any]) -> None:
            dispatch(engine, msgs)
            if span["start"] < 0:
                if engine.processed >= warm:
                    time.sleep(SETTLE_S)
                    cg.zero()
                    span["start"] = engine.processed
            elif engine.processed - span["start"] >= messages:
                cg.dump_and_exit("run/ykafka", engine.processed - span["start"])
                engine.stop()  # a plain run (no helper) goes on to close the consumer

        engine_module.Engine._dispatch = measured_dispatch  # type: ignore[method-assign]
        consumer.run(_noop, [topic])
        if span["start"] < 0:
            raise RuntimeError("Consumer.run ended before its measured span")
    finally:
        consumer.close()


def child(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer as RawProducer

    from ykafka import Producer
    from ykafka.logs import configure

    configure("warning")
    cg = Counters(args.helper)
    side = args.side
    extra = dict(json.loads(args.ykafka_conf)) if args.ykafka_conf else {}
    for form in args.forms:
        print(f"{time.process_time():.1f}s CPU: {form}/{side}", flush=True)
        if args.empty_wrapper and side == "ykafka":  # the floor of a pure-Python wrapper, in ykafka's place
            if form in SENDING_FORMS and args.empty_wrapper == "compiled":
                produce_form(lambda: compiled_producer(RawProducer({"bootstrap.servers": args.bootstrap,
                                                                    **RAW_PRODUCER, **PATIENT})),
                             form, side, args.messages, cg)
            elif form in SENDING_FORMS:
                produce_form(lambda: EmptyProducer(RawProducer({"bootstrap.servers": args.bootstrap, **RAW_PRODUCER,
                                                                **PATIENT}), reports=args.empty_wrapper == "reports"),
                             form, side, args.messages, cg)
            elif form == "poll":
                consume_empty(args.bootstrap, args.topic, args.warm, args.consume_messages, cg)
            elif form == "run":
                consume_run_floor(args.bootstrap, args.topic, args.warm, args.consume_messages, cg)
            else:
                raise SystemExit("--empty-wrapper measures the producer forms, poll and run")
        elif form in SENDING_FORMS and side == "raw":
            produce_form(lambda: RawProducer({"bootstrap.servers": args.bootstrap, **RAW_PRODUCER, **PATIENT}),
                         form, side, args.messages, cg)
        elif form in SENDING_FORMS:
            traced = TRACE_FORMS.get(form, {})
            produce_form(lambda: Producer({"bootstrap.servers": args.bootstrap, **UNDER_VALGRIND, **PATIENT, **extra,
                                           **traced,  # noqa: B023 (called at once, in this iteration)
                                           "ykafka.cache.dir": tempfile.mkdtemp(prefix="ykafka-cg-")}),
                         form, side, args.messages, cg)
        elif side == "raw":
            consume_raw(args.bootstrap, args.topic, form, args.warm, args.consume_messages, cg)
        else:
            consume_ykafka(args.bootstrap, args.topic, form, args.warm, args.consume_messages, cg)


# --- the driver -------------------------------------------------------------------------------------------------

def build_helper(workdir: Path) -> str:
    """The client-request helper as a shared library (needs a C compiler and valgrind's callgrind.h)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not Path("/usr/include/valgrind/callgrind.h").exists():
        raise SystemExit("callgrind_budget: needs a C compiler and valgrind's headers (/usr/include/valgrind)")
    src, lib = workdir / "cg.c", workdir / "libcg.so"
    src.write_text(HELPER_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    return str(lib)


#: confluent-kafka's C trampolines of librdkafka callbacks that come by wall time, not per message: ``stats_cb``
#: (ykafka's metrics ask for a statistics document every interval; the callback parses it, ~1-5 M instructions)
PERIODIC_CALLBACKS = ("stats_cb",)


def periodic(path: Path) -> int:
    """Instructions a span spent inside :data:`PERIODIC_CALLBACKS` (inclusive; 0 when none came).

    They arrive by wall time (every 10 s), so their share of a span's instructions is the span's wall time over
    the interval: natively ~1 in a million messages, under valgrind's 40-100x slow-down on loaded cores one or
    several in a 1,000-message span (+1,300 to +5,400 Ir a message: the ``run`` span's 5,519 / 5,555 and the
    ``poll`` span's 12,173 / 14,046 at load 27-31). Counted apart, so the figure is the message's own cost."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
                         capture_output=True, text=True, check=True).stdout
    total = 0
    for name in PERIODIC_CALLBACKS:
        for line in out.splitlines():
            found = re.match(r"^\s*([\d,]+)\s.*:" + name + r"\s", line)
            if found:
                total += int(found.group(1).replace(",", ""))
    return total


def counted(outdir: Path) -> dict[str, tuple[int, int, int]]:
    """(instructions, messages, periodic instructions) of each span dumped in ``outdir``'s process (the thread
    that ran it; producer forms: the least per message of the form's spans). ``instructions`` leaves out the
    periodic callbacks' (:func:`periodic`), which are given apart."""
    out: dict[str, tuple[int, int, int]] = {}
    for path in outdir.glob("cg.*"):
        text = path.read_text(errors="replace")
        # the costs listed ("totals"), not the header's "summary": after a zeroing a span's summary can wrap below
        # zero (the raw ``run`` span's read 18,446,744,073,699,261,074; its listed totals 3,793,061)
        total = re.search(r"^totals:\s+(\d+)", text, re.M)
        trigger = re.search(r"^desc: Trigger: Client Request: (\S+):(\d+)$", text, re.M)
        if total is None or trigger is None:
            continue
        extra = periodic(path)
        name, span = trigger.group(1).split("#")[0], (int(total.group(1)) - extra, int(trigger.group(2)), extra)
        if name not in out or span[0] / span[1] < out[name][0] / out[name][1]:
            out[name] = span
    return out


def measure(args: argparse.Namespace, helper: str, bootstrap: str, workdir: Path, side: str,
            forms: list[str]) -> subprocess.Popen[bytes]:
    """Start one process measuring ``forms`` on ``side`` under callgrind (its files in ``workdir/<side>``)."""
    outdir = workdir / f"{side}-{forms[0]}"
    outdir.mkdir()
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--instr-atstart=no", "--dump-line=no",
           f"--callgrind-out-file={outdir}/cg.%p", sys.executable, str(Path(__file__).resolve()), "--child",
           "--side", side, "--helper", helper, "--bootstrap", bootstrap, "--forms", ",".join(forms),
           "--messages", str(args.messages), "--consume-messages", str(args.consume_messages),
           "--warm", str(args.warm), "--topic", args.topic, *(["--ykafka-conf", args.ykafka_conf]
                                                               if args.ykafka_conf else []),
           *(["--empty-wrapper", args.empty_wrapper] if args.empty_wrapper else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(outdir / "stdout", "wb") as out, open(outdir / "stderr", "wb") as err:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err)


def _wait(proc: subprocess.Popen[bytes], outdir: Path) -> None:
    if proc.wait(timeout=900) != 0:
        sys.stderr.write((outdir / "stdout").read_text()[-2000:] + (outdir / "stderr").read_text()[-4000:])
        raise SystemExit(f"callgrind_budget: the measured run in {outdir.name} failed ({proc.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--messages", type=int, default=20_000, help="producer messages measured per form")
    parser.add_argument("--consume-messages", type=int, default=20_000)
    parser.add_argument("--warm", type=int, default=3000, help="consumed before the counters are zeroed")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 messages a form after a warm-up (the suite's size: instructions per message "
                             "agree with 3,000's within 0.3 %%, at half the run time)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu")
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--check", action="store_true", help="compare with bench/callgrind_budget.json")
    parser.add_argument("--record", action="store_true", help="write the figures as the new budgets")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--topic", default=f"cg-budget-consume-{uuid.uuid4().hex[:8]}", help=argparse.SUPPRESS)
    parser.add_argument("--ykafka-conf", default=None,
                        help="JSON object of settings added to the measured ykafka Producer's (experiments)")
    parser.add_argument("--empty-wrapper", nargs="?", const="calls", default=None,
                        choices=["calls", "reports", "compiled"],
                        help="measure the thinnest pure-Python wrapper (one frame a call, forwarding) in ykafka's "
                             "place: the floor of any pure-Python drop-in (docs/benchmarks.md, Call forms); "
                             "'reports': and one frame a delivery report (the floor with disaster recovery); "
                             "'compiled': one C call a send and one a report (bench/_cfloor.c)")
    parser.add_argument("--side", choices=["raw", "ykafka"], default="ykafka", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.consume_messages, args.warm = 1000, 1000, 500
    args.forms = [f for f in args.forms.split(",") if f]
    unknown = set(args.forms) - set(FORMS) - set(TRACE_FORMS)
    if unknown:
        parser.error(f"unknown forms {sorted(unknown)}; known: {', '.join(FORMS + tuple(TRACE_FORMS))}")
    if args.record and set(args.forms) & set(TRACE_FORMS):
        parser.error("the trace forms are not budgeted: no --record")
    if args.empty_wrapper and (args.check or args.record):
        parser.error("--empty-wrapper measures a stand-in, not ykafka: no --check / --record")
    if args.child:
        child(args)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("callgrind_budget: valgrind is not installed")
    from ykafka.logs import configure

    configure("warning")
    workdir = Path(tempfile.mkdtemp(prefix="ykafka-cg-budget-"))
    if args.empty_wrapper == "compiled":  # the children load it from here
        os.environ["YKAFKA_CFLOOR_DIR"] = str(build_cfloor(workdir))
    broker = None
    try:
        helper = build_helper(workdir)
        bootstrap = args.bootstrap
        if bootstrap is None:
            from tests.support import Broker

            broker = Broker("cg-budget", workdir / "broker", broker=args.broker).start()
            bootstrap = broker.bootstrap
        if any(form in CONSUMER_FORMS for form in args.forms):
            from bench._broker import fill

            fill(bootstrap, args.topic, 2 * (args.warm + args.consume_messages) + 4000, partitions=4)
        started = time.monotonic()
        # three processes (raw; ykafka; ykafka's Consumer.run, which ends its process), two at a time
        batches: list[tuple[str, list[str]]] = [("raw", args.forms)]
        single = [f for f in args.forms if f != "run"]
        if single:
            batches.append(("ykafka", single))
        if "run" in args.forms:
            batches.append(("ykafka", ["run"]))
        running: list[tuple[subprocess.Popen[bytes], Path]] = []
        for side, forms_ in batches:
            if len(running) == 2:
                _wait(*running.pop(0))
            running.append((measure(args, helper, bootstrap, workdir, side, forms_), workdir / f"{side}-{forms_[0]}"))
        for proc, outdir in running:
            _wait(proc, outdir)
        measured: dict[str, tuple[int, int, int]] = {}
        for outdir in workdir.iterdir():
            if outdir.is_dir() and (outdir / "stdout").exists():
                measured.update(counted(outdir))
        missing = [f"{f}/{side}" for f in args.forms for side in ("raw", "ykafka") if f"{f}/{side}" not in measured]
        if missing:
            raise SystemExit(f"callgrind_budget: no counts for {missing} (does libpython keep its symbols?)")
        forms: dict[str, dict[str, Any]] = {}
        for form in args.forms:
            (yk, yk_n, yk_p), (raw, raw_n, raw_p) = measured[f"{form}/ykafka"], measured[f"{form}/raw"]
            forms[form] = {"ykafka": round(yk / yk_n), "raw": round(raw / raw_n),
                           "ratio": round(raw / raw_n * yk_n / yk, 3),
                           "periodic": {"ykafka": round(yk_p / yk_n), "raw": round(raw_p / raw_n)}}
        for form, fig in forms.items():
            print(f"{form:<11} ykafka {fig['ykafka']:>8,.0f} Ir/msg   raw {fig['raw']:>8,.0f}   raw/ykafka "
                  f"{fig['ratio']:.3f}   (left out, periodic callbacks: ykafka {fig['periodic']['ykafka']:,} "
                  f"raw {fig['periodic']['raw']:,})", flush=True)
        over: list[str] = []
        if args.check or args.record:
            budgets: dict[str, Any] = {"tolerance": 0.05, "forms": {}}
            if BUDGETS.exists():
                budgets = json.loads(BUDGETS.read_text())
            if args.record:
                for form, fig in forms.items():
                    budgets["forms"][form] = {**budgets["forms"].get(form, {}),
                                              "ykafka": fig["ykafka"], "raw": fig["raw"], "broker": args.broker,
                                              "messages": args.messages if form in PRODUCER_FORMS
                                              else args.consume_messages}
                BUDGETS.write_text(json.dumps(budgets, indent=2, sort_keys=True) + "\n")
            for form, fig in forms.items():
                budget = budgets["forms"].get(form)
                if budget is not None and budget.get("budgeted", True) \
                        and fig["ykafka"] > budget["ykafka"] * (1 + budgets["tolerance"]):
                    over.append(f"{form}: {fig['ykafka']:,.0f} Ir/msg > budget {budget['ykafka']:,.0f} "
                                f"+{budgets['tolerance']:.0%}")
        result = {"forms": forms, "over_budget": over, "broker": args.broker, "messages": args.messages,
                  "consume_messages": args.consume_messages, "seconds": round(time.monotonic() - started, 1)}
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        if broker is not None:
            broker.kill()
        if not os.environ.get("YKAFKA_CG_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"callgrind files kept in {workdir}", flush=True)


if __name__ == "__main__":
    main()
