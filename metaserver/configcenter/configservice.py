"""Apollo's config-service API: `/configs`, `/configfiles`, `/notifications/v2`, `/services/*`.

Written after Apollo's ConfigController, ConfigFileController and NotificationControllerV2 so existing Apollo
clients work unchanged. Every answer comes from the in-memory read model; long polls park on a future.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import structlog
from fastapi import APIRouter, Request, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from . import signature
from .center import ConfigCenter
from .errors import ApolloError, BadRequest, error_body
from .keyscope import KeyScope
from .longpoll import Waiter, notification
from .properties import to_properties
from .readmodel import INSTANCE_LABEL, ReleaseView, strip_properties_suffix

log = structlog.get_logger(__name__)

JSON_UTF8 = "application/json;charset=UTF-8"
TEXT_UTF8 = "text/plain;charset=UTF-8"
_FORMAT_TYPES = {"json": JSON_UTF8, "yml": "application/yaml;charset=UTF-8", "yaml": "application/yaml;charset=UTF-8",
                 "xml": "application/xml;charset=UTF-8"}


def _center(request: Request) -> ConfigCenter:
    center: ConfigCenter = request.app.state.center
    return center


def client_ip(request: Request, given: str | None) -> str | None:
    """WebUtils.tryToGetClientIp: the `ip` parameter, else X-Forwarded-For's first hop, else the peer."""
    if given:
        return given
    forwarded = request.headers.get("x-forwarded-for")
    if forwarded:
        return forwarded.split(",")[0].strip()
    return request.client.host if request.client else None


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None:
        raise BadRequest("Required request parameter '%s' for method parameter type String is not present", name)
    return value


def _not_found(app_id: str, cluster: str, namespace: str) -> Response:
    message = f"Could not load configurations with appId: {app_id}, clusterName: {cluster}, namespace: {namespace}"
    body = error_body(404, message, "org.springframework.web.server.ResponseStatusException")
    return Response(json.dumps(body), status_code=404, media_type=JSON_UTF8)


def _merge(releases: list[ReleaseView]) -> dict[str, str]:
    """Earlier releases (the app's own) override later ones (a public namespace's owner)."""
    merged: dict[str, str] = {}
    for rel in reversed(releases):
        merged.update(rel.configurations)
    return merged


def _query_releases(request: Request, app_id: str, cluster: str, namespace: str,
                    record: bool = False) -> tuple[str, list[ReleaseView]]:
    center = _center(request)
    normalized = center.model.normalize_namespace(app_id, strip_properties_suffix(namespace))
    q = request.query_params
    ip = client_ip(request, q.get("ip"))
    instance = q.get("ykafkaInstance")  # a ykafka client's own id: rollout steps target single instances
    labels = tuple(x for x in (q.get("label"), INSTANCE_LABEL + instance if instance else None) if x) or None
    releases = center.model.releases_for(app_id, cluster, normalized, ip, labels, q.get("dataCenter"))
    if record and releases:  # Apollo's instance audit: who holds which release (batched, memory only here)
        center.instances.served(app_id, cluster, q.get("dataCenter"), ip, releases)
    return normalized, releases


router = APIRouter()


@router.get("/configs/{app_id}/{cluster}/{namespace}")
async def query_config(request: Request, app_id: str, cluster: str, namespace: str) -> Response:
    """ConfigController.queryConfig: the merged release, 304 when the client already holds its key."""
    _, releases = _query_releases(request, app_id, cluster, namespace, record=True)
    if not releases:
        return _not_found(app_id, cluster, namespace)
    release_key = "+".join(r.release_key for r in releases)
    if release_key == request.query_params.get("releaseKey", "-1"):
        return Response(status_code=304)
    # the cluster actually loaded (after fallback, or a gray branch), as Apollo's appClusterNameLoaded
    loaded = releases[0].cluster_name if releases[0].app_id.lower() == app_id.lower() else cluster
    body = {"appId": app_id, "cluster": loaded, "namespaceName": namespace,
            "configurations": _merge(releases), "releaseKey": release_key}
    return Response(json.dumps(body, ensure_ascii=False), media_type=JSON_UTF8)


@router.get("/configfiles/json/{app_id}/{cluster}/{namespace}")
async def config_file_json(request: Request, app_id: str, cluster: str, namespace: str) -> Response:
    _, releases = _query_releases(request, app_id, cluster, namespace)
    if not releases:
        return Response(status_code=404)
    return Response(json.dumps(_merge(releases), ensure_ascii=False), media_type=JSON_UTF8)


@router.get("/configfiles/raw/{app_id}/{cluster}/{namespace}")
async def config_file_raw(request: Request, app_id: str, cluster: str, namespace: str) -> Response:
    normalized, releases = _query_releases(request, app_id, cluster, namespace)
    if not releases:
        return Response(status_code=404)
    fmt = normalized.rsplit(".", 1)[-1].lower() if "." in normalized else "properties"
    if fmt in _FORMAT_TYPES or fmt == "txt":
        content = _merge(releases).get("content")
        if content is None:
            return Response(status_code=404)
        return Response(content, media_type=_FORMAT_TYPES.get(fmt, TEXT_UTF8))
    return Response(to_properties(_merge(releases)), media_type=TEXT_UTF8)


@router.get("/configfiles/{app_id}/{cluster}/{namespace}")
async def config_file_properties(request: Request, app_id: str, cluster: str, namespace: str) -> Response:
    _, releases = _query_releases(request, app_id, cluster, namespace)
    if not releases:
        return Response(status_code=404)
    return Response(to_properties(_merge(releases)), media_type=TEXT_UTF8)


BAD_NOTIFICATIONS = "invalid notifications format: expected [{\"namespaceName\": ..., \"notificationId\": ...}]"


def parse_notifications(raw: str) -> list[tuple[str, int]]:
    """The client's `[{namespaceName, notificationId}]`; 400 when it is not that (Apollo's Gson parse).

    The message never carries the input back; a deeply nested document is refused like any other bad one."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest(BAD_NOTIFICATIONS) from None
    if not isinstance(parsed, list) or not parsed:
        raise BadRequest(BAD_NOTIFICATIONS)
    out: list[tuple[str, int]] = []
    for entry in parsed:
        if not isinstance(entry, dict):
            raise BadRequest(BAD_NOTIFICATIONS)
        name = entry.get("namespaceName")
        raw_id: Any = entry.get("notificationId", 0)
        if name is not None and not isinstance(name, str):
            raise BadRequest(BAD_NOTIFICATIONS)
        if isinstance(raw_id, bool) or not isinstance(raw_id, int | str):
            raise BadRequest(BAD_NOTIFICATIONS)
        try:
            notification_id = int(raw_id)
        except ValueError:
            raise BadRequest(BAD_NOTIFICATIONS) from None
        if name:
            out.append((name, notification_id))
    if not out:
        raise BadRequest(BAD_NOTIFICATIONS)
    return out


@router.get("/notifications/v2")
async def poll_notifications(request: Request) -> Response:
    """NotificationControllerV2: answer at once if any namespace is newer than the client's id, else park."""
    center = _center(request)
    if center.closing:
        # 1 s: the instance is going away, not full; a client with one URL comes back to its restart soon
        return _poll_elsewhere("config service shutting down; poll another instance", 1)
    model = center.model
    app_id = _required(request, "appId")
    cluster = _required(request, "cluster")
    raw = _required(request, "notifications")
    data_center = request.query_params.get("dataCenter")

    # filterNotifications: strip .properties, normalize case, keep the lowest id per namespace
    wanted: dict[str, tuple[str, int]] = {}
    for name, notification_id in parse_notifications(raw):
        original = strip_properties_suffix(name)
        normalized = model.normalize_namespace(app_id, original)
        if normalized in wanted and wanted[normalized][1] < notification_id:
            continue
        wanted[normalized] = (original, notification_id)

    keys_by_ns = {ns: model.watch_keys(app_id, cluster, ns, data_center) for ns in wanted}
    center.instances.polled(app_id, cluster, data_center, client_ip(request, request.query_params.get("ip")),
                            wanted)
    restore = {ns: original for ns, (original, _) in wanted.items() if original != ns}
    # at the cap nothing is registered: news is still answered, a poll that would park is refused below
    waiter = None
    if len(center.registry) < center.max_parked:
        waiter = Waiter([k for keys in keys_by_ns.values() for k in keys], restore)
        center.registry.register(waiter)  # register before checking: no release can slip between the two
    try:
        news = []
        for ns, (original, client_id) in wanted.items():
            ids = {key: model.notification_id(key) for key in keys_by_ns[ns]}
            latest = max(ids.values(), default=-1)
            if latest > client_id:
                news.append(notification(original, latest, {k: v for k, v in ids.items() if v >= 0}))
        if news:
            return Response(json.dumps(news), media_type=JSON_UTF8)
        if waiter is None:
            center.refuse_poll()
            return _poll_elsewhere("too many long polls parked on this config service; poll another instance",
                                   center.poll_retry_after)
        handle = waiter.future.get_loop().call_later(center.longpoll_timeout, waiter.expire)
        watcher = asyncio.ensure_future(_until_disconnected(request, waiter))
        try:
            body = await waiter.future
        finally:
            handle.cancel()
            watcher.cancel()
        closing = {"Connection": "close"} if center.closing else None  # do not come back on this connection
        if not body:
            return Response(status_code=304, headers=closing)
        return Response(body, media_type=JSON_UTF8, headers=closing)
    finally:
        if waiter is not None:
            center.registry.unregister(waiter)


def _poll_elsewhere(message: str, retry_after: int) -> Response:
    """503 + ``Retry-After``, connection closed: a poll this instance will not park (shutting down, or
    ``max_parked`` parked). Not 304: ykafka's adapter and apollo-config-client re-poll a 304 at once (the
    same instance, in a loop) and Apollo's Java client up to twice a second; a 5xx makes each of them move
    to another instance or back off, and the client keeps its notification ids, so a release is not missed
    (the next poll anywhere answers it at once). Closing the connection frees the descriptor the cap guards.
    ``Retry-After`` (``--poll-retry-after``) is how long ykafka's clients wait once every instance refused them:
    it bounds how late a release reaches a watcher that no instance parks (docs/deployment.md)."""
    body = error_body(503, message, "com.ctrip.framework.apollo.common.exception.ServiceException")
    return Response(json.dumps(body), status_code=503, media_type=JSON_UTF8,
                    headers={"Connection": "close", "Retry-After": str(retry_after)})


async def _until_disconnected(request: Request, waiter: Waiter) -> None:
    """A client that gives up its poll (closes the connection) is dropped now, not at the poll timeout: the
    registry then counts only live polls and frees the abandoned one's memory."""
    while not waiter.future.done():
        message = await request.receive()
        if message["type"] == "http.disconnect":
            waiter.expire()
            return


async def _service_instances(request: Request, name: str) -> list[dict[str, str]]:
    """Every live instance on this database (heartbeats); this one alone when it does not advertise."""
    live = await _center(request).live_instances()
    if not live:
        base = str(request.base_url)
        parts = urlsplit(base)
        return [{"appName": name, "instanceId": f"{parts.hostname}:{name.lower()}:{parts.port or 80}",
                 "homepageUrl": base}]
    return [{"appName": name, "instanceId": f"{instance_id}:{name.lower()}", "homepageUrl": url}
            for instance_id, url in live]


@router.get("/services/config")
async def services_config(request: Request) -> list[dict[str, str]]:
    """Meta-server discovery: Apollo clients configured with a meta URL find every config service here."""
    return await _service_instances(request, "APOLLO-CONFIGSERVICE")


@router.get("/services/admin")
async def services_admin(request: Request) -> list[dict[str, str]]:
    return await _service_instances(request, "APOLLO-ADMINSERVICE")


class HotPaths:
    """``GET /notifications/v2`` and ``GET /configs/{appId}/{cluster}/{namespace}`` (what every client repeats)
    served straight from their handlers, without FastAPI's routing, dependency solving and exception layers:
    ~40 % of such an answer's CPU. After a failover one survivor answers every client's re-parked poll and
    fetch at once (docs/benchmarks.md, bench/controlplane_failover.py). Installed inside the access-key, query
    and body guards, so they still apply; a request a handler refuses (an Apollo error) goes to the full
    app, which answers it as before."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response | None = None
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            try:
                if path == "/notifications/v2":
                    response = await poll_notifications(Request(scope, receive))
                elif path.startswith("/configs/"):
                    parts = path.split("/")
                    if len(parts) == 5 and all(parts[2:]):
                        response = await query_config(Request(scope, receive), parts[2], parts[3], parts[4])
            except (ApolloError, HTTPException):
                response = None
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)


class AccessKeyMiddleware:
    """ClientAuthenticationFilter: config-service calls of an app with access keys must be signed (of every app
    under ``--require-access-key``). A per-app key (keyscope.py) opens only its app's namespaces: another one on
    ``/configs`` or ``/configfiles`` is refused like a bad signature, and a ``/notifications/v2`` poll keeps
    only the namespaces the key opens (why not refuse it: see ``_narrow_poll``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not signature.is_config_service_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        app_id = signature.extract_app_id(scope["path"], query)
        if app_id is None:
            await _reject(send, 400, "InvalidAppId")
            return
        center: ConfigCenter = scope["app"].state.center
        creds = center.model.credentials
        enforced = creds.secrets.get(app_id.lower(), ())
        scoped = creds.scoped.get(app_id.lower(), ())
        must = bool(enforced or scoped or center.require_access_key)
        observed = None if must else creds.observed.get(app_id.lower())
        if must or observed:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            timestamp = headers.get("timestamp")
            path_with_query = raw_path + ("?" + query if query else "")
            secrets = [*enforced, *(key.secret for key in scoped)] if must else list(observed or ())
            if not signature.check_timestamp(timestamp):
                log.warning("configcenter.accesskey_stale", app_id=app_id, timestamp=timestamp, enforced=must)
                if must:
                    await _reject(send, 401, "RequestTimeTooSkewed")
                    return
            else:
                index = signature.signed_with(headers.get("authorization"), timestamp, path_with_query, secrets)
                if index is None:
                    log.warning("configcenter.accesskey_invalid", app_id=app_id, enforced=must)
                    if must:
                        await _reject(send, 401, "Unauthorized")
                        return
                elif must and index >= len(enforced):  # a per-app key: only its own namespaces
                    narrowed = _narrow(center, scope, app_id, query, scoped[index - len(enforced)].scope)
                    if narrowed is None:
                        await _reject(send, 401, "Unauthorized")
                        return
                    scope = narrowed
        await self.app(scope, receive, send)


def _narrow(center: ConfigCenter, scope: Scope, app_id: str, query: str, key: KeyScope) -> Scope | None:
    """The request as a per-app key may make it, or None to refuse it (logged, never echoed)."""
    path: str = scope["path"]
    model = center.model
    if path == "/notifications/v2":
        return _narrow_poll(center, scope, app_id, query, key)
    parts = path.split("/")
    if path.startswith(("/configfiles/json/", "/configfiles/raw/")):
        parts = parts[:2] + parts[3:]
    if len(parts) == 5 and parts[1] in ("configs", "configfiles") and parts[4]:
        name = model.normalize_namespace(app_id, strip_properties_suffix(parts[4]))
        if key.allows(name):
            return scope
    log.warning("configcenter.accesskey_out_of_scope", app_id=app_id, owner=key.owner)
    return None


def _narrow_poll(center: ConfigCenter, scope: Scope, app_id: str, query: str, key: KeyScope) -> Scope | None:
    """A long poll keeps only the namespaces the key opens (the rest are never answered, not even with their
    notification id). Filtered rather than refused: one poll carries every namespace a client watches, and a
    refusal for one that the key's scope lacks (a cluster route released a moment before the MetaServer pushed
    the new scope, say) would stop that client's hot config for all the namespaces it may read; their content
    stays behind ``/configs``, which refuses. A poll left with none is refused."""
    params = parse_qsl(query, keep_blank_values=True)
    raw = next((v for k, v in params if k == "notifications"), None)
    if raw is None:
        return scope  # the handler answers its 400
    try:
        wanted = parse_notifications(raw)
    except BadRequest:
        return scope  # the handler answers its 400, without the input
    model = center.model
    kept = [(name, notification_id) for name, notification_id in wanted
            if key.allows(model.normalize_namespace(app_id, strip_properties_suffix(name)))]
    if not kept:
        log.warning("configcenter.accesskey_out_of_scope", app_id=app_id, owner=key.owner, dropped=len(wanted))
        return None
    if len(kept) == len(wanted):
        return scope
    log.info("configcenter.accesskey_poll_narrowed", app_id=app_id, owner=key.owner,
             dropped=len(wanted) - len(kept))
    body = json.dumps([{"namespaceName": name, "notificationId": notification_id} for name, notification_id in kept])
    narrowed = urlencode([(k, body if k == "notifications" else v) for k, v in params])
    return {**scope, "query_string": narrowed.encode("latin-1")}


async def _reject(send: Send, status: int, message: str) -> None:
    exception = "org.springframework.security.authentication.BadCredentialsException" if status == 401 \
        else "com.ctrip.framework.apollo.common.exception.BadRequestException"
    body = json.dumps(error_body(status, message, exception)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", JSON_UTF8.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
