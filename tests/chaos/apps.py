"""Processors of the chaos tests. Every output names what it came from, so a reader of the output topic can
check a semantics pair's promise record by record (`src`: input topic:partition:offset) or window by window.

Records are {"k": key, "ts": event time (ms), "amount": int, "i": sequence number} unless said otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stylus import BatchProcessor, Context, Processor, Record
from stylus.core.batch.ops import Groups
from stylus.monoid import CountMonoid

WINDOW_MS = 10_000


def src_of(record: Record) -> str:
    return f"{record.topic}:{record.partition}:{record.offset}"


class KeyCounter(Processor):
    """Counts records per key; emits the running count and the input it came from."""

    def process(self, record: Record, ctx: Context) -> None:
        key = str(record.key)
        count = (ctx.state.get(key) or 0) + 1
        ctx.state[key] = count
        ctx.emit({"key": key, "count": count, "src": src_of(record)}, key=key)


class BatchKeyCounter(BatchProcessor):
    """KeyCounter on the batch path: the same outputs and state, the counts read and written per key in bulk."""

    def process_batch(self, batch: Any, ctx: Any) -> None:
        keys = batch.column("key")
        groups = Groups(keys)
        counts = groups.running_count(np.array(ctx.state.get_many(groups.names, default=0), dtype=np.int64))
        ctx.state.set_many(dict(zip(groups.names, groups.last(counts), strict=True)))
        src = pc.binary_join_element_wise(f"{ctx.topic}:{ctx.partition}:", batch.column("offset").cast(pa.string()),
                                          "")
        ctx.emit_batch(pa.table({"key": keys, "count": counts, "src": src}), key="key")


class TimerWindowSum(Processor):
    """A per-key tumbling sum of `amount` written with timers (config `window_ms`, 10 s by default): the
    record adds to state entry `<key>|<window start>` and sets a timer at the window's end; `on_timer` emits
    {"key", "start", "sum", "n"} and deletes the entry. Late records are the framework's business
    (`event_time.late`)."""

    def setup(self, ctx: Context) -> None:
        self.window_ms = int(self.config.get("window_ms", WINDOW_MS))

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        ts = int(value["ts"])
        start = ts - ts % self.window_ms
        entry = f"{value['k']}|{start}"
        acc = ctx.state.get(entry)
        if acc is None:
            ctx.state[entry] = [int(value["amount"]), 1]
            ctx.set_timer(entry, start + self.window_ms)
        else:
            ctx.state[entry] = [acc[0] + int(value["amount"]), acc[1] + 1]

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        close_window(key, timestamp, self.window_ms, ctx)


def close_window(entry: str, timestamp: int, window_ms: int, ctx: Context) -> None:
    """Emit the window of state entry `<key>|<window start>` and delete the entry (its timer fired)."""
    acc = ctx.state.get(entry)
    name, start = entry.rsplit("|", 1)
    if acc is None:  # nothing to report (cannot happen unless state and timers disagree)
        ctx.emit({"key": name, "start": timestamp - window_ms, "sum": None, "n": 0, "orphan": True}, key=name,
                 timestamp=timestamp - 1)
        return
    ctx.emit({"key": name, "start": int(start), "sum": acc[0], "n": acc[1]}, key=name, timestamp=timestamp - 1)
    del ctx.state[entry]


class BatchTimerWindowSum(BatchProcessor):
    """TimerWindowSum on the batch path: the same state entries, timers and outputs, each batch's rows summed per
    `<key>|<window start>` in bulk, a timer set for each entry the batch opens."""

    fields = ("k", "ts", "amount")

    def setup(self, ctx: Context) -> None:
        self.window_ms = int(self.config.get("window_ms", WINDOW_MS))

    def process_batch(self, batch: Any, ctx: Any) -> None:
        stamps = batch.column("ts").to_numpy()
        starts = stamps - stamps % self.window_ms
        groups = Groups(pc.binary_join_element_wise(batch.column("k"), pa.array(starts).cast(pa.string()), "|"))
        before = ctx.state.get_many(groups.names)
        sums = groups.running_sum(batch.column("amount"), np.array([b[0] if b else 0 for b in before], np.int64))
        counts = groups.running_count(np.array([b[1] if b else 0 for b in before], dtype=np.int64))
        ctx.state.set_many({entry: [total, n] for entry, total, n in
                            zip(groups.names, groups.last(sums), groups.last(counts), strict=True)})
        for entry, previous in zip(groups.names, before, strict=True):
            if previous is None:
                ctx.set_timer(entry, int(entry.rsplit("|", 1)[1]) + self.window_ms)

    def on_timer(self, key: str, timestamp: int, ctx: Any) -> None:
        close_window(key, timestamp, self.window_ms, ctx)


class CountingRelay(Processor):
    """Stage one of a two-stage pipeline: counts records per key in its state and passes each record on
    (same key, same event time) with its source, so stage two's windows sum what stage one saw."""

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        key = str(value["k"])
        ctx.state[key] = (ctx.state.get(key) or 0) + 1
        ctx.emit({**value, "src": src_of(record)}, key=key, timestamp=int(value["ts"]))


class EmittingCount(CountMonoid):
    """Counts records per key as a monoid (RocksDB or PostgreSQL state) and emits one output per input."""

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return ((str(record.key), 1),)

    def process(self, record: Record, ctx: Context) -> None:
        self.accumulate(self.map(record), ctx)
        ctx.emit({"key": str(record.key), "src": src_of(record)}, key=str(record.key))


class SlowCounter(KeyCounter):
    """KeyCounter that takes `sleep_ms` per record (config): a processor that is never at the end of its input
    while records wait, so at-most-once output stays held between checkpoints."""

    def setup(self, ctx: Context) -> None:
        self.sleep = float(self.config.get("sleep_ms", 2)) / 1000

    def process(self, record: Record, ctx: Context) -> None:
        import time

        time.sleep(self.sleep)
        super().process(record, ctx)
