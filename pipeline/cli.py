"""The pipeline's commands (its own click groups), attached to the ``ykafka`` console script by ``ykafka.cli``.

* ``ykafka trace KEY``             — a message's lifecycle from the trace store (pyarrow, no Spark start-up);
* ``ykafka pipeline run|inventory|aggregates`` — the PySpark jobs;
* ``ykafka pipeline cluster up|down|status`` — a Spark standalone cluster on this host to run them on;
* ``ykafka admin groups list|cleanup`` — idle consumer groups, deleted with ``--apply``.

Store and cluster default from the environment: ``YKAFKA_PIPELINE_STORE`` (else ``.ykafka/pipeline``),
``YKAFKA_PIPELINE_BOOTSTRAP`` (else ``YKAFKA_BOOTSTRAP_DC_A`` that ``ykafka dev up`` writes).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ykafka.tables import show_table

console = Console()

DEFAULT_STORE = ".ykafka/pipeline"
_KIND_STYLE = {"produced": "cyan", "acked": "green", "failed": "bold red", "spilled": "yellow",
               "replayed": "yellow", "consumed": "blue", "processed": "bold green", "retried": "magenta",
               "dead-lettered": "bold red"}


def _console() -> Console:
    """The terminal's width on a terminal; wide when piped, so timelines are not cut."""
    found = Console()
    return found if found.is_terminal else Console(width=200)


def _store_default() -> str:
    return os.environ.get("YKAFKA_PIPELINE_STORE", DEFAULT_STORE)


def _bootstrap(value: str | None) -> str:
    found = value or os.environ.get("YKAFKA_PIPELINE_BOOTSTRAP") or os.environ.get("YKAFKA_BOOTSTRAP_DC_A")
    if not found:
        raise click.UsageError("no cluster: pass --bootstrap or set YKAFKA_PIPELINE_BOOTSTRAP")
    return found


def _duration(text: str) -> dt.timedelta:
    from .store import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# --- ykafka trace -------------------------------------------------------------------------------------

@click.command("trace")
@click.argument("key", required=False)
@click.option("--id", "msg_id", default=None, help="look up by message id (ykafka-id) instead of key")
@click.option("--topic", default=None, help="only this topic (prunes the store to its directories)")
@click.option("--since", default="1h", show_default=True, help="how far back, e.g. 30m, 6h, 2d")
@click.option("--until", default=None, help="end of the range, ISO time (default now)")
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE,
              help="pipeline store (env YKAFKA_PIPELINE_STORE)")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table")
def trace(key: str | None, msg_id: str | None, topic: str | None, since: str, until: str | None, store: str,
          as_json: bool) -> None:
    """Show what happened to the message(s) with KEY: every lifecycle step, in order."""
    from .store import Store
    from .trace_store import lookup, timelines

    if not key and not msg_id:
        raise click.UsageError("give a KEY or --id")
    end = dt.datetime.fromisoformat(until).replace(tzinfo=dt.UTC) if until else None
    rows = lookup(Store(store), key, msg_id=msg_id, topic=topic, since=_duration(since), until=end)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    if not rows:
        console.print(f"no trace events for {'key ' + repr(key) if key else 'id ' + repr(msg_id)} "
                      f"in the last {since}" + (f" on {topic}" if topic else ""))
        sys.exit(1)
    out = _console()
    for mid, steps in timelines(rows).items():
        first = steps[0]["ts"] or 0
        table = Table(title=f"message {mid}  key={steps[0].get('key')!r}  topic={steps[0].get('topic')}",
                      title_justify="left")
        for column in ("time (UTC)", "+ms", "step", "where", "group", "client", "latency ms", "attempt", "detail"):
            table.add_column(column)
        for step in steps:
            kind = step.get("kind") or ""
            where = "" if step.get("partition") is None else f"p{step['partition']}"
            if step.get("offset") is not None:
                where += f"@{step['offset']}"
            if step.get("cluster"):
                where = f"{step['cluster']} {where}".strip()
            detail = " ".join(x for x in (step.get("error"), step.get("detail")) if x)
            table.add_row(_when(step.get("ts")), str((step.get("ts") or 0) - first),
                          f"[{_KIND_STYLE.get(kind, 'white')}]{kind}[/]", where, step.get("group") or "",
                          f"{step.get('client_id') or ''} {step.get('ip') or ''}".strip(),
                          "" if step.get("latency_ms") is None else f"{step['latency_ms']:.2f}",
                          "" if step.get("attempt") is None else str(step["attempt"]), detail)
        out.print(table)


# --- ykafka pipeline ------------------------------------------------------------------------------

@click.group("pipeline")
def pipeline() -> None:
    """The PySpark pipeline over __ykafka_trace / __ykafka_metrics / __ykafka_clients."""


@pipeline.command("run")
@click.option("--once", is_flag=True, help="process what is available, evaluate alerts, build the inventory, exit")
@click.option("--master", default=None, help="Spark master (default local[*]); e.g. local[2], spark://host:7077")
@click.option("--bootstrap", default=None, help="cluster holding the observability topics")
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE)
@click.option("--alerts", "alerts_path", default=None, help="alert rules (default configs/alerts.yaml)")
@click.option("--duration", type=float, default=None, help="continuous mode: stop after this many seconds")
@click.option("--trigger-s", type=float, default=2.0, show_default=True, help="micro-batch period")
@click.option("--sample-interval-s", type=float, default=10.0, show_default=True, help="lag sampling period")
@click.option("--no-sampler", is_flag=True, help="do not sample group offsets from the broker")
@click.option("--ephemeral", multiple=True, help="group patterns deleted when their last client closes")
@click.option("--conf", "spark_conf", multiple=True, help="extra Spark setting key=value")
@click.option("--max-offsets-per-trigger", type=int, default=None,
              help="cap of Kafka messages per micro-batch (each holds up to 1000 events)")
@click.option("--source", type=click.Choice(["python", "jvm"]), default="python", show_default=True,
              help="python: the ykafka-kafka source (no jar); jvm: Spark's kafka source (its jar on the classpath, "
                   "and pandas: its records are decoded with mapInArrow)")
def pipeline_run(once: bool, master: str | None, bootstrap: str | None, store: str, alerts_path: str | None,
                 duration: float | None, trigger_s: float, sample_interval_s: float, no_sampler: bool,
                 ephemeral: Sequence[str], spark_conf: Sequence[str], max_offsets_per_trigger: int | None,
                 source: str) -> None:
    """Run the trace-store, aggregate, alert, audit, inventory and group-lifecycle jobs."""
    from rich.live import Live

    from .runner import Pipeline, PipelineConfig

    conf = dict(item.split("=", 1) for item in spark_conf if "=" in item)
    cfg = PipelineConfig(bootstrap=_bootstrap(bootstrap), store=store, master=master, alerts_path=alerts_path,
                         trigger_s=trigger_s, sample_interval_s=sample_interval_s, sample_lag=not no_sampler,
                         ephemeral_patterns=tuple(ephemeral), spark_conf=conf, source=source,
                         max_offsets_per_trigger=max_offsets_per_trigger)
    progress: dict[str, dict[str, Any]] = {}

    def render() -> Table:
        table = Table("job", "batches", "rows", "last batch", "last rows", "last s", title="ykafka pipeline")
        for name, stats in pl.stats.items():
            last = progress.get(name, {})
            table.add_row(name, str(stats.batches), str(stats.rows), str(last.get("batch", "")),
                          str(last.get("rows", "")), str(last.get("seconds", "")))
        table.add_row("alerts", "", str(len(pl.alerts.sent)), "", "", "")
        return table

    with console.status("starting Spark ..."):
        pl = Pipeline(cfg)
    with Live(render(), console=console, refresh_per_second=2, transient=False) as live:
        def on_progress(name: str, info: dict[str, Any]) -> None:
            progress[name] = info
            live.update(render())

        pl.progress = on_progress
        try:
            if once:
                result = pl.run_once()
            else:
                pl.run(duration)
                result = {}
        finally:
            live.update(render())
            pl.close()
    for alert in pl.alerts.sent:
        console.print(f"[bold]{alert['level']}[/] {alert['rule']} {alert['topic'] or ''} "
                      f"{alert['group'] or ''} {'' if alert['partition'] is None else 'p' + str(alert['partition'])}"
                      f": {alert['reason']} ({alert['status']})")
    if once:
        console.print(f"done in {result['seconds']}s; inventory: {len(result['inventory'])} clients")


@pipeline.group("cluster")
def pipeline_cluster() -> None:
    """A Spark standalone cluster on this host (master + workers, by pid) to run the jobs on."""


def _cluster_home(home: str | None) -> Any:
    from pathlib import Path

    return Path(home or os.environ.get("YKAFKA_SPARK_HOME_DIR", ".ykafka/spark"))


@pipeline_cluster.command("up")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--cores", type=click.IntRange(1, 256), default=1, show_default=True, help="cores per worker")
@click.option("--memory", default="512m", show_default=True, help="memory per worker (Spark size: 512m, 2g)")
@click.option("--home", default=None, help="pid/state and logs (default .ykafka/spark, YKAFKA_SPARK_HOME_DIR)")
@click.option("--json", "as_json", is_flag=True)
def pipeline_cluster_up(workers: int, cores: int, memory: str, home: str | None, as_json: bool) -> None:
    """Start a master and N workers on 127.0.0.1; prints the master URL for --master."""
    from .cluster import ClusterError, up

    try:
        with console.status(f"starting a Spark master and {workers} worker(s) ..."):
            cluster = up(_cluster_home(home), workers=workers, cores=cores, memory=memory)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(cluster.status()))
        return
    console.print(f"master {cluster.master}  (web UI {cluster.ui}), {workers} worker(s)")
    console.print(f"run the jobs on it: ykafka pipeline run --master {cluster.master} "
                  "--conf spark.driver.host=127.0.0.1")


@pipeline_cluster.command("down")
@click.option("--home", default=None)
def pipeline_cluster_down(home: str | None) -> None:
    """Stop the master and workers that `cluster up` started (by their recorded pids)."""
    from .cluster import ClusterError, down

    try:
        stopped = down(_cluster_home(home))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    console.print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")


@pipeline_cluster.command("status")
@click.option("--home", default=None)
@click.option("--json", "as_json", is_flag=True)
def pipeline_cluster_status(home: str | None, as_json: bool) -> None:
    """The master URL, each daemon's pid and whether it runs, the workers the master lists ALIVE."""
    from .cluster import ClusterError, SparkCluster

    try:
        cluster = SparkCluster.load(_cluster_home(home))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if cluster is None:
        raise click.ClickException("no cluster was started from there: ykafka pipeline cluster up")
    info = cluster.status()
    if as_json:
        click.echo(json.dumps(info))
        return
    console.print(f"master {info['master']}  (web UI {info['ui']}), {info['alive_workers']} worker(s) alive")
    show_table(["daemon", "pid", "running", "web UI"],
               [[d["name"], str(d["pid"]), "yes" if d["running"] else "no", d["ui"]] for d in info["daemons"]])


@pipeline.command("inventory")
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE)
@click.option("--master", default=None)
@click.option("--since", default="7d", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--cached", is_flag=True, help="print the last inventory the pipeline wrote (no Spark)")
def pipeline_inventory(store: str, master: str | None, since: str, as_json: bool, cached: bool) -> None:
    """Clients by cluster, versions, group and last time seen (for upgrade planning)."""
    from . import inventory
    from .store import Store

    st = Store(store)
    if cached:
        rows = inventory.read(st)
    else:
        from .session import spark_session

        rows = inventory.build(spark_session(master), st, _duration(since))
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    show_table(["cluster", "app", "client", "role", "group", "ykafka", "librdkafka", "state", "last seen"],
               [[*(str(row.get(c) or "") for c in ("cluster", "app", "client_id", "role", "group", "ykafka_version",
                                                   "librdkafka_version", "state")), _when(row.get("last_seen"))]
                for row in rows], console=console)
    click.echo()
    show_table(["cluster", "ykafka", "librdkafka", "clients", "live", "apps"],
               [[c["cluster"], c["ykafka_version"], c["librdkafka_version"], c["clients"], c["live"],
                 ", ".join(c["apps"])] for c in inventory.summary(rows)], title="by version", console=console)


@pipeline.command("aggregates")
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE)
@click.option("--since", default="15m", show_default=True)
@click.option("--topic", default=None)
@click.option("--group", default=None)
@click.option("--json", "as_json", is_flag=True)
def pipeline_aggregates(store: str, since: str, topic: str | None, group: str | None, as_json: bool) -> None:
    """Latency percentiles, counts and lag per window, topic and group (read from the store)."""
    from .aggregates import read_aggregates

    rows = read_aggregates(store, _duration(since), topic=topic, group=group)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    show_table(["window", "metric", "topic", "group", "count", "p50", "p95", "p99", "max", "value"],
               [[_when(row["window_start"]), row["name"], row.get("topic") or "", row.get("group") or "",
                 row["count"], *(("" if row[k] is None else f"{row[k]:g}") for k in ("p50", "p95", "p99", "max",
                                                                                      "value"))] for row in rows],
               console=console)


# --- ykafka admin groups ----------------------------------------------------------------------------

@click.group("groups")
def groups() -> None:
    """Consumer-group lifecycle: find idle groups, delete them after review."""


def _candidates(bootstrap: str | None, store: str | None, idle: str) -> tuple[Any, list[dict[str, Any]]]:
    from . import groups as lifecycle
    from .lag_sampler import LagSampler
    from .store import Store

    sampler = LagSampler(_bootstrap(bootstrap))
    st = Store(store) if store and os.path.isdir(store) else None
    return sampler, lifecycle.candidates(sampler, st, _duration(idle))


@groups.command("list")
@click.option("--bootstrap", default=None)
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE,
              help="pipeline store holding the offset history")
@click.option("--idle", default="7d", show_default=True, help="no member and no commit for this long")
@click.option("--name", default="", help="only groups whose name contains this")
@click.option("--after", default=None, metavar="GROUP",
              help="the page after this group, in name order (the last line names it)")
@click.option("--limit", type=click.IntRange(1, None), default=None,
              help="groups a page describes [default: 200, at most 5000]")
@click.option("--json", "as_json", is_flag=True)
def groups_list(bootstrap: str | None, store: str, idle: str, name: str, after: str | None, limit: int | None,
                as_json: bool) -> None:
    """List the cleanup candidates among one page of groups (by name, as the console's groups page).

    Only the page's groups are described on the broker (two requests each); the next page starts after the
    page's last group (``--after``), printed last, with how many groups match."""
    from . import groups as lifecycle
    from .lag_sampler import LagSampler
    from .store import Store

    limit = lifecycle.GROUP_PAGE if limit is None else limit
    if limit > lifecycle.GROUP_PAGE_MAX:
        raise click.BadParameter(f"at most {lifecycle.GROUP_PAGE_MAX} groups a page", param_hint="--limit")
    if after is not None and not 0 < len(after) <= 1000:
        raise click.BadParameter("a group name of 1 to 1000 characters", param_hint="--after")
    sampler = LagSampler(_bootstrap(bootstrap))
    try:
        st = Store(store) if store and os.path.isdir(store) else None
        cut = lifecycle.page_of(sampler.group_names(), name, after, limit)
        infos = sampler.groups(cut["page"]) if cut["page"] else []
        found = lifecycle.candidates(sampler, st, _duration(idle), infos=infos)
    finally:
        sampler.close()
    _print_candidates(found, as_json)
    shown = {"total": cut["total"], "first": cut["first"], "described": len(cut["page"]), "next": cut["next"]}
    if as_json:
        click.echo(json.dumps({"page": shown}))
        return
    last = cut["first"] + len(cut["page"]) - 1
    span = f"groups {cut['first']:,}-{last:,} of {cut['total']:,}" if cut["page"] else f"0 of {cut['total']:,} groups"
    console.print(f"{len(found)} candidate(s) among {span}" + (f" matching {shlex.quote(name)}" if name else "")
                  + (f"; next page: --after {shlex.quote(cut['next'])}" if cut["next"] is not None else ""),
                  markup=False, highlight=False)


@groups.command("cleanup")
@click.option("--bootstrap", default=None)
@click.option("--store", default=_store_default, show_default=DEFAULT_STORE)
@click.option("--idle", default="7d", show_default=True, help="no member and no commit for this long")
@click.option("--apply", "apply_", is_flag=True, help="delete the candidates (default: only list them)")
@click.option("--json", "as_json", is_flag=True)
def groups_cleanup(bootstrap: str | None, store: str, idle: str, apply_: bool, as_json: bool) -> None:
    """List idle groups; with --apply delete them through the AdminClient (DeleteGroups)."""
    from .groups import delete_groups

    sampler, found = _candidates(bootstrap, store, idle)
    try:
        _print_candidates(found, as_json)
        if not apply_:
            if not as_json:
                console.print(f"{len(found)} candidate(s); re-run with --apply to delete them")
            return
        result = delete_groups(sampler.admin, [c["group"] for c in found])
        for name, error in sorted(result.items()):
            if as_json:
                click.echo(json.dumps({"deleted": name, "error": error}))
            else:
                console.print(f"{'deleted' if error is None else '[red]failed[/]'} {name}"
                              + (f": {error}" if error else ""))
        if any(result.values()):
            sys.exit(1)
    finally:
        sampler.close()


def _print_candidates(found: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in found:
            click.echo(json.dumps({"candidate": row["group"], **row}, default=str))
        return
    show_table(["group", "state", "members", "idle s", "basis", "committed"],
               [[row["group"], row["state"], row["members"], row["idle_s"], row["basis"],
                 ", ".join(f"{k}={v}" for k, v in row["committed"].items())] for row in found], console=console)
