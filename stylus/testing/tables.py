"""`ctx.table(name)` inside the TestDriver: tables folded from the driver's in-memory topics.

Before a stage processes what it can read, its tables apply every record of their topics that a
`read_committed` reader sees (stopping at output still held or in an open transaction): the runtime's
"caught up" (docs/tables.md), with the same stores, codec and lookups as production, over memory.
A crash keeps the tables, as a restarted worker keeps its RocksDB copies.
"""

from __future__ import annotations

from stylus.config.model import Pipeline
from stylus.config.tables import parquet_path
from stylus.state.kv import MemoryKV
from stylus.tables.parquet import prepared
from stylus.tables.registry import OpenTable, ProcessorTables, TableView, TableViews
from stylus.tables.store import Codec, TableStore
from stylus.testing.topics import Status, Topics


class DriverTables(ProcessorTables, TableViews):
    def __init__(self, pipeline: Pipeline, processor: str, topics: Topics) -> None:
        super().__init__(pipeline, processor)
        self.topics = topics
        self.tables: dict[str, OpenTable] = {}
        self.views: dict[str, TableView] = {}

    def open(self, name: str) -> OpenTable:
        table = self.tables.get(name)
        if table is None:
            spec, topic = self.declared(name)
            table = OpenTable(name, spec, Codec(spec, topic.serde), topic.partitions)
            path = parquet_path(self.pipeline, spec)
            if spec.placement == "global":
                table.whole = prepared(TableStore(MemoryKV()), table.codec, path, lambda key: True)
            else:
                table.stores = {p: prepared(TableStore(MemoryKV()), table.codec, path, table.keep_partition(p))
                                for p in range(table.partitions)}
            self.tables[name] = table
            self._fold(table)
        return table

    def refresh(self) -> None:
        """Apply what became visible on the tables' topics since the last refresh."""
        for table in self.tables.values():
            self._fold(table)

    def _fold(self, table: OpenTable) -> None:
        for partition in range(table.partitions):
            store = table.store_for(partition)
            assert store is not None
            start = store.offset(partition) or 0
            entries: dict[bytes, bytes | None] = {}
            end = start
            for entry in self.topics.partition_log(table.topic, partition)[start:]:
                if entry.status in (Status.HELD, Status.OPEN):  # not visible yet: the table waits for it
                    break
                end = entry.offset + 1
                if entry.status is Status.GONE or entry.control:
                    continue
                change = table.codec.entry(entry.key, entry.value, entry.timestamp)
                if change is not None:
                    entries[change[0]] = change[1]
            if end != start:
                store.apply(entries, {partition: end})
