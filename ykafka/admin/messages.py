"""``ykafka admin messages``: read a topic's messages through the MetaServer (bounded; the topic's masking
rules applied; audited) — a partition from an offset or a time, or a key within a time window."""

from __future__ import annotations

import json

import click

from ykafka.admin.cli_support import _client, _emit_json, _json_flag, _run, _table, _when, console


@click.command("messages")
@click.argument("topic")
@click.option("--partition", type=int, default=None)
@click.option("--offset", type=int, default=None, help="read from this offset of --partition")
@click.option("--since", default=None, help="read from this time (ISO-8601, UTC, or epoch ms)")
@click.option("--until", default=None, help="stop at this time")
@click.option("--key", default=None, help="only this key, every partition (needs --since)")
@click.option("--limit", type=int, default=20, show_default=True, help="at most this many messages (1-500)")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "hex"]), default="text", show_default=True)
@click.option("--cluster", default=None)
@click.option("--jsonl", is_flag=True, help="one JSON object per message (an export)")
@_json_flag
@click.pass_context
def messages_cmd(ctx: click.Context, topic: str, partition: int | None, offset: int | None, since: str | None,
                 until: str | None, key: str | None, limit: int, fmt: str, cluster: str | None, jsonl: bool) -> None:
    """Up to --limit messages of TOPIC with their headers and values."""
    client = _client(ctx)
    result = _run(lambda: client.messages(topic, partition=partition, offset=offset, since=since, until=until,
                                          key=key, limit=limit, format=fmt, cluster=cluster))
    if jsonl:
        for m in result["messages"]:
            click.echo(json.dumps(m, ensure_ascii=False))
        return
    if _emit_json(ctx, result):
        return
    _table(f"{topic} on {result['cluster']}", ["partition", "offset", "time", "key", "headers", "value"],
           [(m["partition"], m["offset"], _when(m["timestamp"] / 1000), m["key"] or "",
             " ".join(f"{k}={v}" for k, v in m["headers"]), m.get("value") or "") for m in result["messages"]])
    note = f"; masked: {', '.join(result['masks'])}" if result["masks"] else ""
    console.print(f"{len(result['messages'])} message(s), stopped at {result['stopped']}{note}", markup=False,
                  highlight=False, soft_wrap=True)
