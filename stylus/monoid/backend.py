"""The worker's seam for remote monoid state: `remote_state_for(...)` gives a backend (or None for the
local RocksDB default) whose `open(topic, partition)` returns a PartitionStore look-alike. Its resume
offset comes from the database's offsets table; its `save` merges deltas + offsets in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from stylus.api import Processor
from stylus.config.model import Pipeline
from stylus.config.secrets import reveal
from stylus.extras import require
from stylus.monoid.processor import MonoidProcessor
from stylus.monoid.state import DeltaState
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore, Timers

if TYPE_CHECKING:  # psycopg is the `postgres` extra: imported only when a processor uses that backend
    from stylus.monoid.pg import Db, MonoidTable


class NoTimers(Timers):
    """Timers are not part of remote monoid state; asking for one is a configuration error."""

    def add(self, key: str, timestamp: int) -> None:
        raise RuntimeError("timers need the rocksdb state backend; monoid processors with "
                           "`backend: postgres` cannot set them")


class RemotePartitionStore(PartitionStore):
    """One input partition's view of the processor's table: pending deltas and its offset."""

    def __init__(self, table: MonoidTable, group: str, topic: str, partition: int, backend: PostgresBackend) -> None:
        # No local KV: MemoryKV only keeps PartitionStore's metadata accessors harmless.
        self.kv = MemoryKV()
        self.timers = NoTimers(self.kv)
        self.table = table
        self.group, self.topic, self.partition = group, topic, partition
        self.deltas = DeltaState(table, table.zero, table.combine)
        self.state = self.deltas
        self._offset = table.stored_offset(group, topic, partition)
        self._backend = backend
        self._closed = False

    def stored_offset(self) -> int | None:
        return self._offset

    def save(self, offset: int | None = None, *, state: bool = True) -> None:
        deltas = self.deltas.pending if state else {}
        target = self._offset if offset is None else offset
        if not deltas and target == self._offset:
            return  # nothing to write: an idle partition costs no transaction
        self.table.save(self.group, self.topic, self.partition, expected=self._offset, offset=target, deltas=deltas)
        self._offset = target
        if state:
            self.deltas.mark_clean()

    def prepare_save(self, offset: int | None = None, *, state: bool = True) -> Callable[[], None]:
        """The save, for the checkpoint to run at its step: a database transaction of state and offsets, which
        like a RocksDB write waits for the steps its ordering puts first (the flush of at-least-once output).
        Remote state checkpoints inline (never overlapped), so no record changes the deltas in between."""
        return partial(self.save, offset, state=state)

    def state_changes(self) -> dict[bytes, bytes | None]:
        raise RuntimeError("remote monoid state is saved by `save`, not as local KV changes")

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        raise RuntimeError("remote monoid state is saved by `save`, not as local KV changes")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._backend.release()


class PostgresBackend:
    """Per worker (one thread): one connection shared by its partitions' stores, opened on the first
    assignment and closed when the last store closes."""

    def __init__(self, pipeline: Pipeline, name: str, processor: MonoidProcessor) -> None:
        require("postgres", f"processor `{name}` (state backend `postgres`)")
        from stylus.monoid.pg import default_table

        spec = pipeline.processors[name]
        assert spec.state.dsn is not None  # the config model requires it for `postgres`
        self.dsn = reveal(spec.state.dsn)  # libpq gets the real text; the model holds it as a Secret
        self.group = pipeline.group_id(name)
        self.table_name = spec.state.table or default_table(pipeline.pipeline, name)
        self.processor = processor
        self.db: Db | None = None
        self.table: MonoidTable | None = None
        self._open = 0

    def open(self, topic: str, partition: int) -> PartitionStore:
        if self.db is None or self.table is None:
            from stylus.monoid.pg import Db, MonoidTable

            self.db = Db(self.dsn)
            p = self.processor
            self.table = MonoidTable(self.db, self.table_name, p.zero, p.combine, p.sql_combiner)
            self.table.create()
        store = RemotePartitionStore(self.table, self.group, topic, partition, self)
        self._open += 1
        return store

    def release(self) -> None:
        self._open -= 1
        if self._open <= 0 and self.db is not None:
            self.db.close()
            self.db = self.table = None
            self._open = 0


def remote_state_for(pipeline: Pipeline, name: str, processor: Processor) -> PostgresBackend | None:
    """The remote backend a stateful processor's spec asks for, or None for local RocksDB state."""
    spec = pipeline.processors[name]
    if not spec.stateful or spec.state.backend != "postgres":
        return None
    if not isinstance(processor, MonoidProcessor):
        raise TypeError(f"processor `{name}`: state backend `postgres` needs a MonoidProcessor subclass, "
                        f"not {type(processor).__name__}")
    return PostgresBackend(pipeline, name, processor)


def check_backend_class(spec_backend: str, cls: type[Any]) -> str | None:
    """Validation: the problem with using `cls` on `spec_backend`, or None."""
    if spec_backend == "postgres" and not (isinstance(cls, type) and issubclass(cls, MonoidProcessor)):
        return (f"`{cls.__name__}` is not a MonoidProcessor; state backend `postgres` stores only monoid "
                "state (zero/combine/map)")
    return None
