"""The paper's example pipeline: Filterer -> Joiner -> Scorer -> Ranker (trending events per topic).

- Filterer keeps the interesting event types and re-keys by dimension id (so the Joiner's cache sees
  each dimension on one partition only).
- Joiner adds the dimension row (a global table: docs/tables.md) and classifies the text into a topic.
- Scorer compares a short sliding window of counts per (event, topic) with a long-term decayed
  average: the score says how far the present is above what this event usually gets.
- Ranker keeps the top K events per topic and event-time bucket, re-emits it when it changes, and
  emits a final result once the watermark closes the bucket.

Everything is driven by event time (`ts`), never the wall clock, so replays give the same output.
The Scorer's sliding window and the Ranker's buckets are windows of `stylus.windows`
(docs/event-time.md); the Scorer's decayed history is in `processors.trend_history`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from processors.generator import KEYWORDS, TOPICS
from processors.trend_history import Decay, History, trend_score
from stylus import Context, Processor, Record
from stylus.config.durations import parse_duration
from stylus.windows import Count, Hopping, TopK, Tumbling, WindowedProcessor

UNKNOWN_TOPIC = "other"

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
    """Enriches with the dimension row, looked up in the global table `config.table` (default `dims`: the
    shipped dimensions, loaded into their topic by `stylus table load` or `stylus demo`), and the text's
    topic; emits keyed by event id. An event whose dimension the table lacks gets nulls."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.table = str(self.config.get("table", "dims"))

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        row = ctx.table(self.table).get(value.get("dim_id")) or {}
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


# ----------------------------------------------------------------------------------- Scorer
CLOCK_KEY = "__clock__"  # per input partition: [origin, newest event time] (state keys of events hold a `|`)


class Scorer(WindowedProcessor):
    """Per (event, topic): the count of a sliding window (`window`, default 10 s every 2 s) against a
    decayed average (`alpha` per slide) of the key's earlier windows; a key idle for `ttl` is forgotten.
    Emits {event_id, topic, score, count, ts} keyed by topic, one per record.

    The windows library keeps the counts (one hopping window per slide, closed by the watermark);
    each closed window is folded into the key's history (`processors.trend_history`) instead of being
    emitted. A record is scored at its own window, the one ending at the end of its slide, against the
    windows that ended before that one began, whether they have closed yet or not: scores depend on
    the records seen, not on when the watermark happened to advance (replays and backfills agree).
    The partition's first slide is partial: its records only warm up (neither counted nor scored), and
    a record whose own window has already closed is counted in its later windows but not scored.
    """

    window = Hopping(10_000, 2_000)
    aggregate = Count()

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        if config and "aggregate" in config:
            raise ValueError("Scorer: counts per window; configure `window`, `alpha` and `ttl`, not `aggregate`")
        super().__init__(config, name)
        window = self.window
        if not isinstance(window, Hopping):
            raise ValueError("Scorer: `window` must be {type: sliding, size: ..., slide: ...}")
        self.decay = Decay(window.size, window.slide, float(self.config.get("alpha", 0.1)),
                           _ms(self.config, "ttl", "10m"))
        self._memo: dict[str, tuple[Any, int, int, History]] = {}  # key -> (entry, horizon, origin, history)

    def key_of(self, record: Record) -> str:
        value = record.value
        return f"{value['event_id']}|{value.get('topic', UNKNOWN_TOPIC)}"

    def process(self, record: Record, ctx: Context) -> None:
        t: int = ctx.event_time  # type: ignore[attr-defined]
        slide = self.decay.slide
        state = ctx.state
        clock = state.get(CLOCK_KEY)
        if clock is None:
            clock = [t - t % slide + slide, t]
            state[CLOCK_KEY] = clock
        origin, newest = clock
        if t < origin:
            return  # the partition's first, partial slide: warm-up only
        if t > newest:
            newest = t
            state[CLOCK_KEY] = [origin, t]
        key = self.key_of(record)
        self.add(ctx, key, t, None)  # counted in every window it falls in
        end = t - t % slide + slide
        watermark = ctx.watermark
        if end <= watermark:
            return  # its own window has closed
        count = self.window_value(ctx, key, end)
        hist = self._history(ctx, key, end - self.decay.size, origin)
        score = trend_score(self.decay, hist, [], end, count, newest, origin)
        value = record.value
        ctx.emit({"event_id": value["event_id"], "topic": value.get("topic", UNKNOWN_TOPIC),
                  "score": round(score, 3), "count": count, "ts": t}, key=value.get("topic", UNKNOWN_TOPIC))

    def _history(self, ctx: Context, key: str, horizon: int, origin: int) -> History:
        """The key's history through every window that ended by `horizon`: those already folded, closed
        ones waiting in its entry, and open ones (after the watermark) read from the windows. When no
        open window is involved it depends only on the entry object and the horizon (entries are never
        changed in place): remembered, so the records of one key and slide fold it once."""
        decay = self.decay
        slide = decay.slide
        entry = ctx.state.get(key)
        hist = entry["h"] if entry is not None else decay.start(origin)
        low = max(hist[2], ctx.watermark)
        first_open = low - low % slide + slide
        if first_open > horizon:
            memo = self._memo.get(key)
            if memo is not None and memo[0] is entry and memo[1] == horizon and memo[2] == origin:
                return memo[3]
        if entry is not None:
            for window_end, window_count in entry["p"]:
                if window_end > horizon:
                    break
                hist = decay.fold(hist, window_end, window_count, origin)
        for window_end in range(first_open, horizon + 1, slide):
            open_count = self.window_value(ctx, key, window_end)
            if open_count:
                hist = decay.fold(hist, window_end, open_count, origin)
        if first_open > horizon:
            if len(self._memo) >= 100_000:
                self._memo.clear()
            self._memo[key] = (entry, horizon, origin, hist)
        return hist

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        """A closed window joins the key's history instead of being emitted. It waits in `p` until no
        open window can still be scored against history that excludes it (one window length)."""
        if not final or late:
            return  # scores are per record; a late correction does not rewrite history
        state = ctx.state
        origin = state[CLOCK_KEY][0]
        entry = state.get(key)
        decay = self.decay
        if entry is None:
            hist, pending = decay.start(origin), []
            ctx.set_timer(key, end + decay.ttl + decay.size)
        else:
            hist, pending = entry["h"], entry["p"]
        pending = [*pending, [end, acc]]
        cut = end - decay.size
        while pending and pending[0][0] <= cut:
            window_end, window_count = pending.pop(0)
            hist = decay.fold(hist, window_end, window_count, origin)
        state[key] = {"h": hist, "p": pending}

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        if key.startswith("\x00"):
            super().on_timer(key, timestamp, ctx)  # the windows' own timers
            return
        entry = ctx.state.get(key)
        if entry is None:
            return
        last = entry["p"][-1][0] if entry["p"] else entry["h"][3]
        due = last + self.decay.ttl + self.decay.size
        if due <= timestamp:
            del ctx.state[key]  # idle for `ttl`: every later score would start it afresh anyway
        else:
            ctx.set_timer(key, due)


# ----------------------------------------------------------------------------------- Ranker
class Ranker(WindowedProcessor):
    """Per topic and `window` of event time (default: 5 minute tumbling buckets): the top `top_k` events
    by their best score above `min_score`. Emits the ranking whenever its order changes (final: false)
    and once more when the watermark closes the bucket (final: true).

    On the windows library: a `top_k` aggregate per topic, `emit: changed` with `changed` comparing
    the order of the events, and `result` shaping {topic, bucket_start, bucket_end, top, final}."""

    window = Tumbling(300_000)
    key_field = "topic"
    emit_changes = True

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        config = dict(config or {})
        if "aggregate" in config:
            raise ValueError("Ranker: ranks by score; configure `window`, `top_k` and `min_score`, not `aggregate`")
        top_k = int(config.get("top_k", 5))
        if top_k < 1:
            raise ValueError("Ranker: needs top_k >= 1")
        self.aggregate = TopK(top_k, by="score", item="event_id")
        self.min_score = float(config.get("min_score", 0.0))
        super().__init__(config, name)

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        score = value.get("score") if isinstance(value, dict) else None
        if score is None or score <= self.min_score:
            return
        super().process(record, ctx)

    def changed(self, before: Any, after: Any) -> bool:
        return [e["event_id"] for e in before or ()] != [e["event_id"] for e in after]

    def result(self, key: str, start: int, end: int, value: Any, *, final: bool, late: bool) -> dict[str, Any]:
        out = {"topic": key, "bucket_start": start, "bucket_end": end, "top": value, "final": final}
        if late:
            out["late"] = True
        return out
