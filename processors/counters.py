"""Counter- and Ranker-style processors written as monoids, so they run with local RocksDB state or with
remote PostgreSQL state (`state: {backend: postgres, dsn: ...}`) without a code change.

- EventCounter: events per key per event-time window (a count monoid, merged in SQL).
- TopK: per topic and event-time bucket, the top K events by their best score (the Ranker's ranking
  as a monoid: merging keeps each event's best score, then the K best; exact, see `merge_top`).
State keys are `<key>|<window start ms>`; values are JSON (an int, or a list of [event, score]).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stylus import Record
from stylus.config.durations import parse_duration
from stylus.monoid import CountMonoid, MonoidProcessor


def _window_ms(config: Mapping[str, Any], name: str, default: str) -> int:
    ms = int(parse_duration(config.get(name, default)) * 1000)
    if ms <= 0:
        raise ValueError(f"config `{name}` must be a positive duration")
    return ms


def _event_time(record: Record, field: str) -> int:
    value = record.value
    if isinstance(value, dict):
        ts = value.get(field)
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            return int(ts)
    return record.timestamp


class EventCounter(CountMonoid):
    """Counts records per key and tumbling event-time `window` (config: window=1m, time_field=ts,
    key_field: a value field to count by instead of the record key)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.window_ms = _window_ms(self.config, "window", "1m")
        self.time_field = str(self.config.get("time_field", "ts"))
        self.key_field: str | None = self.config.get("key_field")

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        if self.key_field is not None:
            value = record.value
            key = value.get(self.key_field) if isinstance(value, dict) else None
        else:
            key = record.key
        ts = _event_time(record, self.time_field)
        return ((f"{'' if key is None else key}|{ts - ts % self.window_ms}", 1),)


def merge_top(a: list[list[Any]], b: list[list[Any]], k: int) -> list[list[Any]]:
    """The K best [event, score] pairs of `a` and `b`, each event at its best score, ties by event id.
    Associative and commutative: an event dropped from a partial top K had K distinct better events,
    which stay better in every later merge, so it can never belong to the final top K."""
    best: dict[str, float] = {}
    for part in (a, b):
        for event, score in part:
            if event not in best or score > best[event]:
                best[event] = score
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [[event, score] for event, score in ranked]


class TopK(MonoidProcessor):
    """Ranker-style input (`topic`, `event_id`, `score`, `ts`): per topic and `bucket`, the `top_k`
    events by best score above `min_score` (config: bucket=5m, top_k=5, min_score=0)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.bucket_ms = _window_ms(self.config, "bucket", "5m")
        self.top_k = int(self.config.get("top_k", 5))
        self.min_score = float(self.config.get("min_score", 0.0))
        if self.top_k < 1:
            raise ValueError("TopK: config `top_k` must be at least 1")

    def zero(self) -> list[list[Any]]:
        return []

    def combine(self, a: list[list[Any]], b: list[list[Any]]) -> list[list[Any]]:
        return merge_top(a, b, self.top_k)

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        value = record.value
        if not isinstance(value, dict):
            return ()
        score = float(value["score"])
        if score <= self.min_score:
            return ()
        ts = _event_time(record, "ts")
        return ((f"{value['topic']}|{ts - ts % self.bucket_ms}", [[str(value["event_id"]), score]]),)
