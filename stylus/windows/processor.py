"""`WindowedProcessor`: tumbling, hopping and session windows with incremental aggregation, built on
`ctx.state` and `ctx.set_timer`, so windows share the processor's state semantics (exactly-once
state gives every final result exactly once across crashes).

State layout (one RocksDB per input partition, inside the user-state keyspace):
    "\\x00w" + hex16(end) + group key  -> accumulator of window [end - size, end)
    "\\x00s" + group key               -> [[start, end, accumulator, closed], ...] sessions of the key
Timers: "\\x00w" + hex16(end) at `end` closes every group's window ending there: the group entries
are one contiguous key range, read with one range scan and deleted together in the next checkpoint
batch. With `retain`, closed windows stay for that long to absorb late records (`late: update`):
each late record re-emits the corrected result; "\\x00x" + hex16(end) at `end + retain` expires them.

What is emitted: the final result when a window closes; with `emit: update` also one result per record
that touches the window; with `emit: changed` one only when `changed(before, after)` says the result
changed (a leaderboard that re-publishes only when its order moves). Every result goes through
`emit_window`, so a subclass can route results elsewhere (fold closed windows into longer-lived state)
instead of emitting them; `window_value` reads an open window's accumulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stylus.api import Context, Processor, Record
from stylus.windows.aggregates import Aggregate, Count
from stylus.windows.assigners import Hopping, Session, Tumbling
from stylus.windows.config import WindowedConfig, build_aggregate, build_assigner

_BIAS = 2**63  # event times may be negative: bias them so hex keys sort like numbers
_WINDOW = "\x00w"
_EXPIRE = "\x00x"
_SESSION = "\x00s"
_SESSION_EXPIRE = "\x00y"


def _hex(ts: int) -> str:
    return f"{ts + _BIAS:016x}"


class WindowedProcessor(Processor):
    """Configure in YAML (see `stylus.windows.config`) or set `window` and `aggregate` in a subclass;
    override `key_of`, `value_of` or `result` to shape the groups and the emitted records."""

    window: Tumbling | Hopping | Session | None = None
    aggregate: Aggregate | None = None
    key_field: str | None = None
    emit_updates = False  # emit: update
    emit_changes = False  # emit: changed
    retain_ms: int | None = None

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        if "window" in self.config:  # YAML overrides what it names; the class supplies the rest
            parsed = WindowedConfig.model_validate({k: self.config[k] for k in WindowedConfig.model_fields
                                                    if k in self.config})
            self.window = build_assigner(parsed.window)
            if "aggregate" in self.config or self.aggregate is None:
                self.aggregate = build_aggregate(parsed.aggregate)
            if "key" in self.config:
                self.key_field = parsed.key
            if "emit" in self.config:
                self.emit_updates = parsed.emit == "update"
                self.emit_changes = parsed.emit == "changed"
            if parsed.retain is not None:
                self.retain_ms = int(parsed.retain * 1000)
        if self.window is None or self.aggregate is None:
            raise ValueError(f"{type(self).__name__}: set `window` and `aggregate` (in config or the class)")
        self._prefixes: dict[int, str] = {}
        cls = type(self)
        if (isinstance(self.window, Tumbling) and cls.key_of is WindowedProcessor.key_of
                and cls.value_of is WindowedProcessor.value_of and cls.process is WindowedProcessor.process):
            self.process = self._process_tumbling  # type: ignore[method-assign]
        # how the fast path reads the aggregated value: 0 none (count), 1 a field of a dict, 2 the aggregate
        agg = self.aggregate
        self._value_mode = 0 if isinstance(agg, Count) else 1 if type(agg).value_of is Aggregate.value_of and \
            agg.field is not None else 2

    def setup(self, ctx: Context) -> None:
        """Without an explicit `retain`, keep closed windows one window long when late records update them."""
        if self.retain_ms is None:
            spec = getattr(getattr(getattr(ctx, "engine", None), "spec", None), "event_time", None)
            window = self.window
            span = window.gap if isinstance(window, Session) else window.size  # type: ignore[union-attr]
            self.retain_ms = span if spec is not None and spec.late == "update" else 0

    # ------------------------------------------------------------------ shaping (override freely)
    def key_of(self, record: Record) -> str:
        if self.key_field is not None:
            value = record.value
            group = value.get(self.key_field) if isinstance(value, dict) else None
            return "" if group is None else str(group)
        return record.key or ""

    def value_of(self, record: Record) -> Any:
        return self.aggregate.value_of(record.value)  # type: ignore[union-attr]

    def result(self, key: str, start: int, end: int, value: Any, *, final: bool, late: bool) -> dict[str, Any]:
        out = {"key": key, "start": start, "end": end, "value": value, "final": final}
        if late:
            out["late"] = True
        return out

    def changed(self, before: Any, after: Any) -> bool:
        """With `emit: changed`: whether a record changed the window's result enough to emit it
        (`before` is None for a new window). Default: any difference."""
        return bool(before != after)

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        """Every result passes here: emits `result(...)` keyed by the group at `end - 1` (so the next
        stage's windows nest). Override to send results elsewhere instead."""
        value = self.aggregate.result(acc)  # type: ignore[union-attr]
        ctx.emit(self.result(key, start, end, value, final=final, late=late), key=key, timestamp=end - 1)

    def window_value(self, ctx: Context, key: str, end: int) -> Any:
        """The accumulator of `key`'s open window ending at `end` (tumbling/hopping), or None."""
        prefix = self._prefixes.get(end)
        return ctx.state.get((_WINDOW + _hex(end) if prefix is None else prefix) + key)

    def _updated(self, ctx: Context, key: str, start: int, end: int, before: Any, acc: Any) -> None:
        """After a record changed an open window: emit an update as `emit` asks."""
        if self.emit_updates:
            self.emit_window(ctx, key, start, end, acc, final=False, late=False)
        elif self.emit_changes and acc is not before:
            agg = self.aggregate
            assert agg is not None
            if self.changed(None if before is None else agg.result(before), agg.result(acc)):
                self.emit_window(ctx, key, start, end, acc, final=False, late=False)

    # ------------------------------------------------------------------ event time
    def is_late(self, event_time: int, watermark: int) -> bool:
        """Late only when every window the record falls in has closed (the engine asks)."""
        return self.window.last_end(event_time) <= watermark  # type: ignore[union-attr]

    def process(self, record: Record, ctx: Context) -> None:
        self.add(ctx, self.key_of(record), ctx.event_time, self.value_of(record))  # type: ignore[attr-defined]

    def add(self, ctx: Context, key: str, t: int, value: Any) -> None:
        """Aggregate `value` (as `value_of` gives it) into every window of group `key` that event time `t`
        falls in: what `process` does with a record, for subclasses that shape their own input."""
        window = self.window
        if isinstance(window, Session):
            self._session_add(ctx, key, t, value, window.gap)
            return
        agg = self.aggregate
        assert agg is not None and window is not None
        state = ctx.state
        watermark = ctx.watermark
        for end in window.ends(t):
            prefix = self._prefixes.get(end)
            if prefix is None:
                if len(self._prefixes) > 4096:
                    self._prefixes.clear()
                prefix = self._prefixes[end] = _WINDOW + _hex(end)
            skey = prefix + key
            acc = state.get(skey)
            if end <= watermark:  # closed: correct it while retained, else it is gone
                if end + (self.retain_ms or 0) <= watermark:
                    continue
                if acc is None:
                    acc = agg.zero()
                    ctx.set_timer(_EXPIRE + prefix[2:], end + (self.retain_ms or 0))
                acc = agg.add(acc, value)
                state[skey] = acc
                self.emit_window(ctx, key, window.start(end), end, acc, final=True, late=True)
                continue
            before = acc
            if acc is None:
                acc = agg.zero()
                ctx.set_timer(prefix, end)
            acc = agg.add(acc, value)
            state[skey] = acc
            if self.emit_updates or self.emit_changes:
                self._updated(ctx, key, window.start(end), end, before, acc)

    def _process_tumbling(self, record: Record, ctx: Context) -> None:
        """`process` for the common case (tumbling, default shaping): `key_of` and `value_of` inlined, then
        `add_tumbling`."""
        value = record.value
        field = self.key_field
        if field is not None:
            group = value.get(field) if type(value) is dict else None
            key = "" if group is None else group if type(group) is str else str(group)
        else:
            key = record.key or ""
        mode = self._value_mode
        if mode == 1:
            value = value.get(self.aggregate.field) if type(value) is dict else None  # type: ignore[union-attr]
        elif mode == 0:
            value = None
        else:
            value = self.aggregate.value_of(value)  # type: ignore[union-attr]
        self.add_tumbling(ctx, key, ctx.event_time, value)  # type: ignore[attr-defined]

    def add_tumbling(self, ctx: Context, key: str, t: int, value: Any) -> None:
        """`add` for a tumbling window in fewer steps: the fast path of `process`, and of subclasses that shape
        their own input (the SQL stages, stylus/sql/stage.py); a closed window takes the general path."""
        size = self.window.size  # type: ignore[union-attr]
        end = t - t % size + size
        if end <= ctx.watermark:
            self.add(ctx, key, t, value)  # closed: the general path handles corrections
            return
        prefix = self._prefixes.get(end)
        if prefix is None:
            if len(self._prefixes) > 4096:
                self._prefixes.clear()
            prefix = self._prefixes[end] = _WINDOW + _hex(end)
        skey = prefix + key
        state = ctx.state
        agg = self.aggregate
        assert agg is not None
        acc = before = state.get(skey)
        if acc is None:
            acc = agg.zero()
            ctx.set_timer(prefix, end)
        acc = agg.add(acc, value)
        state[skey] = acc
        if self.emit_updates or self.emit_changes:
            self._updated(ctx, key, end - size, end, before, acc)

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        kind = key[:2]
        if kind == _WINDOW:
            window = self.window
            start = window.start(timestamp)  # type: ignore[union-attr]
            entries = ctx.state.scan_prefix(key)  # type: ignore[attr-defined]
            for skey, acc in entries:
                self.emit_window(ctx, skey[len(key):], start, timestamp, acc, final=True, late=False)
            if self.retain_ms:
                ctx.set_timer(_EXPIRE + key[2:], timestamp + self.retain_ms)
            else:
                for skey, _ in entries:
                    del ctx.state[skey]
        elif kind == _EXPIRE:
            for skey, _ in ctx.state.scan_prefix(_WINDOW + key[2:]):  # type: ignore[attr-defined]
                del ctx.state[skey]
        elif kind in (_SESSION, _SESSION_EXPIRE):
            self._session_timer(ctx, key[2:], kind == _SESSION_EXPIRE)

    # ------------------------------------------------------------------ sessions
    def _session_add(self, ctx: Context, key: str, t: int, value: Any, gap: int) -> None:
        agg = self.aggregate
        assert agg is not None
        skey = _SESSION + key
        watermark = ctx.watermark
        retain = self.retain_ms or 0
        late = t + gap <= watermark
        if late and t + gap + retain <= watermark:
            return
        merged = [t, t + gap, agg.add(agg.zero(), value), 1 if late else 0]
        kept = []
        joined = []  # accumulators of the sessions this record touches
        for session in ctx.state.get(skey) or []:
            if session[0] < merged[1] and merged[0] < session[1]:
                joined.append(session[2])
                merged = [min(session[0], merged[0]), max(session[1], merged[1]),
                          agg.merge(session[2], merged[2]), max(session[3], merged[3])]
            else:
                kept.append(session)
        kept.append(merged)
        kept.sort(key=lambda s: s[0])
        ctx.state[skey] = kept
        if merged[3]:  # touches a closed session: re-emit it corrected
            self.emit_window(ctx, key, merged[0], merged[1], merged[2], final=True, late=True)
            ctx.set_timer(_SESSION_EXPIRE + key, merged[1] + retain)
            return
        ctx.set_timer(skey, merged[1])
        if self.emit_updates or self.emit_changes:  # a new or merged session always counts as changed
            self._updated(ctx, key, merged[0], merged[1], joined[0] if len(joined) == 1 else None, merged[2])

    def _session_timer(self, ctx: Context, key: str, expire: bool) -> None:
        skey = _SESSION + key
        watermark = ctx.watermark
        retain = self.retain_ms or 0
        kept = []
        changed = False
        for session in ctx.state.get(skey) or []:
            start, end, acc, closed = session
            if not closed and end <= watermark:
                self.emit_window(ctx, key, start, end, acc, final=True, late=False)
                changed = True
                if retain:
                    kept.append([start, end, acc, 1])
                    ctx.set_timer(_SESSION_EXPIRE + key, end + retain)
                continue
            if closed and end + retain <= watermark:
                changed = True
                continue
            kept.append(session)
        if not changed:
            return
        if kept:
            ctx.state[skey] = kept
        else:
            del ctx.state[skey]
