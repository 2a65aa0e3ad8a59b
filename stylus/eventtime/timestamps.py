"""Event times as milliseconds since the epoch, from a number of ms or an ISO-8601 timestamp.

A time column or `event_time.field` holds either (docs/reference.md, `event_time`; docs/sql.md). ISO text
without a zone is UTC, so the same text gives the same time on every machine (stream and backfill agree).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def epoch_ms(value: Any) -> int | None:
    """`value` as ms since the epoch: an int or float of ms, or ISO-8601 text; None when it is neither."""
    kind = type(value)
    if kind is int:
        return int(value)
    if kind is float:
        return int(value)
    if kind is str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        delta = parsed - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
