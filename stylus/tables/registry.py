"""The tables one worker looks up (`ctx.table(name)`), kept caught up with its input partitions.

- A *global* table: the worker holds a copy of every partition of its topic.
- A *partitioned* table: the worker holds the table partitions numbered as the input partitions it holds
  (the topics are co-partitioned), opened when they are assigned, closed when revoked; the copy stays on
  disk, so a partition that comes back catches up from where its copy ends.

Caught up (docs/tables.md): when input partitions are assigned, the end (last stable offset) of every table
partition they need is read, and every record below it is applied before the assignment completes, so no
input record of theirs reaches the processor before. Afterwards the worker's loop applies what arrives
(`poll`), on its own thread: no thread of ours, no queue between threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import murmur2

from stylus.config.model import Pipeline, TableSpec, TopicSpec
from stylus.config.tables import parquet_path, tables_for
from stylus.serde import encode_key
from stylus.tables.follower import Followed, Follower
from stylus.tables.parquet import prepared
from stylus.tables.store import Codec, TableStore, open_store

log = logging.getLogger(__name__)

TP = tuple[str, int]


@dataclass
class OpenTable:
    """A table as one owner holds it: one copy for a global table, one per held partition otherwise."""

    name: str
    spec: TableSpec
    codec: Codec
    partitions: int
    whole: TableStore | None = None  # global placement
    stores: dict[int, TableStore] = field(default_factory=dict)  # partitioned placement: partition -> copy

    @property
    def topic(self) -> str:
        return self.spec.topic

    def store_for(self, partition: int) -> TableStore | None:
        return self.whole if self.whole is not None else self.stores.get(partition)

    def keep_partition(self, partition: int) -> Any:
        """The bulk-load filter of a partition's copy: the keys the Java partitioner puts there."""
        return lambda key: int(murmur2(key, self.partitions)) == partition


class ProcessorTables:
    """The tables one processor may look up, each opened on its first lookup: what the TestDriver's
    (stylus/testing/tables.py) and a backfill task's (stylus/tables/history.py) share."""

    def __init__(self, pipeline: Pipeline, processor: str) -> None:
        self.pipeline = pipeline
        self.processor = processor
        self.allowed = tables_for(pipeline, processor)

    def declared(self, name: str) -> tuple[TableSpec, TopicSpec]:
        """Table `name`'s spec and its topic's, refused unless the processor may read it."""
        if name not in self.allowed:
            raise LookupError(f"processor `{self.processor}` cannot read table `{name}`; it may read "
                              f"{self.allowed or 'none'} (docs/tables.md)")
        spec = self.pipeline.tables[name]
        return spec, self.pipeline.topics[spec.topic]


class TableViews:
    """`ctx.table(name)`'s handles over `open(name)`'s `OpenTable`s: the worker's registry's and the TestDriver's."""

    views: dict[str, TableView]

    def open(self, name: str) -> OpenTable:
        raise NotImplementedError

    def view(self, name: str, ctx: Any) -> TableView:
        """`ctx.table(name)`: the lookup handle, opened (and caught up) on first use."""
        view = self.views.get(name)
        if view is None or view._ctx is not ctx:  # one per context (a restarted engine has a new one)
            view = self.views[name] = TableView(self.open(name), ctx)
        return view

    def view_at(self, name: str, partition: int, timestamp: int) -> FixedView:
        """A lookup handle fixed at one record's partition and timestamp."""
        return FixedView(self.open(name), partition, timestamp)


class TableRegistry(TableViews):
    def __init__(self, pipeline: Pipeline, names: Iterable[str], directory: Path, consumer_config: dict[str, Any],
                 *, owner: str, by_topic: bool = False) -> None:
        """`names`: the tables this owner may look up; `directory`: where their copies live. A worker holds the
        partitioned tables' partitions numbered as its input partitions; with `by_topic` (a serving instance,
        assigned the tables' own topics) it holds exactly the (table topic, partition) pairs assigned."""
        self.pipeline = pipeline
        self.allowed = list(names)
        self.directory = directory
        self.owner = owner  # for messages: the processor's name, or `serve`
        self.by_topic = by_topic
        self._consumer_config = consumer_config
        self._follower: Follower | None = None  # made at the first table opened: none for a worker that never looks up
        self.tables: dict[str, OpenTable] = {}
        self.held: set[TP] = set()  # input partitions held
        self.views: dict[str, TableView] = {}
        self.last_catch_up: tuple[int, float] = (0, 0.0)  # (records applied, seconds) of the latest catch-up

    @property
    def follower(self) -> Follower:
        if self._follower is None:
            self._follower = Follower(self._consumer_config)
        return self._follower

    @classmethod
    def for_worker(cls, pipeline: Pipeline, name: str, bootstrap: str) -> TableRegistry | None:
        """The registry of processor `name`'s worker; None when it has no table to look up."""
        from stylus.kafka.settings import client_config

        names = tables_for(pipeline, name)
        if not names:
            return None
        spec = pipeline.processors[name]
        registry = cls(pipeline, names, Path(spec.state.dir) / pipeline.pipeline / name / "tables",
                       client_config("consumer", bootstrap, pipeline, name), owner=name)
        for table in spec.tables or ():  # listed: loaded before the first record; global ones right now
            registry.open(table)
        return registry

    # ---------------------------------------------------------------- opening and catching up
    def open(self, name: str) -> OpenTable:
        """The table, opened and caught up to its end now when it was not open yet."""
        table = self.tables.get(name)
        if table is not None:
            return table
        if name not in self.allowed:
            raise LookupError(self._unknown(name))
        spec = self.pipeline.tables[name]
        topic = self.pipeline.topics[spec.topic]
        table = OpenTable(name, spec, Codec(spec, topic.serde), topic.partitions)
        self.tables[name] = table
        if spec.placement == "global":
            table.whole = prepared(open_store(self.directory / name), table.codec,
                                   parquet_path(self.pipeline, spec), lambda key: True)
            for partition in range(table.partitions):
                self.follower.add(spec.topic, partition, Followed(table.whole, table.codec, name,
                                                                   on_reset=self._replace_whole(table)))
        else:
            for partition in self._numbers(table, self.held):
                self._open_partition(table, partition)
        self._catch_up(self._parts(table, None))
        return table

    def _open_partition(self, table: OpenTable, partition: int) -> None:
        if partition in table.stores:
            return
        if partition >= table.partitions:
            raise LookupError(f"table `{table.name}` has {table.partitions} partitions, but `{self.owner}` holds "
                              f"input partition {partition}: the table is not co-partitioned with its input; "
                              f"fix: give `{table.topic}` the input's partitions, or use `placement: global`")
        store = prepared(open_store(self.directory / f"{table.name}-{partition}"), table.codec,
                         parquet_path(self.pipeline, table.spec), table.keep_partition(partition))
        table.stores[partition] = store

        def replaced(new: TableStore) -> None:
            table.stores[partition] = new

        self.follower.add(table.topic, partition, Followed(store, table.codec, table.name, on_reset=replaced))

    @staticmethod
    def _replace_whole(table: OpenTable) -> Any:
        def replaced(new: TableStore) -> None:
            table.whole = new

        return replaced

    def _numbers(self, table: OpenTable, held: Iterable[TP]) -> set[int]:
        """The partitions of a partitioned table that go with the held input (or, `by_topic`, table) partitions."""
        return {p for topic, p in held if not self.by_topic or topic == table.topic}

    def _parts(self, table: OpenTable, numbers: set[int] | None) -> list[TP]:
        """The table partitions to catch up: all of a global table, the held (or `numbers`) of a partitioned."""
        if table.whole is not None:
            return [(table.topic, p) for p in range(table.partitions)]
        return [(table.topic, p) for p in sorted(table.stores) if numbers is None or p in numbers]

    def _catch_up(self, parts: list[TP]) -> None:
        if not parts:
            return
        started = time.monotonic()
        before = sum(f.applied for f in self.follower.parts.values())
        self.follower.catch_up(parts)
        applied = sum(f.applied for f in self.follower.parts.values()) - before
        seconds = time.monotonic() - started
        self.last_catch_up = (applied, seconds)
        log.info("%s: tables caught up (%d partitions, %d records applied) in %.3fs", self.owner, len(parts),
                 applied, seconds)

    # ---------------------------------------------------------------- the owner's assignment
    def assigned(self, partitions: Iterable[TP]) -> None:
        """Input partitions assigned: the table partitions they need are opened and caught up to their end
        now, before the assignment completes (the worker's on_assign hook)."""
        new = set(partitions) - self.held
        self.held |= new
        parts: list[TP] = []
        for table in self.tables.values():
            numbers = self._numbers(table, new)
            if table.whole is None:
                for partition in sorted(numbers):
                    self._open_partition(table, partition)
            parts += self._parts(table, numbers)
        self._catch_up(parts)

    def revoked(self, partitions: Iterable[TP]) -> None:
        """Input partitions revoked or lost: the partitioned tables' copies of those numbers are closed (and
        kept on disk for their return)."""
        self.held -= set(partitions)
        for table in self.tables.values():
            numbers = self._numbers(table, self.held)
            for partition in [p for p in table.stores if p not in numbers]:
                self.follower.remove(table.topic, partition)
                table.stores.pop(partition).close()

    def poll(self) -> int:
        """Apply what arrived on the followed table partitions (the worker loop, between batches)."""
        return self.follower.poll(0.0) if self.tables else 0

    # ---------------------------------------------------------------- lookups (`view`, `view_at`: TableViews)
    def _unknown(self, name: str) -> str:
        if name not in self.pipeline.tables:
            return (f"no table `{name}` under `tables:`; declared: {', '.join(sorted(self.pipeline.tables)) or 'none'}")
        return (f"processor `{self.owner}` does not read table `{name}`: list it under `tables:` of the processor "
                "(a partitioned table must have as many partitions as the processor's inputs)")

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
        for table in self.tables.values():
            if table.whole is not None:
                table.whole.close()
            for store in table.stores.values():
                store.close()
        self.tables.clear()


class TableView:
    """What `ctx.table(name)` returns: `get(key)` reads the table as this worker has applied it, in the
    partition of the record being processed (partitioned placement). An entry older than the table's `ttl`,
    measured against that record's timestamp, reads as absent (a replay sees the same)."""

    __slots__ = ("_ctx", "_table")

    def __init__(self, table: OpenTable, ctx: Any) -> None:
        self._table = table
        self._ctx = ctx  # the engine's context: the record's partition (`_task`) and timestamp (`_timestamp`)

    def get(self, key: Any, default: Any = None) -> Any:
        task = self._ctx._task
        return lookup(self._table, key, None if task is None else task.partition, self._ctx._timestamp, default)

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None


class FixedView:
    """A lookup handle for one record whose context is its own (`concurrency`: stylus/core/concurrent.py)."""

    __slots__ = ("_partition", "_table", "_timestamp")

    def __init__(self, table: OpenTable, partition: int, timestamp: int) -> None:
        self._table, self._partition, self._timestamp = table, partition, timestamp

    def get(self, key: Any, default: Any = None) -> Any:
        return lookup(self._table, key, self._partition, self._timestamp, default)

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None


def lookup(table: OpenTable, key: Any, partition: int | None, now_ms: int | None, default: Any) -> Any:
    """`key` in `table`: in the copy of `partition` for a partitioned table; absent past the TTL at `now_ms`."""
    raw = encode_key(key)
    if raw is None:
        return default
    store = table.whole
    if store is None:
        if partition is None:
            raise LookupError(f"partitioned table `{table.name}` is looked up inside `process` or `on_timer` only "
                              "(it answers from the partition of the record being processed)")
        store = table.stores.get(partition)
        if store is None:
            raise LookupError(f"partitioned table `{table.name}` has no partition {partition} here")
    value = table.codec.value(store.get(raw), now_ms)
    return default if value is None else value
