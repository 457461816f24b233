"""The ``ykafka`` command: the local stack (``dev``), operator commands (``admin``) and tools."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ykafka import __version__
from ykafka.devstack import Stack, StackConfig, StackError, replica_name
from ykafka.logs import configure
from ykafka.oneline import debug_requested, one_line_errors
from ykafka.servers import install_hint, server_package
from ykafka.tables import show_table

console = Console()


class _Main(click.Group):
    """Configuration, identity and connection errors answer one line and exit 2 (``ykafka.oneline``)."""

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors(bool(ctx.params.get("debug")) or debug_requested([])):
            return super().invoke(ctx)


@click.group(cls=_Main)
@click.version_option(__version__, prog_name="ykafka")
@click.option("--log-level", default=lambda: os.environ.get("YKAFKA_LOG_LEVEL", "warning"), show_default="warning",
              help="structlog level for this command (env YKAFKA_LOG_LEVEL)")
@click.option("--debug", is_flag=True, help="show the traceback of any error (env YKAFKA_DEBUG=1)")
def main(log_level: str, debug: bool) -> None:
    """ykafka: Kafka clients steered live from a config center."""
    configure(log_level)


# --- dev ----------------------------------------------------------------------------------------

def _stack(config: str | None, home: str | None, ports: dict[str, int | None]) -> Stack:
    overrides: dict[str, Any] = {"home": Path(home) if home else None}
    for name, port in ports.items():
        overrides[f"{name}_port"] = port
    return Stack(StackConfig.load(Path(config) if config else None, **overrides))


_stack_options = [
    click.option("--config", "config", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="stack config (default configs/dev.yaml)"),
    click.option("--home", default=None, help="pid files, logs and data (env YKAFKA_DEV_HOME, default .ykafka)"),
    click.option("--dc-a-port", type=int, default=None, help="port of cluster dc-a (env YKAFKA_DEV_DC_A_PORT)"),
    click.option("--dc-b-port", type=int, default=None, help="port of cluster dc-b (env YKAFKA_DEV_DC_B_PORT)"),
    click.option("--dc-a-controller-port", type=int, default=None,
                 help="KRaft controller port of dc-a's first Kafka node, the next nodes take the next ports (default: "
                      "each node's port + 100; env YKAFKA_DEV_DC_A_CONTROLLER_PORT)"),
    click.option("--dc-b-controller-port", type=int, default=None,
                 help="the same for dc-b (env YKAFKA_DEV_DC_B_CONTROLLER_PORT)"),
    click.option("--configcenter-port", type=int, default=None, help="env YKAFKA_DEV_CONFIGCENTER_PORT"),
    click.option("--metaserver-port", type=int, default=None, help="env YKAFKA_DEV_METASERVER_PORT"),
]


def stack_options(func: Any) -> Any:
    for option in reversed(_stack_options):
        func = option(func)
    return func


def _build(kw: dict[str, Any]) -> Stack:
    return _stack(kw.pop("config"), kw.pop("home"), {
        "dc-a": kw.pop("dc_a_port"), "dc-b": kw.pop("dc_b_port"),
        "dc-a_controller": kw.pop("dc_a_controller_port"), "dc-b_controller": kw.pop("dc_b_controller_port"),
        "configcenter": kw.pop("configcenter_port"), "metaserver": kw.pop("metaserver_port"),
    })


@main.group()
def dev() -> None:
    """The embedded local stack: brokers dc-a and dc-b, the config service and the MetaServer."""


@dev.command("up")
@click.option("--broker", type=click.Choice(["kafka", "tansu"]), default=None,
              help="what runs every cluster's brokers (env YKAFKA_DEV_BROKER, or `broker:` per cluster in "
                   "configs/dev.yaml): Apache Kafka (KRaft, logs on disk; `make kafka` resolves it) or Tansu")
@click.option("--storage", type=click.Choice(["memory", "durable"]), default=None,
              help="every Tansu cluster's storage (env YKAFKA_DEV_STORAGE): memory (one broker, fastest) or durable "
                   "(2 brokers on a local S3 server, survives SIGKILL); a Kafka cluster is always on disk")
@click.option("--replicas", type=click.IntRange(1, 9), default=None,
              help="config services and MetaServers each, peers on one database (env YKAFKA_DEV_REPLICAS, "
                   "default 1); the extra ones are named configcenter-2, metaserver-2, ...")
@stack_options
def dev_up(broker: str | None, storage: str | None, replicas: int | None, **kw: Any) -> None:
    """Start the whole stack (idempotent) and seed a demo app; writes .ykafka/dev.env."""
    stack = _build(kw)
    try:
        if broker:
            stack.set_broker(broker)
        if storage:
            stack.cfg.set_storage(storage)
        if replicas:
            stack.cfg.set_replicas(replicas)
        stack.up()
    except StackError as exc:
        raise click.ClickException(str(exc)) from None
    _print_status(stack)
    env = stack.read_env()
    console.print(f"\nDemo identity (also in {stack.env_file}):")
    for name in ("YKAFKA_APP_ID", "YKAFKA_APP_SECRET", "YKAFKA_METASERVER", "YKAFKA_ADMIN_TOKEN"):
        console.print(f"  {name}={env.get(name, '')}")
    console.print(f"\nConsole: [bold]{stack.cfg.metaserver_url}/console/[/]  log in as "
                  f"[bold]{env.get('YKAFKA_CONSOLE_USER', '')}[/] / [bold]{env.get('YKAFKA_CONSOLE_PASSWORD', '')}[/]")
    console.print(f"\nUse it with: [bold]source {stack.env_file}[/]   Stop with: [bold]ykafka dev down[/]")


@dev.command("down")
@stack_options
def dev_down(**kw: Any) -> None:
    """Stop exactly the processes `up` started."""
    stopped = _build(kw).down()
    console.print("stopped: " + (", ".join(f"{n} (pid {p})" for n, p in stopped.items()) or "nothing was running"))


@dev.command("start")
@click.argument("names", nargs=-1, required=True)
@stack_options
def dev_start(names: tuple[str, ...], **kw: Any) -> None:
    """Start some services, e.g. `ykafka dev start dc-a` after `ykafka dev stop dc-a`."""
    try:
        started = _build(kw).up(list(names), seed=False)
    except StackError as exc:
        raise click.ClickException(str(exc)) from None
    console.print("running: " + ", ".join(f"{n} (pid {p})" for n, p in started.items()))


@dev.command("stop")
@click.argument("names", nargs=-1, required=True)
@stack_options
def dev_stop(names: tuple[str, ...], **kw: Any) -> None:
    """Stop some services, e.g. `ykafka dev stop dc-a` to simulate a data-center outage."""
    try:
        stopped = _build(kw).down(list(names))
    except StackError as exc:
        raise click.ClickException(str(exc)) from None
    console.print("stopped: " + (", ".join(f"{n} (pid {p})" for n, p in stopped.items()) or "nothing was running"))


@dev.command("status")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
@stack_options
def dev_status(as_json: bool, **kw: Any) -> None:
    """What runs where."""
    stack = _build(kw)
    if as_json:
        click.echo(json.dumps(stack.status()))
    else:
        _print_status(stack)


def _print_status(stack: Stack) -> None:
    status = stack.status()
    addresses = {b["name"]: b["address"] for c in status["brokers"].values() for b in c["brokers"]}
    show_table(["service", "address", "pid"],
               [[name, addresses.get(name) or status["clusters"].get(name) or _replica_url(stack, name),
                 str(pid) if pid else "[red]not running[/]"] for name, pid in status["running"].items()],
               console=console, markup=True)


def _replica_url(stack: Stack, name: str) -> str:
    """The address of a control-plane service (``configcenter``, ``metaserver-2``, ...), else ``""``."""
    for service, urls in (("configcenter", stack.cfg.configcenter_urls), ("metaserver", stack.cfg.metaserver_urls)):
        for index, url in enumerate(urls):
            if name == replica_name(service, index):
                return url
    return ""


PIPELINE_HINT = f"needs the pipeline extra (PySpark, pyarrow): {install_hint('pipeline')}"


def _pipeline_package() -> str | None:
    """The pipeline's import name (``ykafka.servers``) when it and PySpark / pyarrow are installed, else None."""
    if any(importlib.util.find_spec(name) is None for name in ("pyspark", "pyarrow")):
        return None
    return server_package("pipeline")


def _missing(name: str, group: bool = False) -> click.Command:
    """Stands in for a pipeline command when the pipeline extra is not installed: says what to install."""

    def run(**_: Any) -> None:
        raise click.ClickException(f"`{name}` {PIPELINE_HINT}")

    params: list[click.Parameter] = [click.Argument(["args"], nargs=-1, required=False)]
    return click.Command(name, callback=run, params=params, help=f"({PIPELINE_HINT})",
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


def _attach_commands() -> None:
    from ykafka.admin.cli import admin
    from ykafka.admin.dlq import dlq
    from ykafka.admin.messages import messages_cmd
    from ykafka.admin.offsets import reset_cmd

    admin.add_command(dlq)
    admin.add_command(messages_cmd)
    main.add_command(admin)
    package = _pipeline_package()
    if package:
        commands = importlib.import_module(f"{package}.cli")
        for command in (commands.trace, commands.pipeline):
            main.add_command(command)
        commands.groups.add_command(reset_cmd)
        admin.add_command(commands.groups)
    else:
        for name in ("trace", "pipeline"):
            main.add_command(_missing(name))
        # offset resets go through the MetaServer; list / cleanup read the pipeline's store
        groups = click.Group("groups", help=f"Consumer groups: reset offsets (list / cleanup: {PIPELINE_HINT})")
        groups.add_command(reset_cmd)
        for name in ("list", "cleanup"):
            groups.add_command(_missing(f"groups {name}"), name)
        admin.add_command(groups)


_attach_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
