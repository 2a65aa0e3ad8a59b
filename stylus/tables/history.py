"""Tables for backfill and replay on Spark: every version of every key, looked up as of the record's time.

A backfill task reads the table's topic (the partitions it needs, up to their end when the task starts) and
keeps each key's versions in timestamp order; a lookup for a record with timestamp `t` answers the latest
version whose timestamp is <= t, or the key's first version when all are later (a tombstone: absent), then
the TTL as in the stream. So a backfill of the
same input gives the same joins however its units are split, and the same as the stream wherever each table
record was applied before the input records stamped after it (docs/tables.md, "Backfill and replay").
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from stylus.config.model import Pipeline
from stylus.config.tables import parquet_path, tables_for
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range
from stylus.serde import encode_key
from stylus.state.kv import MemoryKV
from stylus.tables.parquet import load_snapshot
from stylus.tables.registry import ProcessorTables
from stylus.tables.store import Codec, TableStore, encode_entry

_ENTRY_TS = 8  # an entry's timestamp prefix (stylus/tables/store.py)


@dataclass
class Versions:
    """One partition's (or a global table's) keys -> their versions: parallel timestamp and entry lists."""

    times: dict[bytes, list[int]] = field(default_factory=dict)
    entries: dict[bytes, list[bytes | None]] = field(default_factory=dict)

    def add(self, key: bytes, timestamp: int, entry: bytes | None) -> None:
        times = self.times.setdefault(key, [])
        entries = self.entries.setdefault(key, [])
        at = bisect.bisect_right(times, timestamp)  # equal timestamps keep offset order
        times.insert(at, timestamp)
        entries.insert(at, entry)

    def as_of(self, key: bytes, now_ms: int) -> tuple[int, bytes] | None:
        times = self.times.get(key)
        if not times:
            return None
        # before a key's first version, the first counts: a table loaded after the input was stamped (dimension
        # rows loaded today, events from last week) is seen by the stream, so it is here too
        at = max(0, bisect.bisect_right(times, now_ms) - 1)
        entry = self.entries[key][at]
        return None if entry is None else (times[at], entry[_ENTRY_TS:])


@dataclass
class HistoryTable:
    name: str
    codec: Codec
    partitions: int
    global_: bool
    versions: dict[int, Versions]  # partition -> versions (a global table: one, under -1)


class HistoryTables(ProcessorTables):
    """`engine.tables` of a backfill task: tables loaded on first lookup."""

    def __init__(self, pipeline: Pipeline, processor: str, bootstrap: str) -> None:
        super().__init__(pipeline, processor)
        self.bootstrap = bootstrap
        self.tables: dict[str, HistoryTable] = {}
        self.views: dict[str, HistoryView] = {}

    def open(self, name: str) -> HistoryTable:
        table = self.tables.get(name)
        if table is not None:
            return table
        spec, topic = self.declared(name)
        codec = Codec(spec, topic.serde)
        global_ = spec.placement == "global"
        table = HistoryTable(name, codec, topic.partitions, global_, {})
        wanted = [(spec.topic, p) for p in range(topic.partitions)]
        ends = end_offsets(self.bootstrap, wanted)
        snapshot = parquet_path(self.pipeline, spec)
        for part in range(-1 if global_ else 0, 0 if global_ else topic.partitions):
            versions = table.versions[part] = Versions()
            if snapshot is not None:  # the base rows, at the snapshot's time
                base = TableStore(MemoryKV())
                load_snapshot(base, codec, snapshot, lambda key: True)
                for key, timestamp, value in base.entries():
                    versions.add(key, timestamp, encode_entry(timestamp, value))
        for msg in read_range(self.bootstrap, {tp: (low, high) for tp, (low, high) in ends.items()}):
            change = codec.entry(msg.key(), msg.value(), msg.timestamp()[1])
            if change is not None:
                table.versions[-1 if global_ else msg.partition()].add(change[0], msg.timestamp()[1], change[1])
        self.tables[name] = table
        return table

    def view(self, name: str, ctx: Any) -> HistoryView:
        view = self.views.get(name)
        if view is None or view._ctx is not ctx:
            view = self.views[name] = HistoryView(self.open(name), ctx, None, None)
        return view

    def view_at(self, name: str, partition: int, timestamp: int) -> HistoryView:
        return HistoryView(self.open(name), None, partition, timestamp)


class HistoryView:
    """`get(key)`: the version current at the record's timestamp, in the record's partition if partitioned."""

    __slots__ = ("_ctx", "_partition", "_table", "_timestamp")

    def __init__(self, table: HistoryTable, ctx: Any, partition: int | None, timestamp: int | None) -> None:
        self._table, self._ctx, self._partition, self._timestamp = table, ctx, partition, timestamp

    def get(self, key: Any, default: Any = None) -> Any:
        table = self._table
        raw = encode_key(key)
        if raw is None:
            return default
        ctx = self._ctx
        now: int = self._timestamp if ctx is None else ctx._timestamp  # type: ignore[assignment]
        part = -1
        if not table.global_:
            found = self._partition if ctx is None else None if ctx._task is None else ctx._task.partition
            if found is None:
                raise LookupError(f"partitioned table `{table.name}` is looked up inside `process` or `on_timer` only")
            part = found
        value = table.codec.value(table.versions[part].as_of(raw, now), now)
        return default if value is None else value

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None


def history_tables(pipeline: Pipeline, processor: str, bootstrap: str) -> HistoryTables | None:
    """The backfill task's tables; None when the processor reads none."""
    return HistoryTables(pipeline, processor, bootstrap) if tables_for(pipeline, processor) else None
