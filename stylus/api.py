"""The processor API (docs/reference.md, "Processor API"): `Processor`, `Record` and the `Context` it is handed."""

from __future__ import annotations

import importlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Protocol


class Record:
    """One decoded input record. Plain slots: it is built once per record on the hot path, where the engine
    sets the slots itself without this `__init__` (Engine.process_messages): keep the two in step."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(
        self,
        key: str | None,
        value: Any,
        timestamp: int,
        topic: str,
        partition: int,
        offset: int,
        headers: Mapping[str, bytes] | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.headers: Mapping[str, bytes] = headers if headers is not None else {}

    def __repr__(self) -> str:
        return (
            f"Record(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"key={self.key!r}, value={self.value!r}, timestamp={self.timestamp})"
        )


State = MutableMapping[str, Any]
"""What `ctx.state` offers: a mutable mapping scoped to the input partition (see `StateMap`)."""


class Context(Protocol):
    """What a processor may touch. Implemented by the engine; the same in streaming and backfill."""

    state: State
    watermark: int
    processor_name: str

    def emit(
        self,
        value: Any,
        key: str | None = None,
        topic: str | None = None,
        timestamp: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        partition: int | None = None,  # direct grouping: this partition, over the output's grouping
    ) -> None: ...

    def set_timer(self, key: str, timestamp: int) -> None: ...

    def table(self, name: str) -> Any:
        """A table declared under `tables:` (docs/tables.md); `.get(key, default=None)` looks a key up."""
        ...

    def defer(self, work: Awaitable[Any], then: Callable[[Any, Any], None] | None = None) -> None:
        """Slow I/O on the record's behalf (docs/acker.md): `work` (a coroutine, task or future) is one more
        unit of the record's work, which is complete only once it is done and `then(result, ctx)` (if given)
        has run on the record's context. With `concurrency`, it overlaps other records' work; elsewhere it
        runs to its end in order."""
        ...


class Processor(ABC):
    """Subclass and implement `process`. Must be deterministic for a given input order."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        self.config: Mapping[str, Any] = dict(config or {})
        self.name = name or type(self).__name__

    def setup(self, ctx: Context) -> None:  # noqa: B027 - optional hook
        """Called once before the first record, with the context."""

    @abstractmethod
    def process(self, record: Record, ctx: Context) -> Awaitable[None] | None:
        """Handle one record: read and write `ctx.state`, call `ctx.emit`. May be an `async def`: with
        `concurrency: N`, up to N records of a partition are then worked on at once (docs/acker.md)."""

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:  # noqa: B027 - optional hook
        """Called once the input's low watermark passes a timer set with `ctx.set_timer`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called on shutdown, after the final checkpoint."""


class BatchContext(Context, Protocol):
    """What a batch processor may touch besides `Context` (docs/batch.md). `state` also has `get_many(keys)`
    and `set_many(mapping)`, and for values that are lists of one length `get_columns(keys, default)` and
    `set_columns(keys, *columns)`."""

    state: Any  # `State`, plus `get_many`/`set_many` and `get_columns`/`set_columns` (docs/batch.md)
    event_times: Any  # the batch's event times (a pyarrow Int64Array, one per row), while `process_batch` runs

    @property
    def values(self) -> list[Any]:
        """The batch's values as decoded, one per row (their exact Python types), while `process_batch` runs."""
        ...

    @property
    def topic(self) -> str | None:
        """The input topic of the batch (or timer) in progress."""
        ...

    @property
    def partition(self) -> int | None:
        """The input partition of the batch (or timer) in progress."""
        ...

    def emit_batch(self, table: Any, key: Any = None, topic: str | None = None, timestamp: Any = None) -> None:
        """One output record per row of `table` (a pyarrow Table or RecordBatch): the JSON object of its value
        columns, encoded column-wise."""
        ...

    def forward(self, rows: Any, topic: str | None = None) -> None:
        """The input records of `rows` (rows of the batch: its `offset` column), emitted unchanged: their value
        bytes as read, their key and timestamp."""
        ...


class BatchProcessor(Processor):
    """Subclass and implement `process_batch`: the columnar path (docs/batch.md). Consecutive records of one
    input partition arrive as a `pyarrow.RecordBatch`; outputs leave as columns (`ctx.emit_batch`) or as the
    input records unchanged (`ctx.forward`). The worker runs it on the batch engine; it needs the `batch` extra.
    Must be deterministic in its state and output for a given input order, whatever the batch boundaries."""

    #: the top-level JSON fields to decode into columns; None: every field (narrowing it saves decoding)
    fields: tuple[str, ...] | None = None

    @abstractmethod
    def process_batch(self, batch: Any, ctx: BatchContext) -> None:
        """Handle a batch: read and write `ctx.state` (in bulk: `get_many`/`set_many`,
        `get_columns`/`set_columns`), emit with `ctx.emit_batch` / `ctx.forward`. A batch that raises is undone
        and split to find the records that fail (`on_error` takes those), the others processed once."""

    def process(self, record: Record, ctx: Context) -> None:
        """Never called. (`on_timer(key, timestamp, ctx)` is, with a `BatchContext` as `ctx`.)"""
        raise TypeError(f"{type(self).__name__} is a BatchProcessor: the batch engine calls `process_batch`, "
                        "never `process` (stylus.core.engines.engine_for)")


class ProcessorImportError(ImportError):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def import_processor_class(path: str | None) -> type[Processor]:
    """Import `module:Class` and check that it is a Processor. Only this configured path is imported."""
    if path is None:  # a `command:` processor: run by stylus/runtime/executable.py, never imported
        raise ProcessorImportError("this processor is an executable (`command:`), not a Python class; only "
                                   "Python processors run here", "use a `class:` processor for this feature")
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise ProcessorImportError(f"`{path}` is not `module:Class`", "write it as `package.module:ClassName`")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    from stylus.extras import MissingExtra, extra_for

    try:
        module = importlib.import_module(module_name)
    except MissingExtra as exc:
        raise ProcessorImportError(f"module `{module_name}` cannot be imported: {exc.needs}", exc.fix) from exc
    except ModuleNotFoundError as exc:
        extra = extra_for(exc.name) if exc.name != module_name else None
        raise ProcessorImportError(
            f"module `{module_name}` cannot be imported ({exc})",
            f"pip install 'stylus[{extra}]'" if extra else
            "check the module path, and that it is installed or under the current directory",
        ) from exc
    except Exception as exc:
        raise ProcessorImportError(
            f"importing `{module_name}` failed: {type(exc).__name__}: {exc}", "fix the error in that module"
        ) from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Processor))
        raise ProcessorImportError(
            f"module `{module_name}` has no `{class_name}`",
            f"use one of its processors: {', '.join(names) or '(none)'}",
        )
    if not (isinstance(cls, type) and issubclass(cls, Processor)) or cls is Processor:
        raise ProcessorImportError(
            f"`{path}` is not a Processor subclass", "subclass `stylus.Processor` and implement `process`"
        )
    return cls
