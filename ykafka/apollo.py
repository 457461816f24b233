"""A thin client of Apollo's config-service protocol, over requests.

Why our own and not PyPI ``apollo-client``: that package has no ``notifications/v2`` long poll (it polls
admin endpoints every 300 s) and imports ``telnetlib``, which is gone in Python 3.13.

What it does, as Apollo's Java client does:

* ONE long-poll thread for every subscribed namespace (``GET /notifications/v2``); a namespace's
  notification id advances only after that namespace was fetched successfully, so a failed fetch is
  retried on the next poll instead of being forgotten. The namespace list is split so every request line
  stays within 8 KB (real Apollo servers, behind Tomcat / nginx, refuse longer ones); the parts are
  polled in parallel and the first answer cuts the others short, so a release reaches any part at once.
* A fallback re-fetch of every namespace on a timer (5 minutes by default).
* Namespaces are subscribed lazily: :meth:`ApolloClient.subscribe` fetches the namespace synchronously
  once (short timeout) and wakes the long poll so the new namespace is watched at once (the in-flight
  poll is cut by shutting its socket down; the poll thread restarts it with the new set).
* The client's IP goes with every request, so gray releases (rules matching client IPs) apply.
* The last good content of each namespace is cached on disk, so a client starts while the config
  center is down; the optional access-key signature (``Authorization: Apollo appId:sig``) is supported.
* The URL may list several config-service instances (comma-separated): the client starts on a random one
  and moves to another on a connection error, timeout or 5xx (:mod:`ykafka.endpoints`), re-parking its long
  poll there with its current notification ids.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import random
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode, urlsplit

import requests
import structlog
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ykafka.cachefiles import safe_name, server_dir, write_private
from ykafka.endpoints import RETRY_AFTER_JITTER, Endpoints, retry_after_s

log = structlog.get_logger(__name__)

#: longest ``GET <path>?<query> HTTP/1.1`` line a long poll sends (Tomcat's and nginx's default limit)
MAX_REQUEST_LINE = 8192


@dataclass(frozen=True)
class NamespaceConfig:
    """One namespace's content as the config service released it."""

    namespace: str
    configurations: dict[str, str]
    release_key: str | None
    source: str = "remote"  # "remote" | "cache" | "absent"


UpdateCallback = Callable[[NamespaceConfig], None]


class ApolloError(Exception):
    """A config-service request failed (network, HTTP status, malformed answer).

    ``retry_after``: the seconds the instance asked for with ``Retry-After`` (a 503 or 429: up, but not taking
    this request now), else None."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- a session whose in-flight request another thread can cut short ---------------------------------

class _Tracked:
    """Registry of the live connections of one session, so :meth:`interrupt` can shut their sockets."""

    def __init__(self) -> None:
        self.conns: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()
        self.lock = threading.Lock()

    def add(self, conn: HTTPConnection) -> None:
        with self.lock:
            self.conns.add(conn)

    def interrupt(self) -> None:
        with self.lock:
            conns = list(self.conns)
        for conn in conns:
            sock = getattr(conn, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _interruptible_session(tracked: _Tracked) -> requests.Session:
    class Conn(HTTPConnection):
        def connect(self) -> None:
            super().connect()
            tracked.add(self)

    class SConn(HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            tracked.add(self)

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class SPool(HTTPSConnectionPool):
        ConnectionCls = SConn

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": SPool}

    session = requests.Session()
    adapter = Adapter(pool_connections=1, pool_maxsize=1, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _sign_headers(app_id: str, secret: str | None, path_with_query: str) -> dict[str, str]:
    """Apollo access-key headers: ``Authorization: Apollo appId:base64(hmac-sha1(secret, ts\\npath?query))``."""
    if not secret:
        return {}
    timestamp = str(int(time.time() * 1000))
    digest = hmac.new(secret.encode(), f"{timestamp}\n{path_with_query}".encode(), hashlib.sha1).digest()
    return {"Authorization": f"Apollo {app_id}:{base64.b64encode(digest).decode()}", "Timestamp": timestamp}


@dataclass
class _NsState:
    notification_id: int = -1
    release_key: str | None = None
    applied_seq: int = -1
    loaded: bool = False


class ApolloClient:
    """Fetch and watch namespaces of one Apollo (appId, cluster); report content changes to ``on_update``."""

    def __init__(self, url: str, app_id: str, cluster: str, ip: str, cache_dir: Path | None,
                 on_update: UpdateCallback, secret: str | None = None, longpoll_timeout_s: float = 90.0,
                 refresh_interval_s: float = 300.0, fetch_timeout_s: float = 5.0,
                 max_request_line: int = MAX_REQUEST_LINE, label: str | None = None,
                 instance: str | None = None) -> None:
        self.endpoints = Endpoints(url)  # one URL or a comma-separated list of instances
        self.label = label  # Apollo's apollo.label: gray rules may match it instead of the IP
        # the client instance's id: the config service serves it a gray release whose rule lists its own label
        # (a rollout step reaching a percentage of the clients); a real Apollo ignores the parameter
        self.instance = instance
        self.max_request_line = max_request_line
        self.app_id = app_id
        self.cluster = cluster
        self.ip = ip
        self.cache_dir = cache_dir
        self.secret = secret
        self.longpoll_timeout_s = longpoll_timeout_s
        self.refresh_interval_s = refresh_interval_s
        self.fetch_timeout_s = fetch_timeout_s
        self._on_update = on_update
        self._ns: dict[str, _NsState] = {}
        self._lock = threading.RLock()
        self._seq = itertools.count()
        self._fetch_session = requests.Session()
        self._fetch_lock = threading.Lock()  # requests.Session is not documented thread-safe
        # one (tracked connections, session) per part of the namespace list polled at once
        self._poll_slots: list[tuple[_Tracked, requests.Session]] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.polls = 0  # completed long polls (for tests and reports)
        self.longest_request_line = 0  # longest long-poll request line sent so far, bytes
        self.last_error: str | None = None

    # --- public API -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The config-service instance this client talks to now."""
        return self.endpoints.current

    @property
    def namespaces(self) -> list[str]:
        with self._lock:
            return list(self._ns)

    def release_keys(self) -> dict[str, str]:
        with self._lock:
            return {ns: st.release_key for ns, st in self._ns.items() if st.release_key}

    def subscribe(self, namespace: str, timeout_s: float | None = None) -> NamespaceConfig | None:
        """Watch ``namespace``; fetch it once now (bounded) and wake the long poll. Idempotent."""
        with self._lock:
            if namespace in self._ns:
                return None
            self._ns[namespace] = _NsState()
        result = self._load(namespace, self.fetch_timeout_s if timeout_s is None else timeout_s)
        self._wake_poll()
        return result

    def subscribe_many(self, namespaces: Iterable[str], timeout_s: float | None = None) -> None:
        for ns in namespaces:
            self.subscribe(ns, timeout_s)

    def start(self) -> None:
        if self._threads:
            return
        for name, target in (("ykafka-apollo-longpoll", self._poll_loop),
                             ("ykafka-apollo-refresh", self._refresh_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def refresh_all(self) -> None:
        """Re-fetch every namespace (the periodic fallback; also useful after a reconnect)."""
        for ns in self.namespaces:
            with contextlib.suppress(ApolloError):
                self.fetch(ns)

    def fetch(self, namespace: str, timeout_s: float | None = None) -> NamespaceConfig:
        """Fetch one namespace now; apply it when it changed. Raises :class:`ApolloError` on failure."""
        seq = next(self._seq)
        with self._lock:
            state = self._ns.setdefault(namespace, _NsState())
            release_key = state.release_key if state.loaded else None
        path = f"/configs/{quote(self.app_id, safe='')}/{quote(self.cluster, safe='')}/{quote(namespace, safe='')}"
        query = {"ip": self.ip}
        if self.label:
            query["label"] = self.label
        if self.instance:
            query["ykafkaInstance"] = self.instance
        if release_key:
            query["releaseKey"] = release_key
        path_q = f"{path}?{urlencode(query)}"
        error = ""
        for attempt in range(len(self.endpoints.urls)):  # each instance at most once per fetch
            url = self.endpoints.current
            try:
                with self._fetch_lock:
                    resp = self._fetch_session.get(url + path_q, headers=_sign_headers(
                        self.app_id, self.secret, path_q), timeout=timeout_s or self.fetch_timeout_s)
            except requests.RequestException as exc:
                error = f"fetch {namespace}: {type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 500:
                    self.endpoints.succeeded()
                    break
                error = f"fetch {namespace}: HTTP {resp.status_code} {resp.text[:200]}"
            self.endpoints.failed(url)
            log.warning("ykafka.configcenter.instance_failed", url=url, error=error, attempt=attempt)
        else:
            raise ApolloError(error) from None
        if resp.status_code == 304:
            with self._lock:
                state.applied_seq = max(state.applied_seq, seq)
                return NamespaceConfig(namespace, {}, state.release_key, "unchanged")
        if resp.status_code == 404:
            config = NamespaceConfig(namespace, {}, None, "absent")
        elif resp.status_code == 200:
            try:
                data = resp.json()
                config = NamespaceConfig(namespace, {str(k): str(v) for k, v in
                                                     (data.get("configurations") or {}).items()},
                                         data.get("releaseKey"))
            except (ValueError, AttributeError):
                raise ApolloError(f"fetch {namespace}: malformed answer") from None
        else:
            raise ApolloError(f"fetch {namespace}: HTTP {resp.status_code} {resp.text[:200]}")
        self._apply(config, seq)
        return config

    def close(self) -> None:
        self._stop.set()
        self._wake_poll()
        for thread in self._threads:
            thread.join(timeout=2)
        self._fetch_session.close()
        with self._lock:
            slots = list(self._poll_slots)
        for _, session in slots:
            session.close()

    # --- internals --------------------------------------------------------------------------------

    def _load(self, namespace: str, timeout_s: float) -> NamespaceConfig | None:
        try:
            return self.fetch(namespace, timeout_s)
        except ApolloError as exc:
            self.last_error = str(exc)
            cached = self._read_cache(namespace)
            log.warning("ykafka.configcenter.fetch_failed", namespace=namespace, error=str(exc),
                        using_cache=cached is not None)
            if cached is not None:
                self._apply(cached, next(self._seq), persist=False)
            return cached

    def _apply(self, config: NamespaceConfig, seq: int, persist: bool = True) -> None:
        with self._lock:
            state = self._ns.setdefault(config.namespace, _NsState())
            if seq < state.applied_seq:
                return  # an older answer arriving after a newer one
            state.applied_seq = seq
            if state.loaded and state.release_key == config.release_key and config.source != "cache":
                return
            state.loaded = True
            state.release_key = config.release_key
            # the callback runs under the lock so two updates of one namespace never apply out of order
            try:
                self._on_update(config)
            except Exception:
                log.exception("ykafka.configcenter.update_callback_failed", namespace=config.namespace)
        if persist and config.source == "remote":
            self._write_cache(config)

    def _cache_path(self, namespace: str) -> Path | None:
        if self.cache_dir is None:
            return None
        # keyed by the config center's URLs: a client pointed at another config center never reads this one's
        folder = server_dir(self.cache_dir, "config", self.endpoints.urls)
        return folder / f"{safe_name(f'{self.app_id}+{self.cluster}+{namespace}')}.json"

    def _write_cache(self, config: NamespaceConfig) -> None:
        path = self._cache_path(config.namespace)
        if path is None:
            return
        try:
            write_private(path, json.dumps({"namespace": config.namespace, "releaseKey": config.release_key,
                                             "configurations": config.configurations}))
        except OSError as exc:
            log.warning("ykafka.configcenter.cache_write_failed", path=str(path), error=str(exc))

    def _read_cache(self, namespace: str) -> NamespaceConfig | None:
        path = self._cache_path(namespace)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
            return NamespaceConfig(namespace, {str(k): str(v) for k, v in data["configurations"].items()},
                                   data.get("releaseKey"), "cache")
        except (OSError, ValueError, KeyError, AttributeError):
            return None

    def _wake_poll(self) -> None:
        self._wake.set()
        with self._lock:
            slots = list(self._poll_slots)
        for tracked, _ in slots:
            tracked.interrupt()

    def _slot(self, index: int) -> tuple[_Tracked, requests.Session]:
        with self._lock:
            while len(self._poll_slots) <= index:
                tracked = _Tracked()
                self._poll_slots.append((tracked, _interruptible_session(tracked)))
            return self._poll_slots[index]

    def _split(self, ids: dict[str, int]) -> list[dict[str, int]]:
        """The namespace list in parts whose long-poll request line fits :attr:`max_request_line`.

        Percent-encoding maps character by character, so a part's length is the fixed part of the line
        plus each entry's encoded length plus one encoded comma between entries."""
        fixed = len("GET " + urlsplit(self.url).path + self._poll_path({}) + " HTTP/1.1")
        comma = len(quote_plus(","))
        parts: list[dict[str, int]] = [{}]
        length = fixed
        for ns, nid in ids.items():
            entry = len(quote_plus(json.dumps({"namespaceName": ns, "notificationId": nid},
                                              separators=(",", ":"))))
            extra = entry + (comma if parts[-1] else 0)
            if parts[-1] and length + extra > self.max_request_line:
                parts.append({})
                length, extra = fixed, entry
            parts[-1][ns] = nid
            length += extra
        return parts

    def _poll_path(self, ids: dict[str, int]) -> str:
        notifications = json.dumps([{"namespaceName": ns, "notificationId": nid} for ns, nid in ids.items()],
                                   separators=(",", ":"))
        query = urlencode({"appId": self.app_id, "cluster": self.cluster, "notifications": notifications,
                           "ip": self.ip})
        return f"/notifications/v2?{query}"

    def _poll_parts(self, ids: dict[str, int]) -> list[tuple[str, int]]:
        """Long-poll every part of the namespace list at once; return when the first answers.

        The first answer (or failure) cuts the other parts' polls short; answers that completed meanwhile
        are kept. The next round re-polls every part with the advanced ids."""
        parts = self._split(ids)
        if len(parts) == 1:
            return self._long_poll(ids, 0)
        done = threading.Event()
        answers: list[list[tuple[str, int]]] = []
        failures: list[ApolloError] = []
        cut = [False]

        def poll(index: int, part: dict[str, int]) -> None:
            try:
                answers.append(self._long_poll(part, index))
            except ApolloError as exc:
                if not cut[0]:
                    failures.append(exc)
            finally:
                done.set()

        threads = [threading.Thread(target=poll, args=(i, part), name=f"ykafka-apollo-longpoll-{i}", daemon=True)
                   for i, part in enumerate(parts)]
        for thread in threads:
            thread.start()
        while not done.wait(1.0):
            if self._stop.is_set():
                break
        cut[0] = True
        deadline = time.monotonic() + 10.0
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            for index in range(len(parts)):  # again and again: a part may still be connecting
                self._slot(index)[0].interrupt()
            for thread in threads:
                thread.join(timeout=0.02)
        if not answers and failures:
            raise failures[0]
        return [item for answer in answers for item in answer]

    def _poll_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            self._wake.clear()
            with self._lock:
                ids = {ns: st.notification_id for ns, st in self._ns.items()}
            if not ids:
                self._wake.wait(1.0)
                continue
            url = self.endpoints.current
            try:
                changed = self._poll_parts(ids)
                backoff = 1.0
            except ApolloError as exc:
                if self._stop.is_set():
                    return
                if self._wake.is_set():
                    continue  # interrupted on purpose: re-poll with the new namespace set
                self.last_error = str(exc)
                if len(self.endpoints.urls) > 1:
                    # another instance: re-park there at once with the same notification ids (they come
                    # from the shared database), back off only once every instance failed in a row
                    wait = self.endpoints.failed(url, exc.retry_after)
                    log.warning("ykafka.configcenter.longpoll_failed", url=url, error=str(exc),
                                next_url=self.endpoints.current, retry_in_s=round(wait, 3))
                    if wait:
                        self._wake.wait(wait)
                    continue
                if exc.retry_after is not None:  # up but refusing: as long as it said (the release bound)
                    wait = random.uniform(exc.retry_after, exc.retry_after * (1 + RETRY_AFTER_JITTER))
                    log.warning("ykafka.configcenter.longpoll_failed", error=str(exc), retry_in_s=round(wait, 3))
                    self._wake.wait(wait)
                    continue
                log.warning("ykafka.configcenter.longpoll_failed", error=str(exc), retry_in_s=backoff)
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            self.endpoints.succeeded()
            self.polls += 1
            failed = False
            for ns, notification_id in changed:
                try:
                    self.fetch(ns)
                except ApolloError as exc:
                    self.last_error = str(exc)
                    failed = True
                    log.warning("ykafka.configcenter.fetch_failed", namespace=ns, error=str(exc))
                    continue  # id not advanced: the next poll reports it again
                with self._lock:
                    if ns in self._ns:
                        self._ns[ns].notification_id = notification_id
            if failed:  # the next poll answers at once; do not hammer a failing service
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 60.0)

    def _long_poll(self, ids: dict[str, int], slot: int = 0) -> list[tuple[str, int]]:
        path_q = self._poll_path(ids)
        line = len("GET " + urlsplit(self.url).path + path_q + " HTTP/1.1")
        self.longest_request_line = max(self.longest_request_line, line)
        _, session = self._slot(slot)
        try:
            resp = session.get(self.url + path_q, timeout=(5.0, self.longpoll_timeout_s),
                                          headers=_sign_headers(self.app_id, self.secret, path_q))
        except requests.RequestException as exc:
            raise ApolloError(f"long poll: {type(exc).__name__}: {exc}") from None
        if resp.status_code == 304:
            return []
        if resp.status_code != 200:
            said = retry_after_s(resp.headers.get("Retry-After")) if resp.status_code in (429, 503) else None
            raise ApolloError(f"long poll: HTTP {resp.status_code} {resp.text[:200]}", retry_after=said)
        try:
            items = resp.json()
            out: list[tuple[str, int]] = []
            for item in items:
                name = str(item["namespaceName"])
                out.append((_match(name, ids), int(item["notificationId"])))
            return out
        except (ValueError, KeyError, TypeError) as exc:
            raise ApolloError(f"long poll: malformed answer ({exc!r})") from None

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            self.refresh_all()


def _match(name: str, known: dict[str, int]) -> str:
    """Apollo may answer with another case or a ``.properties`` suffix; map back to our name."""
    if name in known:
        return name
    bare = name.removesuffix(".properties")
    for ns in known:
        if ns.lower() == bare.lower():
            return ns
    return bare
