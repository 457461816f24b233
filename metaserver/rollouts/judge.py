"""A rollout step's verdict: the canary clients against the untouched clients of the same scope, on the
``health`` their reports carry (ykafka/metrics.py ``Metrics.health``), as deltas since the step started.

Figures per side: send error rate (send errors and throttled sends over sends), the worst latest send p99,
consumer lag growth, handler error rate (handler failures and consume errors over messages handled), and the
canary's rejections of the release. The step passes when every figure is within its threshold of the
other side's; the figures of both sides are the evidence recorded with the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Thresholds(BaseModel):
    """How much worse than the untouched clients the canary may be (defaults: docs/metaserver.md)."""

    model_config = ConfigDict(extra="forbid")

    error_rate: float = Field(default=0.01, ge=0, le=1, description="canary send error rate minus control's")
    p99_ratio: float = Field(default=2.0, ge=1, description="canary p99 / control p99 (above p99_floor_ms)")
    p99_floor_ms: float = Field(default=50.0, ge=0, description="p99s under this never fail the step")
    lag_growth: float = Field(default=1000, ge=0, description="canary lag growth minus control's, messages")
    handler_error_rate: float = Field(default=0.01, ge=0, le=1)
    rejections: int = Field(default=0, ge=0, description="canary clients refusing the release")


def _num(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def side(now: Mapping[str, Mapping[str, Any]], base: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One side's figures from each client's health now and at the step's start (``client_id -> health``)."""
    sent = errors = handled = handler_errors = lag_growth = 0.0
    p99: float | None = None
    for cid, h in now.items():
        b = base.get(cid) or {}

        def delta(key: str, h: Mapping[str, Any] = h, b: Mapping[str, Any] = b) -> float:
            return max(0.0, _num(h.get(key)) - _num(b.get(key)))

        throttled = delta("throttled")
        sent += delta("send.msgs") + throttled
        errors += delta("send.errors") + throttled
        handled += delta("processed") + delta("handler.failed")
        handler_errors += delta("handler.failed")
        if h.get("lag") is not None:
            lag_growth += _num(h.get("lag")) - _num(b.get("lag"))
        if h.get("send.p99_ms") is not None:
            p99 = max(p99 or 0.0, _num(h.get("send.p99_ms")))
    return {"clients": len(now), "sends": int(sent), "send_error_rate": round(errors / sent, 4) if sent else 0.0,
            "send_p99_ms": p99, "lag_growth": lag_growth, "handled": int(handled),
            "handler_error_rate": round(handler_errors / handled, 4) if handled else 0.0}


def verdict(canary: dict[str, Any], control: dict[str, Any], rejections: int, pending: int,
            t: Thresholds) -> list[str]:
    """Why the canary fails the step (empty: it passes)."""
    why = []
    if pending:
        why.append(f"{pending} canary client(s) never reported the release applied")
    if rejections > t.rejections:
        why.append(f"{rejections} canary client(s) rejected the release")
    if canary["send_error_rate"] - control["send_error_rate"] > t.error_rate:
        why.append(f"send error rate {canary['send_error_rate']:.2%} vs {control['send_error_rate']:.2%} "
                   f"(threshold +{t.error_rate:.2%})")
    cp, kp = canary["send_p99_ms"], control["send_p99_ms"]
    if cp is not None and cp > t.p99_floor_ms and cp > t.p99_ratio * max(kp or 0.0, t.p99_floor_ms / t.p99_ratio):
        why.append(f"send p99 {cp:g} ms vs {kp if kp is not None else '-'} ms (threshold x{t.p99_ratio:g})")
    if canary["lag_growth"] - control["lag_growth"] > t.lag_growth:
        why.append(f"lag grew {canary['lag_growth']:g} vs {control['lag_growth']:g} (threshold +{t.lag_growth:g})")
    if canary["handler_error_rate"] - control["handler_error_rate"] > t.handler_error_rate:
        why.append(f"handler error rate {canary['handler_error_rate']:.2%} vs {control['handler_error_rate']:.2%}")
    return why
