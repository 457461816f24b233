"""A list of equivalent service instances (config services, MetaServers) and which one to talk to now.

Why: several instances of a control-plane service can serve the same clients (docs/architecture.md). Each
client starts on a random instance, so load spreads without coordination, moves to the next one on a
connection error, timeout or 5xx, and never jumps back to a recovered instance on its own: it is only picked
again at random when the client later has to move (no thundering herd back to a restarted instance).

A failure round tries each instance once before waiting. An instance that is up but refuses (a config service
at its cap of parked long polls answers 503 + ``Retry-After``) says how long to wait; that wait is honoured as
said, not grown round after round, because it is what bounds how late a release reaches a watcher no instance
parks (docs/deployment.md, "When a config service dies"). Only a round where no instance said so (all down)
backs off exponentially.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import requests
import structlog

log = structlog.get_logger(__name__)


def parse_urls(value: str) -> list[str]:
    """Split a comma-separated list of http(s) URLs; each is stripped of surrounding space and trailing '/'."""
    urls = [part.strip().rstrip("/") for part in value.split(",")]
    urls = [url for url in urls if url]
    if not urls:
        raise ValueError("must not be empty")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError("expected http:// or https:// URLs, comma-separated")
    return list(dict.fromkeys(urls))  # duplicates would only skew the random spread


#: a server's Retry-After is taken up to this many seconds: a wrong header cannot silence a client for hours
MAX_RETRY_AFTER_S = 300.0
#: a Retry-After wait is R to R x (1 + this), so the clients one refusal round turned away do not come back at once
RETRY_AFTER_JITTER = 0.25


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds only, at most :data:`MAX_RETRY_AFTER_S`); None when absent
    or not a number (an HTTP date is not used by any server here)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


class Endpoints:
    """The instances of one service, the current one, and a jittered back-off once all of them failed."""

    def __init__(self, urls: str | list[str], rng: random.Random | None = None,
                 base_backoff_s: float = 0.2, max_backoff_s: float = 30.0) -> None:
        self.urls = parse_urls(urls) if isinstance(urls, str) else parse_urls(",".join(urls))
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._current = self._rng.choice(self.urls)
        self._failures = 0  # consecutive failures since the last success
        self._tried: set[str] = set()  # instances failed in this round (each tried once before a wait)
        self._retry_after: float | None = None  # the longest Retry-After an instance said in this round
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s

    @property
    def current(self) -> str:
        with self._lock:
            return self._current

    def succeeded(self) -> None:
        with self._lock:
            self._failures = 0
            self._tried.clear()
            self._retry_after = None

    def failed(self, url: str, retry_after: float | None = None) -> float:
        """``url`` failed: move to another instance; return the wait before retrying.

        The next instance is a random one not yet failed in this round, so a round tries every instance once
        (a random pick among all others could return to a dead one and leave a live one untried). The wait is
        0 while untried instances remain; at the end of a round it is the longest ``retry_after`` an instance
        said in it (seconds, from ``Retry-After``; waited R to 1.25 R), else it grows (full jitter, up to
        ``max_backoff_s``) so a service that is down everywhere is not hammered. A failure reported for an
        instance already left is ignored.
        """
        with self._lock:
            if url != self._current:
                return 0.0
            self._failures += 1
            self._tried.add(url)
            if retry_after is not None:
                self._retry_after = max(retry_after, self._retry_after or 0.0)
            untried = [u for u in self.urls if u not in self._tried]
            if untried:
                self._current = self._rng.choice(untried)
                return 0.0
            # the round is over: the next one starts on another instance, after the wait
            others = [u for u in self.urls if u != url]
            if others:
                self._current = self._rng.choice(others)
            said, self._retry_after = self._retry_after, None
            self._tried.clear()
            if said is not None:
                return self._rng.uniform(said, said * (1 + RETRY_AFTER_JITTER))
            rounds = self._failures // len(self.urls)
            cap = min(self.max_backoff_s, self.base_backoff_s * 2 ** min(rounds, 16))
            return self._rng.uniform(cap / 2, cap)


    def call(self, send: Callable[[str], requests.Response], what: str = "request") -> requests.Response:
        """``send(url)`` to the current instance; on a connection error, timeout or 5xx move to the next one and
        retry (each instance at most once per call, no wait). The last failure is raised or returned."""
        for attempt in range(len(self.urls)):
            url = self.current
            try:
                resp = send(url)
            except requests.RequestException as exc:
                if attempt == len(self.urls) - 1:
                    raise
                log.warning("ykafka.endpoints.instance_failed", url=url, what=what, attempt=attempt,
                            error=type(exc).__name__)
            else:
                if resp.status_code < 500 or attempt == len(self.urls) - 1:
                    if resp.status_code < 500:
                        self.succeeded()
                    return resp
                log.warning("ykafka.endpoints.instance_failed", url=url, what=what, attempt=attempt,
                            status=resp.status_code)
            self.failed(url)
        raise AssertionError("unreachable: the last attempt returns or raises")


def resolve_meta(meta: str, timeout_s: float = 5.0) -> list[str]:
    """The config-service instances a meta URL (or a comma-separated list of them) lists at /services/config,
    as Apollo clients configured with ``apollo.meta`` find them. Raises ``ValueError`` when none answers."""
    errors: list[str] = []
    for url in random.sample(parse_urls(meta), len(parse_urls(meta))):
        try:
            resp = requests.get(url + "/services/config", timeout=timeout_s)
            if resp.status_code == 200:
                found = [str(i["homepageUrl"]) for i in resp.json() if i.get("homepageUrl")]
                if found:
                    return parse_urls(",".join(found))
            errors.append(f"{url}: HTTP {resp.status_code}")
        except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError) as exc:
            errors.append(f"{url}: {type(exc).__name__}")
    raise ValueError(f"no config service found through the meta URL(s): {'; '.join(errors)}")
