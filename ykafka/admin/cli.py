"""``ykafka admin …``: operator commands over the MetaServer admin API (rich tables, clear errors).

    ykafka admin users create|list
    ykafka admin apps list|create|delete|rotate
    ykafka admin acl get|set
    ykafka admin topics create NAME --app APP [--cluster --partitions --retention-hours]
    ykafka admin clusters list|set|delete
    ykafka admin config get|set|diff|rollback|merge|abandon
    ykafka admin clients [--app --cluster --librdkafka --group --online --history]
    ykafka admin audit
    ykafka admin alerts [--level --rule --status --topic --group --since]
    ykafka admin aggregates [--since 15m --topic --group --client --name --whole-range] [--errors send|consume]

``--url`` / ``--token`` default to ``YKAFKA_METASERVER`` / ``YKAFKA_ADMIN_TOKEN``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ykafka.admin.cli_support import (
    _act,
    _client,
    _emit_json,
    _json_flag,
    _run,
    _show,
    _table,
    _when,
    console,
    err_console,
)
from ykafka.admin.failover import push_failover, writes_to


@click.group()
@click.option("--url", envvar="YKAFKA_METASERVER", default="http://127.0.0.1:7070", show_default=True,
              help="MetaServer URL (env YKAFKA_METASERVER)")
@click.option("--token", envvar="YKAFKA_ADMIN_TOKEN", default=None, help="admin token (env YKAFKA_ADMIN_TOKEN)")
@click.option("--operator", envvar="YKAFKA_OPERATOR", default=None, help="your name in the audit trail")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@click.pass_context
def admin(ctx: click.Context, url: str, token: str | None, operator: str | None, as_json: bool) -> None:
    """Operate the MetaServer: apps, ACLs, clusters, hot config, clients, audit, alerts, aggregates."""
    ctx.ensure_object(dict)
    ctx.obj.update(url=url, token=token, operator=operator, json=as_json)


# --- console users --------------------------------------------------------------------------------


@admin.group()
def users() -> None:
    """Console users (roles viewer, operator, admin) who log in at <MetaServer>/console/."""


@users.command("create")
@click.argument("username")
@click.option("--role", type=click.Choice(["viewer", "operator", "admin"]), default="admin", show_default=True)
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True,
              help="at least 8 characters (prompted when omitted)")
@click.option("--replace", is_flag=True, help="reset the password and role of an existing user")
@click.pass_context
def users_create(ctx: click.Context, username: str, role: str, password: str, replace: bool) -> None:
    def show(made: Any) -> None:
        click.echo(f"console user {made['username']} ({made['role']}) ready")

    _act(ctx, lambda c: c.create_user(username, password, role, replace), show)


@users.command("list")
@click.pass_context
def users_list(ctx: click.Context) -> None:
    _show(ctx, _run(_client(ctx).list_users), "console users", ["user", "role", "enabled"],
          lambda u: (u["username"], u["role"], u["enabled"]))


# --- security switches ---------------------------------------------------------------------------


@admin.group()
def security() -> None:
    """Security switches (auth.enabled): changed only here, audited; never through hot config."""


def _show_switches(switches: Any) -> None:
    for name, value in sorted(dict(switches).items()):
        click.echo(f"{name} = {'true' if value else 'false'}")


@security.command("show")
@click.pass_context
def security_show(ctx: click.Context) -> None:
    _act(ctx, lambda c: c.security(), _show_switches)


@security.command("set")
@click.option("--auth-enabled/--auth-disabled", "auth_enabled", required=True,
              help="check app signatures (--auth-disabled: grants without them; every such grant is logged)")
@click.pass_context
def security_set(ctx: click.Context, auth_enabled: bool) -> None:
    _act(ctx, lambda c: c.set_security(auth_enabled=auth_enabled), _show_switches)


# --- apps ----------------------------------------------------------------------------------------


@admin.group()
def apps() -> None:
    """Applications and their secrets."""


@apps.command("list")
@_json_flag
@click.pass_context
def apps_list(ctx: click.Context) -> None:
    _show(ctx, _run(_client(ctx).list_apps), "apps",
          ["app", "enabled", "default cluster", "produce", "consume", "group", "description"],
          lambda a: (a["app_id"], a["enabled"], a["default_cluster"], ",".join(a["acl"].get("produce", [])),
                     ",".join(a["acl"].get("consume", [])), ",".join(a["acl"].get("group", [])), a["description"]))


@apps.command("create")
@click.argument("app_id")
@click.option("--description", default="")
@click.option("--default-cluster", default=None)
@_json_flag
@click.pass_context
def apps_create(ctx: click.Context, app_id: str, description: str, default_cluster: str | None) -> None:
    """Create APP_ID and print its secret (shown only this once)."""
    def show(created: Any) -> None:
        console.print(f"created app [bold]{app_id}[/bold]")
        console.print(f"secret: [bold yellow]{created['secret']}[/bold yellow]  (store it now; it is not kept)")

    _act(ctx, lambda c: c.create_app(app_id, description, default_cluster), show)


@apps.command("delete")
@click.argument("app_id")
@click.pass_context
def apps_delete(ctx: click.Context, app_id: str) -> None:
    _run(lambda: _client(ctx).delete_app(app_id))
    console.print(f"deleted app {app_id}")


@apps.command("rotate")
@click.argument("app_id")
@_json_flag
@click.pass_context
def apps_rotate(ctx: click.Context, app_id: str) -> None:
    """Give APP_ID a new secret; the old one stops working at once."""
    def show(rotated: Any) -> None:
        console.print(f"new secret for [bold]{app_id}[/bold]: [bold yellow]{rotated['secret']}[/bold yellow]")

    _act(ctx, lambda c: c.rotate_secret(app_id), show)


@apps.command("rotate-credentials")
@click.argument("app_id")
@_json_flag
@click.pass_context
def apps_rotate_credentials(ctx: click.Context, app_id: str) -> None:
    """New Kafka credentials for APP_ID on every secured cluster; running clients switch at their next
    renewal, the old credentials are deleted from the brokers after the grace period."""
    def show(rotated: Any) -> None:
        console.print(f"new Kafka credentials for [bold]{app_id}[/bold] on {', '.join(rotated['clusters']) or '-'};"
                      f" the old ones work {rotated['old_valid_s']:.0f} s more")

    _act(ctx, lambda c: c.rotate_credentials(app_id), show)


# --- ACL -----------------------------------------------------------------------------------------


def _acl_table(app_id: str, acl_: dict[str, list[str]]) -> None:
    _table(f"ACL of {app_id}", ["operation", "patterns"],
           [(op, ", ".join(acl_.get(op, []))) for op in ("produce", "consume", "group")])


@admin.group()
def acl() -> None:
    """Per-app topic and group patterns (name, prefix*, *)."""


@acl.command("get")
@click.argument("app_id")
@_json_flag
@click.pass_context
def acl_get(ctx: click.Context, app_id: str) -> None:
    _act(ctx, lambda c: c.get_acl(app_id), lambda current: _acl_table(app_id, current))


@acl.command("set")
@click.argument("app_id")
@click.option("--produce", multiple=True, help="topic pattern the app may write (repeatable)")
@click.option("--consume", multiple=True, help="topic pattern the app may read (repeatable)")
@click.option("--group", "groups", multiple=True, help="consumer group pattern (repeatable)")
@_json_flag
@click.pass_context
def acl_set(ctx: click.Context, app_id: str, produce: tuple[str, ...], consume: tuple[str, ...],
            groups: tuple[str, ...]) -> None:
    """Replace APP_ID's ACL (running clients get it at their next renewal)."""
    _act(ctx, lambda c: c.set_acl(app_id, produce, consume, groups), lambda new: _acl_table(app_id, new))


# --- topics --------------------------------------------------------------------------------------


@admin.group()
def topics() -> None:
    """Topics made by the MetaServer (on a secured cluster apps may not create topics)."""


@topics.command("create")
@click.argument("name")
@click.option("--app", "app_id", required=True, help="the app granted produce and consume on it")
@click.option("--cluster", default=None, help="where it lives (default: the least loaded active cluster)")
@click.option("--partitions", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--retention-hours", type=click.FloatRange(0.01, 24 * 366), default=168.0, show_default=True)
@_json_flag
@click.pass_context
def topics_create(ctx: click.Context, name: str, app_id: str, cluster: str | None, partitions: int,
                  retention_hours: float) -> None:
    """Create topic NAME for APP: on the cluster, the app's ACL and the topic's route, audited."""
    def show(done: Any) -> None:
        made = "created" if done.get("created") else "already there"
        console.print(f"topic [bold]{name}[/bold] on {done['cluster']}: {made}; "
                      f"{app_id} may produce and consume it; route set", soft_wrap=True)

    _act(ctx, lambda c: c.create_topic(name, app_id, cluster, partitions, retention_hours), show)


# --- clusters ------------------------------------------------------------------------------------


@admin.command("failover")
@click.argument("to", type=click.Choice(["standby", "primary", "clear"]))
@click.option("--cluster", default=None, help="every topic whose primary is this cluster")
@click.option("--topic", default=None, help="one topic only")
@click.option("--mode", type=click.Choice(["auto", "manual"]), default=None,
              help="also set route.failover (auto: follow health when not switched by hand)")
@click.option("--dry-run", is_flag=True, help="show the change, write nothing")
@click.pass_context
def failover(ctx: click.Context, to: str, cluster: str | None, topic: str | None, mode: str | None,
             dry_run: bool) -> None:
    """Move the writes of a cluster (or one topic) to its standby, back to the primary (starts the failback
    sync), or ``clear`` the manual switch. Every client of the scope follows; the change is audited."""
    if (cluster is None) == (topic is None):
        raise click.UsageError("give exactly one of --cluster or --topic")
    result = _run(lambda: push_failover(_client(ctx), to, cluster=cluster, topic=topic, mode=mode,
                                            dry_run=dry_run))
    if _emit_json(ctx, result):
        return
    _changes_table(result)
    console.print("dry run: nothing written" if dry_run else
                      f"writes of {cluster or topic} -> {to}; see `ykafka admin clusters list`")


@admin.group()
def clusters() -> None:
    """The cluster registry."""


@clusters.command("list")
@_json_flag
@click.pass_context
def clusters_list(ctx: click.Context) -> None:
    client = _client(ctx)
    rows = _run(client.list_clusters)
    for c in rows:  # the manual switch of `ykafka admin failover`, primary when never switched
        c["writes_to"] = writes_to(client, c["name"]) if c.get("standby") else "primary"
    _show(ctx, rows, "clusters",
          ["name", "bootstrap servers", "dc", "standby", "writes to", "status", "security"],
          lambda c: (c["name"], c["bootstrap_servers"], c["dc"], c["standby"], c["writes_to"], c["status"],
                     f"{c['security']['protocol']} {c['security']['mechanism']}" if c.get("security") else "open"))


@clusters.command("set")
@click.argument("name")
@click.option("--bootstrap-servers", required=True)
@click.option("--dc", default="")
@click.option("--standby", default=None)
@click.option("--status", type=click.Choice(["active", "draining", "down"]), default="active", show_default=True)
@click.option("--security-protocol", type=click.Choice(["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"]),
              default="PLAINTEXT", show_default=True,
              help="how the brokers authenticate clients; SASL: the MetaServer issues each app its own principal")
@click.option("--sasl-mechanism", type=click.Choice(["SCRAM-SHA-512", "SCRAM-SHA-256"]), default="SCRAM-SHA-512",
              show_default=True)
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM of the CA that signed the brokers' certificates (SASL_SSL)")
@_json_flag
@click.pass_context
def clusters_set(ctx: click.Context, name: str, bootstrap_servers: str, dc: str, standby: str | None, status: str,
                 security_protocol: str, sasl_mechanism: str, ca_file: str | None) -> None:
    """Create or replace cluster NAME."""
    security = None
    if security_protocol != "PLAINTEXT":
        security = {"protocol": security_protocol, "mechanism": sasl_mechanism,
                    "ca_pem": Path(ca_file).read_text() if ca_file else None}
    def show(saved: Any) -> None:
        console.print(f"cluster [bold]{name}[/bold]: {saved['bootstrap_servers']} ({saved['status']})")

    _act(ctx, lambda c: c.set_cluster(name, bootstrap_servers, dc, standby, status, security), show)


@clusters.command("delete")
@click.argument("name")
@click.pass_context
def clusters_delete(ctx: click.Context, name: str) -> None:
    _run(lambda: _client(ctx).delete_cluster(name))
    console.print(f"deleted cluster {name}")


@admin.group()
def placements() -> None:
    """Which cluster holds each topic (users name topics; the platform picks the cluster)."""


@placements.command("set")
@click.argument("assignments", nargs=-1, required=True)
@click.pass_context
def placements_set(ctx: click.Context, assignments: tuple[str, ...]) -> None:
    """Place topics: TOPIC=CLUSTER ... (all or nothing; a moved topic with traffic needs route.cluster)."""
    wanted = _pairs(assignments)
    written = _run(lambda: _client(ctx).place(wanted))
    console.print(f"placed {written} topic(s)")


@placements.command("list")
@click.option("--prefix", default="", help="only topics starting with this")
@click.option("--cluster", default=None, help="only topics on this cluster")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@_json_flag
@click.pass_context
def placements_list(ctx: click.Context, prefix: str, cluster: str | None, limit: int) -> None:
    page = _run(lambda: _client(ctx).placements(prefix, cluster, limit=limit))
    _show(ctx, page["placements"], "placements", ["topic", "cluster", "updated by"],
          lambda p: (p["topic"], p["cluster"], p["updated_by"]))


@placements.command("delete")
@click.argument("topic")
@click.pass_context
def placements_delete(ctx: click.Context, topic: str) -> None:
    _run(lambda: _client(ctx).unplace(topic))
    console.print(f"deleted the placement of {topic}")


# --- hot config ----------------------------------------------------------------------------------


def _pairs(assignments: Sequence[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: use key=value", param_hint="ASSIGNMENTS")
        values[key.strip()] = value.strip()
    return values


def _changes_table(result: dict[str, Any]) -> None:
    targets = [*(result.get("ips") or []), *(f"label {label}" for label in result.get("labels") or [])]
    title = f"{result['namespace']}" + (f" (gray: {', '.join(targets)})" if targets else "")
    _table(title, ["key", "before", "after"], [(c["key"], c["before"], c["after"]) for c in result["changes"]])


def _released_table(result: dict[str, Any]) -> None:
    _table(f"{result['namespace']} (released now)", ["key", "value"], sorted(result["released"].items()))


@admin.group()
def config() -> None:
    """Hot configuration through the config center (scopes: global, cluster:<c>, group:<g>, topic:<t>)."""


@config.command("get")
@click.argument("scope")
@_json_flag
@click.pass_context
def config_get(ctx: click.Context, scope: str) -> None:
    current = _run(lambda: _client(ctx).get_config(scope))
    if _emit_json(ctx, current):
        return
    _table(f"{current['namespace']} (released)", ["key", "value"], sorted(current["released"].items()))
    if current.get("gray"):
        gray = current["gray"]
        _table(f"gray branch {gray['branch']} for {', '.join(gray['ips'])}", ["key", "value"],
               sorted(gray["released"].items()))


def _partition_warning(ctx: click.Context, scope: str, values: dict[str, str]) -> str | None:
    """``producer.partitions.exclude`` naming partitions the topic lacks, when running clients report its count."""
    raw = values.get("producer.partitions.exclude")
    if raw is None or not scope.startswith("topic:"):
        return None
    topic = scope.split(":", 1)[1]
    try:
        wanted = [int(p) for p in raw.replace(" ", "").split(",") if p]
    except ValueError:
        return None  # not a list of integers: the MetaServer's validation answers
    reported = [(c.get("extra") or {}).get("partitions", {}).get(topic) for c in _client(ctx).clients(online=True)]
    known = [n for n in reported if isinstance(n, int) and n > 0]
    missing = [p for p in wanted if known and p >= min(known)]
    if not missing:
        return None
    count = min(known)
    kept = ",".join(str(p) for p in wanted if p < count) or "none"
    return (f"warning: topic {topic} has {count} partitions (0-{count - 1}) as {len(known)} running client(s) "
            f"report: partition(s) {', '.join(map(str, missing))} do not exist; clients will reject them and "
            f"exclude {kept}")


def _push(ctx: click.Context, scope: str, assignments: Sequence[str], delete: Sequence[str], ips: Sequence[str],
          dry_run: bool, comment: str, labels: Sequence[str] = ()) -> None:
    warning = _run(lambda: _partition_warning(ctx, scope, _pairs(assignments)))
    if warning:
        err_console.print(warning, markup=False, highlight=False, soft_wrap=True)
    result = _run(lambda: _client(ctx).push_config(scope, _pairs(assignments), delete, list(ips) or None, dry_run,
                                                   comment, list(labels) or None))
    if _emit_json(ctx, result):
        return
    _changes_table(result)
    if dry_run:
        console.print("dry run: nothing written")
    elif result.get("release"):
        console.print(f"released {result['release'].get('name')} (id {result['release'].get('id')})")


@config.command("set")
@click.argument("scope")
@click.argument("assignments", nargs=-1, required=False)
@click.option("--delete", multiple=True, help="key to remove (repeatable)")
@click.option("--ip", "ips", multiple=True, help="gray release to this client IP only (repeatable)")
@click.option("--label", "labels", multiple=True,
              help="gray release to clients with this ykafka.client.label (repeatable; with --ip: either matches)")
@click.option("--dry-run", is_flag=True, help="show the diff, write nothing")
@click.option("--comment", default="")
@_json_flag
@click.pass_context
def config_set(ctx: click.Context, scope: str, assignments: tuple[str, ...], delete: tuple[str, ...],
               ips: tuple[str, ...], labels: tuple[str, ...], dry_run: bool, comment: str) -> None:
    """Validate and publish KEY=VALUE pairs at SCOPE, e.g. ``topic:orders producer.acks=1``."""
    if not assignments and not delete:
        raise click.UsageError("give at least one key=value or --delete key")
    _push(ctx, scope, assignments, delete, ips, dry_run, comment, labels)


@config.command("diff")
@click.argument("scope")
@click.argument("assignments", nargs=-1, required=False)
@click.option("--delete", multiple=True)
@click.option("--ip", "ips", multiple=True)
@_json_flag
@click.pass_context
def config_diff(ctx: click.Context, scope: str, assignments: tuple[str, ...], delete: tuple[str, ...],
                ips: tuple[str, ...]) -> None:
    """What ``config set`` would change (a dry run)."""
    _push(ctx, scope, assignments, delete, ips, True, "")


@config.command("rollback")
@click.argument("scope")
@_json_flag
@click.pass_context
def config_rollback(ctx: click.Context, scope: str) -> None:
    """Restore SCOPE's previous release."""
    def show(result: Any) -> None:
        undone = result.get("rolled_back") or {}
        console.print(f"rolled back release {undone.get('name')} (id {undone.get('id')})")
        _released_table(result)

    _act(ctx, lambda c: c.rollback_config(scope), show)


@config.command("merge")
@click.argument("scope")
@_json_flag
@click.pass_context
def config_merge(ctx: click.Context, scope: str) -> None:
    """Promote SCOPE's gray values to every client."""
    _act(ctx, lambda c: c.merge_gray(scope), lambda result: _released_table(result))


@config.command("abandon")
@click.argument("scope")
@_json_flag
@click.pass_context
def config_abandon(ctx: click.Context, scope: str) -> None:
    """Drop SCOPE's gray release."""
    _act(ctx, lambda c: c.abandon_gray(scope), lambda result: console.print(f"deleted gray branch {result['branch']}"))


# --- clients and audit ---------------------------------------------------------------------------


@admin.command("clients")
@click.option("--app", default=None)
@click.option("--cluster", default=None)
@click.option("--librdkafka", default=None, help="exact version or prefix ending in *, e.g. '1.*'")
@click.option("--group", default=None)
@click.option("--online/--offline", default=None, help="only online (or only offline) clients")
@click.option("--history", is_flag=True, help="every report instead of the latest per client")
@click.option("--limit", default=200, show_default=True)
@_json_flag
@click.pass_context
def clients_cmd(ctx: click.Context, app: str | None, cluster: str | None, librdkafka: str | None,
                group: str | None, online: bool | None, history: bool, limit: int) -> None:
    """Running clients (or their report history): who runs what, where."""
    client = _client(ctx)
    if history:
        _show(ctx, _run(lambda: client.client_history(app, cluster, librdkafka, group, limit=limit)),
              "client reports", ["at", "app", "client", "role", "cluster", "group", "librdkafka", "state"],
              lambda r: (_when(r["at"]), r["app_id"], r["client_id"], r["role"], r["cluster"], r["group"],
                         r["versions"]["librdkafka"], r["state"]))
        return
    rows = sorted(_run(lambda: client.clients(app, cluster, librdkafka, group, online, limit)), key=_process_key)
    _show(ctx, rows, "clients (a process's clients together)",
          ["process", "app", "client", "ip", "role", "cluster", "group", "ykafka", "librdkafka", "state",
           "last seen", "online", "errors"],
          lambda r: (_process(r), r["app_id"], r["client_id"], r["ip"], r["role"], r["cluster"], r["group"],
                     r["versions"]["ykafka"], r["versions"]["librdkafka"], r["state"], _when(r["last_seen"]),
                     "yes" if r["online"] else "no", "; ".join(r.get("errors") or []) or "-"))


def _process_key(r: dict[str, Any]) -> tuple[str, int, float, str, str]:
    return (str(r.get("hostname") or ""), int(r.get("pid") or 0), float(r.get("process_started") or 0),
            str(r.get("role") or ""), str(r.get("client_id")))


def _process(r: dict[str, Any]) -> str:
    """The process holding a client: host, pid and start time (older clients report no start time)."""
    started = f" started {_when(r['process_started'])}" if r.get("process_started") else ""
    return f"{r.get('hostname') or '?'} pid {r.get('pid') or '?'}{started}"


@admin.command("audit")
@click.option("--operator", "who", default=None)
@click.option("--action", default=None, help="action or prefix, e.g. config")
@click.option("--target", default=None)
@click.option("--limit", default=50, show_default=True)
@_json_flag
@click.pass_context
def audit_cmd(ctx: click.Context, who: str | None, action: str | None, target: str | None, limit: int) -> None:
    """Who changed what, when (newest first)."""
    _show(ctx, _run(lambda: _client(ctx).audit(who, action, target, limit=limit)), "audit",
          ["when", "operator", "action", "target", "before", "after"],
          lambda r: (_when(r["at"]), r["operator"], r["action"], r["target"],
                     json.dumps(r["before"], sort_keys=True), json.dumps(r["after"], sort_keys=True)))


# --- observability -------------------------------------------------------------------------------


def _window(ms: Any) -> str:
    return _when(ms / 1000) if ms is not None else "-"


@admin.command("alerts")
@click.option("--level", "levels", multiple=True, help="WARN, ERR, STALL, STOP, LOSS, OK (repeatable)")
@click.option("--rule", default=None)
@click.option("--status", type=click.Choice(["firing", "resolved"]), default=None)
@click.option("--topic", default=None)
@click.option("--group", default=None)
@click.option("--since", default=None, help="seen within, e.g. 15m, 1h, 2d")
@click.option("--limit", default=100, show_default=True)
@_json_flag
@click.pass_context
def alerts_cmd(ctx: click.Context, levels: tuple[str, ...], rule: str | None, status: str | None,
               topic: str | None, group: str | None, since: str | None, limit: int) -> None:
    """Alerts the pipeline raised (most recently seen first)."""
    _show(ctx, _run(lambda: _client(ctx).alerts(list(levels) or None, rule, status, topic, group, since=since,
                                                limit=limit)), "alerts",
          ["last seen", "level", "status", "rule", "topic", "group", "partition", "reason", "posts", "id"],
          lambda r: (_when(r["last_seen"]), r["level"], r["status"], r["rule"], r["topic"], r["group"],
                     r["partition"], r["reason"], r["posts"], r["id"]))


@admin.command("aggregates")
@click.option("--since", default="15m", show_default=True, help="look-back, e.g. 90s, 15m, 1h, 2d")
@click.option("--topic", default=None)
@click.option("--group", default=None)
@click.option("--client", default=None, help="client id")
@click.option("--name", "names", multiple=True, help="metric name, e.g. send.latency_ms (repeatable)")
@click.option("--whole-range", is_flag=True, help="one row per metric / topic / group over the whole range")
@click.option("--errors", "errors_side", type=click.Choice(["send", "consume"]), default=None,
              help="error rates per topic instead")
@_json_flag
@click.pass_context
def aggregates_cmd(ctx: click.Context, since: str, topic: str | None, group: str | None, client: str | None,
                   names: tuple[str, ...], whole_range: bool, errors_side: str | None) -> None:
    """Latency, counter and lag aggregates from the pipeline store, served by the MetaServer."""
    if errors_side:
        _show(ctx, _run(lambda: _client(ctx).error_rates(since, errors_side, topic, whole_range)),
              f"{errors_side} error rates, last {since}", ["window", "topic", "errors", "msgs", "rate"],
              lambda r: (_window(r.get("window_start")), r["topic"], r["errors"], r["msgs"], r["rate"]))
        return
    _show(ctx, _run(lambda: _client(ctx).aggregates(since, topic, group, client, list(names) or None,
                                                    whole_range=whole_range)), f"aggregates, last {since}",
          ["window", "metric", "topic", "group", "count", "mean", "p50", "p95", "p99", "p99 max", "max", "value"],
          lambda r: (_window(r.get("window_start")), r["name"], r["topic"], r["group"], r["count"], r["mean"],
                     r["p50"], r["p95"], r["p99"], r["p99_max"], r["max"], r["value"]))
