"""``ykafka admin`` CLI against a live MetaServer + config center (SQLite backend)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.ms_fixtures")

from click.testing import CliRunner  # noqa: E402
from rich.console import Console  # noqa: E402

from tests.ms_fixtures import ADMIN_TOKEN, MetaServer, new_app  # noqa: E402
from ykafka.admin.cli import admin  # noqa: E402


@pytest.fixture(scope="module")
def server(ms_factory: Callable[..., MetaServer]) -> MetaServer:
    return ms_factory()


@pytest.fixture()
def cli(server: MetaServer) -> Callable[..., Any]:
    runner = CliRunner()

    def run(*args: str, ok: bool = True) -> Any:
        result = runner.invoke(admin, list(args), env={"YKAFKA_METASERVER": server.url,
                                                       "YKAFKA_ADMIN_TOKEN": ADMIN_TOKEN,
                                                       "YKAFKA_OPERATOR": "cli-user", "COLUMNS": "200"})
        assert (result.exit_code == 0) == ok, result.output
        return result

    return run


def test_apps_acl_clusters(cli: Callable[..., Any], server: MetaServer) -> None:
    app_id = f"cli-{uuid.uuid4().hex[:6]}"
    saved = cli("clusters", "set", "dc-a", "--bootstrap-servers", "127.0.0.1:19001", "--dc", "a").output
    assert "cluster dc-a: 127.0.0.1:19001 (active)" in saved
    listed = json.loads(cli("--json", "clusters", "list").stdout)
    assert [c["name"] for c in listed] == ["dc-a"]
    created = json.loads(cli("--json", "apps", "create", app_id, "--default-cluster", "dc-a").stdout)
    assert created["app_id"] == app_id and len(created["secret"]) > 20
    out = cli("acl", "set", app_id, "--produce", "orders.*", "--consume", "orders.*", "--group", "g-*").output
    assert "orders.*" in out
    assert json.loads(cli("--json", "acl", "get", app_id).stdout) == {"produce": ["orders.*"],
                                                                      "consume": ["orders.*"], "group": ["g-*"]}
    table = cli("apps", "list").output
    assert app_id in table and "orders.*" in table
    rotated = cli("apps", "rotate", app_id).output
    assert "new secret" in rotated
    sdk = server.sdk(app_id, created["secret"])
    assert sdk.grant().status_code == 401  # rotated away
    bad = cli("acl", "set", app_id, "--produce", "a*b", ok=False)
    assert "HTTP 422" in bad.output and "pattern 1: '*' may only end a prefix" in bad.output
    cli("apps", "delete", app_id)
    missing = cli("acl", "get", app_id, ok=False)
    assert "not found" in missing.output and "HTTP 404" in missing.output
    audit = json.loads(cli("--json", "audit", "--target", f"app:{app_id}").stdout)
    assert [r["action"] for r in audit] == ["app.delete", "app.rotate_secret", "acl.set", "app.create"]
    assert {r["operator"] for r in audit} == {"cli-user"}


def test_security_switch_set_and_shown(cli: Callable[..., Any]) -> None:
    assert cli("security", "show").output == "auth.enabled = true\n"
    assert cli("security", "set", "--auth-disabled").output == "auth.enabled = false\n"
    assert cli("security", "set", "--auth-enabled").output == "auth.enabled = true\n"
    trail = json.loads(cli("--json", "audit", "--action", "security.set").stdout)
    assert [(r["operator"], r["after"]) for r in trail[:2]] == [("cli-user", {"auth.enabled": True}),
                                                              ("cli-user", {"auth.enabled": False})]


def test_config_set_diff_get_rollback(cli: Callable[..., Any], server: MetaServer) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    scope = f"topic:{topic}"
    out = cli("config", "set", scope, "producer.acks=1", "producer.linger.ms=10").output
    assert "producer.acks" in out and "released" in out
    diff = json.loads(cli("--json", "config", "diff", scope, "producer.acks=all").stdout)
    assert diff["changes"] == [{"key": "producer.acks", "before": "1", "after": "all"}] and diff["dry_run"]
    cli("config", "set", scope, "producer.acks=0")
    got = json.loads(cli("--json", "config", "get", scope).stdout)
    assert got["released"] == {"producer.acks": "0", "producer.linger.ms": "10"}
    rejected = cli("config", "set", scope, "producer.acks=7", ok=False)
    assert "HTTP 422" in rejected.output and "producer.acks" in rejected.output
    cli("config", "rollback", scope)
    assert json.loads(cli("--json", "config", "get", scope).stdout)["released"]["producer.acks"] == "1"
    gray = json.loads(cli("--json", "config", "set", scope, "producer.acks=all", "--ip", "198.51.100.3").stdout)
    assert gray["gray"]["ips"] == ["198.51.100.3"]
    assert "gray branch" in cli("config", "get", scope).output
    usage = cli("config", "set", scope, "novalue", ok=False)
    assert "key=value" in usage.output


def test_clients_view(cli: Callable[..., Any], server: MetaServer) -> None:
    server.admin().set_cluster("dc-a", "127.0.0.1:19001", dc="a")
    app = new_app(server)
    sdk = server.sdk(app.app_id, app.secret)
    token = sdk.grant().json()["token"]
    sdk.report(token, client_id="old-one", versions={"ykafka": "0.1", "confluent_kafka": "1.9", "librdkafka": "1.9.2"})
    sdk.report(token, client_id="new-one")
    rows = json.loads(cli("--json", "clients", "--app", app.app_id, "--librdkafka", "1.*").stdout)
    assert [r["client_id"] for r in rows] == ["old-one"]
    table = cli("clients", "--app", app.app_id).output
    assert "old-one" in table and "new-one" in table
    history = json.loads(cli("--json", "clients", "--app", app.app_id, "--history").stdout)
    assert [r["client_id"] for r in history] == ["new-one", "old-one"]


def test_unreachable_and_bad_token(server: MetaServer) -> None:
    runner = CliRunner()
    down = runner.invoke(admin, ["--url", "http://127.0.0.1:9", "--token", "x", "apps", "list"])
    assert down.exit_code == 2 and "cannot reach the MetaServer" in down.output
    assert "Fix: start the stack" in down.output
    bad = runner.invoke(admin, ["--url", server.url, "--token", "nope", "apps", "list"])
    assert bad.exit_code == 2 and "authentication failed" in bad.output and "401" in bad.output
    assert "Fix: pass --token or set YKAFKA_ADMIN_TOKEN" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_sample_admin_push_runs(server: MetaServer) -> None:
    import subprocess
    import sys

    from tests.support import ROOT

    result = subprocess.run(
        [sys.executable, "samples/admin_push.py", "--metaserver", server.url, "--token", ADMIN_TOKEN,
         "--configcenter", str(server.configcenter_url), "--apollo-app-id", server.apollo_app_id,
         "--topic", f"sample-{uuid.uuid4().hex[:6]}", "--acks", "-1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "refused before it reaches the config center" in result.stdout
    assert "'producer.acks': 'all'" in result.stdout


CLIENT_COLUMNS = ["process", "app", "client", "ip", "role", "cluster", "group", "ykafka", "librdkafka", "state",
                  "last seen", "online", "errors"]


def test_clients_through_a_pipe_at_80_columns_keep_every_cell(server: MetaServer) -> None:
    """`ykafka admin clients | cat` in an 80-column window: tab-separated, nothing cut."""
    server.admin().set_cluster("dc-a", "127.0.0.1:19001", dc="a")
    app = new_app(server)
    sdk = server.sdk(app.app_id, app.secret)
    token = sdk.grant().json()["token"]
    long_ids = [f"checkout-service-{n}-7f9c2d41b8e6a3c5d0f1" for n in range(2)]
    for client_id in long_ids:
        sdk.report(token, client_id=client_id)
    env = {**os.environ, "COLUMNS": "80", "YKAFKA_METASERVER": server.url, "YKAFKA_ADMIN_TOKEN": ADMIN_TOKEN}
    for args in (["clients", "--app", app.app_id], ["apps", "list"], ["clusters", "list"]):
        piped = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", *args], capture_output=True, text=True,
                               env=env, timeout=60)
        assert piped.returncode == 0, piped.stderr
        assert "…" not in piped.stdout and "│" not in piped.stdout
        lines = [line for line in piped.stdout.splitlines() if not line.startswith("# ")]  # "# title"
        header = lines[0].split("\t")
        assert all(len(line.split("\t")) == len(header) for line in lines[1:]), piped.stdout
        if args[0] == "clients":
            assert header == CLIENT_COLUMNS
            rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
            assert sorted(r["client"] for r in rows) == long_ids
            assert {r["app"] for r in rows} == {app.app_id} and all(r["ip"] and r["role"] for r in rows)
        json_flag = subprocess.run([sys.executable, "-m", "ykafka.cli", "admin", *args, "--json"],
                                   capture_output=True, text=True, env=env, timeout=60)
        assert json_flag.returncode == 0, json_flag.stderr
        assert isinstance(json.loads(json_flag.stdout), list)


def test_terminal_table_at_80_columns_never_cuts_key_columns() -> None:
    from ykafka.tables import show_table

    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=80, color_system=None)
    client_id, ip = "checkout-service-0-7f9c2d41b8e6a3c5d0f1", "203.0.113.254"
    show_table(CLIENT_COLUMNS, [["orders-app", client_id, "host-a.example.internal", ip, "producer", "dc-a",
                                 None, "0.9.0", "2.6.1", "running", "2026-11-25 07:00:00", "yes", None]],
               title="clients", console=terminal)
    text = out.getvalue()
    for key in (client_id, ip, "producer", "running", "orders-app"):
        assert key in text, text
    assert all(len(line) <= 80 for line in text.splitlines())
    narrow = io.StringIO()
    show_table(["app", "client", "state"], [["orders-app", client_id, "running"]],
               console=Console(file=narrow, force_terminal=True, width=80, color_system=None))
    assert "┃ client " in narrow.getvalue() and client_id in narrow.getvalue()  # fits: still a table
