"""Parsing a point in time an operator types: epoch milliseconds or ISO-8601 (UTC unless it names a zone)."""

from __future__ import annotations

import datetime as dt


def parse_ms(text: str) -> int:
    """Epoch milliseconds of ``text``; ValueError saying what is accepted."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("a time is epoch milliseconds or ISO-8601, e.g. 2026-11-26T10:00:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)
