"""``ykafka admin groups reset``: move a consumer group's committed offsets through the MetaServer (dry run
first: each partition's current and new offset and the lag after; then the reset, followed step by step)."""

from __future__ import annotations

import functools
import time
from typing import Any

import click

from ykafka.admin.cli_support import _client, _emit_json, _json_flag, _run, _table, console
from ykafka.timestamps import parse_ms

TARGETS = ("earliest", "latest", "timestamp", "offset", "shift")


def _timestamp_ms(text: str) -> int:
    try:
        return parse_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _plan_table(rows: list[dict[str, Any]]) -> None:
    _table("plan", ["topic", "partition", "current", "new", "earliest", "latest", "lag before", "lag after"],
           [(r["topic"], r["partition"], "-" if r["current"] is None else r["current"], r["new"], r["earliest"],
             r["latest"], "-" if r["lag_before"] is None else r["lag_before"], r["lag"]) for r in rows])


@click.command("reset")
@click.argument("group")
@click.option("--to", "to", type=click.Choice(TARGETS), required=True, help="where the offsets move")
@click.option("--value", default=None, help="the offset, the shift (e.g. -100) or the timestamp (ms or ISO-8601)")
@click.option("--topic", default=None, help="one topic (default: every topic the group has offsets for)")
@click.option("--partition", "partitions", type=int, multiple=True, help="a partition of --topic (repeatable)")
@click.option("--cluster", default=None, help="the group's cluster (default: the default cluster)")
@click.option("--execute", is_flag=True, help="reset (default: a dry run showing the plan)")
@click.option("--wait/--no-wait", default=True, show_default=True, help="follow the reset's steps until it ends")
@_json_flag
@click.pass_context
def reset_cmd(ctx: click.Context, group: str, to: str, value: str | None, topic: str | None,
              partitions: tuple[int, ...], cluster: str | None, execute: bool, wait: bool) -> None:
    """Reset GROUP's offsets: dry run by default; --execute resets an empty group at once, a group of ykafka
    consumers by pausing them (hot config), resetting and resuming them; any other active group is refused."""
    number: int | None = None
    if value is not None:
        if to == "timestamp":
            number = _timestamp_ms(value)
        else:
            try:
                number = int(value)
            except ValueError:
                raise click.BadParameter("--value must be a whole number here") from None
    body = {"to": to, "value": number, "topic": topic, "partitions": list(partitions) or None, "cluster": cluster,
            "dry_run": not execute}
    client = _client(ctx)
    result = _run(lambda: client.reset_offsets(group, body))
    if not execute:
        if _emit_json(ctx, result):
            return
        _plan_table(result["rows"])
        if result["refused"]:
            console.print(f"refused: {result['refused']}", markup=False, highlight=False, soft_wrap=True)
        else:
            how = ("directly (the group has no member)" if result["mode"] == "direct" else
                   f"coordinated: {result['ykafka_consumers']} ykafka consumer(s) pause and leave, reset, resume")
            console.print(f"dry run: {result['describe']}; --execute resets {how}", markup=False, highlight=False,
                          soft_wrap=True)
        return
    shown = 0
    while True:
        steps = result.get("steps") or []
        if not (ctx.find_root().find_object(dict) or {}).get("json"):
            for s in steps[shown:]:
                console.print(f"{time.strftime('%H:%M:%S', time.localtime(s['at']))} {s['step']}: {s['detail']}",
                              markup=False, highlight=False, soft_wrap=True)
        shown = len(steps)
        if result["state"] != "running" or not wait:
            break
        time.sleep(0.5)
        result = _run(functools.partial(client.offset_reset, str(result["id"])))
    if _emit_json(ctx, result):
        return
    console.print(f"reset {result['id']}: {result['state']}", markup=False, highlight=False, soft_wrap=True)
    if result["state"] == "failed":
        raise SystemExit(1)
