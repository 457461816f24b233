"""Each console page's own ``<title>`` (tabs, history and bookmarks tell pages apart), from the template's name
and what the page is about (a client, topic, group or app)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUFFIX = "ykafka console"

#: template name -> the page's title; ``{x}`` names a field of the page's context
TITLES = {
    "overview": "Overview", "clients": "Clients", "client": "Client {client}", "topics": "Topics",
    "topic": "Topic {topic}", "groups": "Consumer groups", "group": "Group {group}", "config": "Hot config",
    "panel": "Live panel", "apps": "Apps & ACLs", "app": "App {app}", "requests": "Requests",
    "clusters": "Clusters", "trace": "Trace", "dlq": "Dead letters", "alerts": "Alerts", "audit": "Audit log",
    "users": "Users", "login": "Log in", "sso_done": "Logged in", "secret": "App secret", "error": "Error",
    "browse": "Messages of {topic}", "reset": "Reset offsets of {group}", "reset_panel": "Offset reset of {group}",
    "notifications": "Alert notifications",
}


def _subject(ctx: Mapping[str, Any]) -> dict[str, str]:
    client, app = ctx.get("c"), ctx.get("app")
    return {"client": str(client.get("client_id") or "") if isinstance(client, Mapping) else "",
            "topic": str(ctx.get("topic") or ""), "group": str(ctx.get("group") or ""),
            "app": str((app.get("app_id") if isinstance(app, Mapping) else app) or "")}


def page_title(template: str, ctx: Mapping[str, Any]) -> str:
    name = template.rsplit(".", 1)[0]
    title = TITLES.get(name, name.replace("_", " ").capitalize()).format(**_subject(ctx)).strip()
    return f"{title} · {SUFFIX}"
