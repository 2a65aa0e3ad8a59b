"""The paper's example pipeline: Filterer -> Joiner -> Scorer -> Ranker (trending events per topic).

- Filterer keeps the interesting event types and re-keys by dimension id (so the Joiner's cache sees
  each dimension on one partition only).
- Joiner adds the dimension row (file-backed table, LRU cache) and classifies the text into a topic.
- Scorer compares a short sliding window of counts per (event, topic) with a long-term decayed
  average: the score says how far the present is above what this event usually gets.
- Ranker keeps the top K events per topic and event-time bucket, re-emits it when it changes, and
  emits a final result once the watermark closes the bucket.

Everything is driven by event time (`ts`), never the wall clock, so replays give the same output.
The window arithmetic lives in small pure functions so a generic windows library can replace it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processors.dimensions import DEFAULT_PATH, DimensionTable
from processors.generator import KEYWORDS, TOPICS
from stylus import Context, Processor, Record
from stylus.config.durations import parse_duration

UNKNOWN_TOPIC = "other"
ORIGIN_KEY = "__origin__"  # per input partition: the first sub-bucket seen (state keys of events hold a `|`)

_WORD_TOPIC: dict[str, str] = {word: topic for topic, words in KEYWORDS.items() for word in words}


def _ms(config: Mapping[str, Any], name: str, default: str) -> int:
    return int(parse_duration(config.get(name, default)) * 1000)


# ----------------------------------------------------------------------------------- Filterer
class Filterer(Processor):
    """Keeps records whose `type` is in `config.types`; re-keys them by `dim_id` (resharding)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        types = self.config.get("types", ["post", "comment", "share"])
        if not isinstance(types, list | tuple) or not types:
            raise ValueError("Filterer: config `types` must be a non-empty list of event types")
        self.types = frozenset(str(t) for t in types)

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        if isinstance(value, dict) and value.get("type") in self.types:
            dim = value.get("dim_id")
            ctx.emit(value, key=None if dim is None else str(dim))


# ----------------------------------------------------------------------------------- Joiner
def classify(text: str) -> str:
    """The topic whose keywords occur most often in `text`; ties go to the earlier topic in TOPICS."""
    votes: dict[str, int] = {}
    for word in text.lower().split():
        topic = _WORD_TOPIC.get(word)
        if topic is not None:
            votes[topic] = votes.get(topic, 0) + 1
    if not votes:
        return UNKNOWN_TOPIC
    best = max(votes.values())
    return next(t for t in TOPICS if votes.get(t) == best)


class Joiner(Processor):
    """Enriches with the dimension row (config `dimensions`: a JSON-lines file, `cache_size`: LRU rows)
    and the text's topic; emits keyed by event id."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.path = _resolve(self.config.get("dimensions"))
        self.cache_size = int(self.config.get("cache_size", 1000))
        self.table: DimensionTable | None = None

    def setup(self, ctx: Context) -> None:
        self.table = DimensionTable(self.path, cache_size=self.cache_size)

    def process(self, record: Record, ctx: Context) -> None:
        if self.table is None:
            self.table = DimensionTable(self.path, cache_size=self.cache_size)
        value = record.value
        row = self.table.get(value.get("dim_id")) or {}
        event = value["event_id"]
        ctx.emit({
            "event_id": event,
            "type": value.get("type"),
            "dim_id": value.get("dim_id"),
            "country": row.get("country"),
            "language": row.get("language"),
            "segment": row.get("segment"),
            "topic": classify(str(value.get("text", ""))),
            "ts": value.get("ts", record.timestamp),
        }, key=event)

    def close(self) -> None:
        if self.table is not None:
            self.table.close()


def _resolve(path: Any) -> Path:
    """The configured table path as given, else relative to the repository (the demo may run anywhere)."""
    if not path:
        return DEFAULT_PATH
    candidate = Path(str(path))
    if candidate.is_absolute() or candidate.exists():
        return candidate
    return Path(__file__).resolve().parent.parent / candidate


# ----------------------------------------------------------------------------------- Scorer
# A key's window is {"cur": newest sub-bucket seen, "c": {sub-bucket: count} for the `retain` newest
# sub-buckets, "avg": decayed average count per sub-bucket of what is older, "k": sub-buckets folded
# into it}. Input arrives out of order after every reshard (and a backlog is read partition by
# partition), so each record is scored at its own sub-bucket: the `buckets` sub-buckets ending there
# against the history before them. Nothing in the short window is folded into its own expectation, so
# a burst does not lower its own score. The partition's first sub-bucket (`origin`) is partial: it only
# warms up, and sub-buckets up to it are neither counted nor history.


def new_window(sub: int, origin: int) -> dict[str, Any]:
    """A key first seen in sub-bucket `sub`; the sub-buckets since the origin counted zero for it."""
    return {"cur": sub, "c": {}, "avg": 0.0, "k": 0, "o": origin}


def fold(avg: float, k: int, count: float, alpha: float) -> tuple[float, int]:
    return (1.0 - alpha) * avg + alpha * count, k + 1


def advance(win: dict[str, Any], sub: int, alpha: float, retain: int) -> None:
    """Make `sub` the newest sub-bucket, folding the sub-buckets that fall out of retention."""
    cur = win["cur"]
    if sub <= cur:
        return
    counts: dict[str, int] = win["c"]
    origin = win["o"]
    avg, k = float(win["avg"]), int(win["k"])
    lo = max(cur - retain + 1, origin + 1)  # oldest retained sub-bucket that is real history
    hi = sub - retain  # newest sub-bucket that leaves retention
    stop = min(hi, lo + retain)  # beyond the retained ones every leaving sub-bucket is empty
    for index in range(lo, stop + 1):
        avg, k = fold(avg, k, counts.pop(str(index), 0), alpha)
    if hi > stop and hi >= lo:
        avg *= (1.0 - alpha) ** (hi - max(stop, lo - 1))
        k += hi - max(stop, lo - 1)
    for key in [key for key in counts if int(key) <= hi]:
        del counts[key]
    win["cur"], win["avg"], win["k"] = sub, avg, min(k, 100_000)


def history(win: Mapping[str, Any], end: int, alpha: float, retain: int) -> tuple[float, int]:
    """The decayed average and its length for everything up to sub-bucket `end` (inclusive)."""
    avg, k = float(win["avg"]), int(win["k"])
    counts = win["c"]
    for index in range(max(win["cur"] - retain + 1, win["o"] + 1), end + 1):
        avg, k = fold(avg, k, counts.get(str(index), 0), alpha)
    return avg, k


def trend_score(win: Mapping[str, Any], sub: int, buckets: int, alpha: float, retain: int,
                elapsed: float) -> float:
    """How far the `buckets` sub-buckets ending at `sub` are above the history before them, in Poisson
    standard deviations (0 without history). `elapsed` is the fraction of `sub` already seen, so a
    half-full sub-bucket is not read as a drop."""
    avg, k = history(win, sub - buckets, alpha, retain)
    if k <= 0:
        return 0.0
    per_bucket = avg / (1.0 - (1.0 - alpha) ** k)
    first = max(sub - buckets + 1, win["o"] + 1)
    counts = win["c"]
    observed = sum(counts.get(str(i), 0) for i in range(first, sub + 1))
    expected = per_bucket * (sub - first + elapsed)
    return (observed - expected) / math.sqrt(expected + 1.0)


class Scorer(Processor):
    """Per (event, topic): `buckets` sub-buckets of `sub_bucket` event time against a decayed average
    (`alpha` per sub-bucket) of the sub-buckets before them. Records up to `lateness` behind the key's
    newest are still scored; keys idle for `ttl` are dropped. Emits {event_id, topic, score, count, ts}
    keyed by topic."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.sub_ms = _ms(self.config, "sub_bucket", "5s")
        self.buckets = int(self.config.get("buckets", 6))
        self.alpha = float(self.config.get("alpha", 0.1))
        self.ttl_ms = _ms(self.config, "ttl", "10m")
        if self.sub_ms <= 0 or self.buckets < 1 or not 0.0 < self.alpha <= 1.0:
            raise ValueError("Scorer: needs sub_bucket > 0, buckets >= 1 and 0 < alpha <= 1")
        self.retain = self.buckets + -(-_ms(self.config, "lateness", "1m") // self.sub_ms)

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        event, topic = value["event_id"], value.get("topic", UNKNOWN_TOPIC)
        ts = int(value.get("ts", record.timestamp))
        sub = ts // self.sub_ms
        state = ctx.state
        origin = state.get(ORIGIN_KEY)
        if origin is None:
            origin = sub
            state[ORIGIN_KEY] = origin
        if sub <= origin:
            return  # the partition's first, partial sub-bucket: warm-up only
        key = f"{event}|{topic}"
        win = state.get(key)
        if win is None:
            win = new_window(sub, origin)
            ctx.set_timer(key, (sub + 1) * self.sub_ms + self.ttl_ms)
        elif sub > win["cur"]:
            advance(win, sub, self.alpha, self.retain)
            ctx.set_timer(key, (sub + 1) * self.sub_ms + self.ttl_ms)
        elif sub <= win["cur"] - self.retain:
            return  # later than `lateness`: its sub-bucket is already history
        counts = win["c"]
        counts[str(sub)] = counts.get(str(sub), 0) + 1
        state[key] = win
        elapsed = min(1.0, (ts - sub * self.sub_ms + 1) / self.sub_ms) if sub == win["cur"] else 1.0
        score = trend_score(win, sub, self.buckets, self.alpha, self.retain, elapsed)
        count = sum(counts.get(str(i), 0) for i in range(sub - self.buckets + 1, sub + 1))
        ctx.emit({"event_id": event, "topic": topic, "score": round(score, 3), "count": count, "ts": ts},
                 key=topic)

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        win = ctx.state.get(key)
        if win is not None and (win["cur"] + 1) * self.sub_ms + self.ttl_ms <= timestamp:
            del ctx.state[key]  # idle for `ttl`: forget it, keeping state bounded


# ----------------------------------------------------------------------------------- Ranker
def bucket_of(ts: int, bucket_ms: int) -> tuple[int, int]:
    start = ts - ts % bucket_ms
    return start, start + bucket_ms


def update_top(top: list[list[Any]], event: str, score: float, k: int) -> list[list[Any]]:
    """The top `k` [event, best score] pairs after seeing `score` for `event` (ties by event id).
    Keeping only k is exact: an event that falls out can only re-enter with a higher score."""
    best = {e: s for e, s in top}
    if event in best and best[event] >= score:
        return top
    best[event] = score
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [[e, s] for e, s in ranked]


class Ranker(Processor):
    """Per topic and `bucket` of event time: the top `top_k` events by their best score above `min_score`.
    Emits the ranking whenever its order changes (final: false) and once more when the bucket closes."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.bucket_ms = _ms(self.config, "bucket", "5m")
        self.top_k = int(self.config.get("top_k", 5))
        self.min_score = float(self.config.get("min_score", 0.0))
        if self.bucket_ms <= 0 or self.top_k < 1:
            raise ValueError("Ranker: needs bucket > 0 and top_k >= 1")

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        score = float(value["score"])
        if score <= self.min_score:
            return
        topic = value["topic"]
        start, end = bucket_of(int(value.get("ts", record.timestamp)), self.bucket_ms)
        if end - 1 <= ctx.watermark:
            return  # the bucket was already closed and its final ranking emitted
        key = f"{topic}|{start}"
        entry = ctx.state.get(key)
        if entry is None:
            entry = {"top": []}
            ctx.set_timer(key, end - 1)
        top = update_top(entry["top"], value["event_id"], score, self.top_k)
        if top is entry["top"]:
            return
        changed = [e for e, _ in top] != [e for e, _ in entry["top"]]
        entry["top"] = top
        ctx.state[key] = entry
        if changed:
            ctx.emit(self._result(topic, start, top, final=False), key=topic)

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        entry = ctx.state.get(key)
        if entry is None:
            return
        topic, _, start = key.rpartition("|")
        del ctx.state[key]
        ctx.emit(self._result(topic, int(start), entry["top"], final=True), key=topic, timestamp=timestamp)

    def _result(self, topic: str, start: int, top: list[list[Any]], *, final: bool) -> dict[str, Any]:
        return {
            "topic": topic,
            "bucket_start": start,
            "bucket_end": start + self.bucket_ms,
            "top": [{"event_id": e, "score": s} for e, s in top],
            "final": final,
        }
