"""Archiver: writes its input topics to Parquet so backfill reaches past Kafka retention.

Layout and columns: `stylus.archive` (topic=.../date=YYYY-MM-DD/part-{partition}-{first}-{last}.parquet).
Pending records live in `ctx.state` (one key per offset), so they are checkpointed with the input offsets
and survive a crash; a file is written when `flush_records` are pending, when the UTC date changes, and
on shutdown. File names come from the partition and offset range, and a file that starts at the same
offset replaces older ones, so a re-run after a crash rewrites rather than duplicates. Use
`semantics: {state: exactly_once, output: at_least_once}` so pending records and offsets move together.

    archiver:
      class: processors.archiver:Archiver
      inputs: [events]
      semantics: {state: exactly_once, output: at_least_once}
      config: {path: ./.stylus/archive, flush_records: 100000}   # or hdfs://namenode:9870/archive
"""

from __future__ import annotations

import base64
from typing import Any

from stylus import Context, Processor, Record
from stylus.archive import DEFAULT_ROOT, date_of, write_segment
from stylus.core.message import RawMessage

_PREFIX = "r"


class _Pending:
    __slots__ = ("date", "entries", "next_offset")

    def __init__(self) -> None:
        self.entries: list[tuple[int, list[Any]]] = []  # (offset, [ts, key, value_b64, headers])
        self.date: str | None = None
        self.next_offset = -1


class Archiver(Processor):
    raw_input = True  # values arrive as the bytes on the topic

    def setup(self, ctx: Context) -> None:
        self.root = str(self.config.get("path", DEFAULT_ROOT))
        self.flush_records = int(self.config.get("flush_records", 100_000))
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.states: dict[tuple[str, int], Any] = {}
        self.files_written = 0

    def _load(self, ident: tuple[str, int], state: Any) -> _Pending:
        """Pending records from the state (after a restart or a rebalance), in offset order."""
        pending = _Pending()
        scan = getattr(state, "scan_prefix", None)
        found = scan(_PREFIX) if scan is not None else [(k, v) for k, v in state.items() if k.startswith(_PREFIX)]
        for key, entry in found:
            pending.entries.append((int(key[1:]), entry))
        pending.entries.sort(key=lambda e: e[0])
        if pending.entries:
            pending.date = date_of(pending.entries[0][1][0])
            pending.next_offset = pending.entries[-1][0] + 1
        self.pending[ident] = pending
        return pending

    def process(self, record: Record, ctx: Context) -> None:
        ident = (record.topic, record.partition)
        pending = self.pending.get(ident)
        if pending is None or record.offset != pending.next_offset or self.states.get(ident) is not ctx.state:
            pending = self._load(ident, ctx.state)  # first record, or a jump: the state is the truth
            self.states[ident] = ctx.state
        date = date_of(record.timestamp)
        if pending.entries and date != pending.date:
            self._flush(ident, pending, ctx.state)
        value = record.value
        entry = [record.timestamp, record.key,
                 None if value is None else base64.b64encode(value).decode("ascii"),
                 [[k, base64.b64encode(v if isinstance(v, bytes) else str(v).encode()).decode("ascii")]
                  for k, v in record.headers.items()] or None]
        ctx.state[f"{_PREFIX}{record.offset:020d}"] = entry
        pending.entries.append((record.offset, entry))
        pending.date = date
        pending.next_offset = record.offset + 1
        if len(pending.entries) >= self.flush_records:
            self._flush(ident, pending, ctx.state)

    def _flush(self, ident: tuple[str, int], pending: _Pending, state: Any | None) -> None:
        topic, partition = ident
        msgs = [RawMessage(topic, partition, offset, None if key is None else key.encode("utf-8", "surrogateescape"),
                           None if value is None else base64.b64decode(value), ts,
                           [(k, base64.b64decode(v)) for k, v in headers] if headers else None)
                for offset, (ts, key, value, headers) in pending.entries]
        write_segment(self.root, topic, partition, msgs)
        self.files_written += 1
        if state is not None:
            for offset, _ in pending.entries:
                del state[f"{_PREFIX}{offset:020d}"]
            pending.entries = []

    def close(self) -> None:
        """Write what is pending; it stays in the state, and the next file from it supersedes this one."""
        for ident, pending in self.pending.items():
            if pending.entries:
                self._flush(ident, pending, None)
