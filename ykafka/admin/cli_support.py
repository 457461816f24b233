"""The admin CLI's plumbing, shared by its command modules: the MetaServer client from the click context, an
AdminError as one line and an exit code, and every answer as JSON (``--json``) or a table."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
from rich.console import Console

from ykafka.admin.client import AdminClient, AdminError
from ykafka.oneline import EXIT_USER_ERROR, debug_requested, explain
from ykafka.tables import show_table

console = Console()
err_console = Console(stderr=True)


def _client(ctx: click.Context) -> AdminClient:
    """The MetaServer client, built on first use so commands that need no MetaServer need no token."""
    root = ctx.find_root().find_object(dict) or ctx.obj
    if "client" not in root:
        if not root.get("token"):
            raise click.UsageError("an admin token is needed: pass --token or set YKAFKA_ADMIN_TOKEN")
        root["client"] = AdminClient(root["url"], root["token"], operator=root.get("operator"))
    client: AdminClient = root["client"]
    return client


def _run(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except AdminError as exc:
        line = explain(exc)  # unreachable, or the token refused: one line naming the fix, exit 2
        if line is not None:
            if click.get_current_context().find_root().params.get("debug") or debug_requested([]):
                raise
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
            sys.exit(EXIT_USER_ERROR)
        err_console.print(f"[red]error:[/red] {exc.message} (HTTP {exc.status})" if exc.status else
                          f"[red]error:[/red] {exc.message}")
        for key, reason in exc.errors.items():
            err_console.print(f"  [bold]{key}[/bold]: {reason}")
        sys.exit(1)


def _when(ts: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ts))) if ts else "-"


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    show_table(columns, rows, title=title, console=console)


def _emit_json(ctx: click.Context, data: Any) -> bool:
    if ctx.obj.get("json"):
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
        return True
    return False


def _act(ctx: click.Context, call: Callable[[AdminClient], Any], show: Callable[[Any], object]) -> None:
    """One admin call with the context's client (a failure: its message, exit 1), answered as JSON under
    ``--json``, else shown by ``show``."""
    result = _run(lambda: call(_client(ctx)))
    if not _emit_json(ctx, result):
        show(result)


def _show(ctx: click.Context, rows: list[dict[str, Any]], title: str, columns: Sequence[str],
          row: Callable[[dict[str, Any]], Sequence[Any]]) -> None:
    """A listing: JSON with ``--json``, else a table of ``row(r)`` for each r."""
    if not _emit_json(ctx, rows):
        _table(title, columns, [row(r) for r in rows])


def _json_flag(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` on the command itself too (``ykafka admin alerts --json``), same as ``admin --json``."""
    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.ensure_object(dict)["json"] = True

    return click.option("--json", "_json", is_flag=True, expose_value=False, callback=set_json,
                        help="print JSON instead of a table")(fn)
