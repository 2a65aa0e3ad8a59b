"""What one Spark task runs: read a unit's records in offset order and hand them to the very same
`stylus.core.Engine` the stream uses (same `process`, same `on_timer` fired from the watermark after
each batch, as `stylus.runtime.worker` does), with in-memory state per input partition."""

from __future__ import annotations

import gc
import heapq
import os
import sys
import time
from collections.abc import Iterator
from itertools import islice
from typing import Any, Literal

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from stylus.api import import_processor_class
from stylus.archive import SegmentSlice
from stylus.backfill.outputs import OutputTarget, TaskOutput, TopicOutput, open_output
from stylus.backfill.plan import Unit
from stylus.backfill.read import KafkaRange, open_unit, read_unit_batches
from stylus.config.model import Pipeline
from stylus.core.engine import RaiseFailures
from stylus.core.engines import engine_for
from stylus.core.task import PartitionTask
from stylus.eventtime.control import WatermarkPublisher
from stylus.kafka.settings import remember_connection
from stylus.state.kv import MemoryKV
from stylus.state.memory import MemoryState
from stylus.state.store import PartitionStore
from stylus.tables.history import history_tables

RESULT_SCHEMA = pa.schema([
    ("kind", pa.string()),  # out | state | done
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("timestamp", pa.int64()),
    ("n", pa.int64()),
])
ROWS_PER_BATCH = 20_000
READ_BATCH = 10_000  # records per engine call when no timers depend on the batch size


class JobSpec(BaseModel):
    """Everything a task needs, shipped as JSON (no pickled data)."""

    model_config = ConfigDict(frozen=True)
    pipeline: dict[str, Any]
    processor: str
    bootstrap: str
    archive_root: str | None
    output: OutputTarget
    mode: Literal["records", "monoid", "batch"] = "records"
    return_state: bool = False
    sys_path: tuple[str, ...] = ()

    def load_pipeline(self) -> Pipeline:
        """The pipeline, in a Spark task: its SASL/SSL settings then reach the task's helper clients too."""
        pipeline = Pipeline.model_validate(self.pipeline)
        remember_connection(self.bootstrap, pipeline)
        return pipeline


def _batched(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while True:
        batch = list(islice(it, size))
        if not batch:
            return
        yield batch


class UnitRun:
    """Runs one unit; `rows()` yields the result batches (outputs to collect, state, a summary)."""

    def __init__(self, job: JobSpec, unit: Unit, opened: KafkaRange | None = None,
                 previous: TaskOutput | None = None) -> None:
        for path in job.sys_path:
            if path not in sys.path:
                sys.path.append(path)
        self.job = job
        self.unit = unit
        self.opened = opened  # the first chunk's reader, opened ahead by the task (see run_units)
        self.pipeline = job.load_pipeline()
        self.spec = self.pipeline.processors[job.processor]
        cls = import_processor_class(self.spec.class_)
        self.processor = cls(config=self.spec.config, name=job.processor)
        self.output = open_output(job.output, self.pipeline, job.processor, job.bootstrap, unit.index, previous)
        self.engine = engine_for(self.processor, job.processor, self.spec, self.pipeline, self.output, RaiseFailures())
        self.engine.atomic = False  # any failure fails the task: no per-record journal or held emits needed
        # `ctx.table`: each key's versions, looked up as of the record's time (docs/tables.md, "Backfill")
        self.engine.tables = history_tables(self.pipeline, job.processor, job.bootstrap)
        self.marks = self._publisher(unit)
        self.keep_state = self.spec.stateful or job.mode == "monoid"
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.read = 0
        self.started = time.time()
        self.closed: float | None = None
        self.first: float | None = None  # wall clock of the first and last record processed (benchmarks)
        self.last: float | None = None

    def _task_for(self, topic: str, partition: int) -> PartitionTask:
        task = self.tasks.get((topic, partition))
        if task is None:
            # a dict as `ctx.state`: this engine's failures end the task, and the state is saved once
            store = PartitionStore(MemoryKV(), state=MemoryState()) if self.keep_state else None
            task = self.tasks[(topic, partition)] = PartitionTask(topic, partition, store)
        return task

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Process the unit, then the result rows (RESULT_SCHEMA order): outputs to collect, state, summary."""
        unit, job = self.unit, self.job
        output = self.output
        engine = self.engine
        engine.start()
        task = self._task_for(unit.topic, unit.partition)
        collecting = gc.isenabled()
        if collecting and os.environ.get("STYLUS_BACKFILL_GC") != "1":
            # the cyclic GC would mostly re-scan consumed messages (tracked objects, thousands per fetch);
            # the engine makes no cycles, so collect once at the end instead
            gc.disable()
        try:
            # timers fire after each batch of `batch_size` records, as the stream's consume loop does;
            # without timers the batch size is only overhead, so read in bigger lists
            size = self.spec.batch_size if engine.track_time else max(self.spec.batch_size, READ_BATCH)
            # a batch processor takes archive records as columns, with no object per record
            columns = hasattr(engine, "process_run") and engine.dedup is None
            for batch in read_unit_batches(unit, job.bootstrap, job.archive_root, size, self.opened,
                                           columns=columns):
                if self.first is None:
                    self.first = time.time()
                source = batch.source() if isinstance(batch, SegmentSlice) else None
                if source is not None:
                    from stylus.core.batch.columns import Run  # the batch extra: only batch processors get here

                    keys, values, stamps, headers = batch.columns()
                    run = Run.of_columns(*source, batch.offsets, keys, values, stamps, headers)
                    self.read += engine.process_run(run, self._task_for)  # type: ignore[attr-defined]
                else:
                    if isinstance(batch, SegmentSlice):  # rows of several partitions: each as its own message
                        batch = batch.messages()
                    self.read += engine.process_messages(batch, self._task_for)  # control records not counted
                output.serve()
                if engine.track_time:
                    # the stream's own estimator (upstream control records, lateness, floors), never idle:
                    # `at_eof` stays False, as for a stream that has not yet waited out `idle_timeout`
                    engine.advance_time(self.tasks.values())
                    if self.marks is not None:  # behind the outputs it covers, through the same producer
                        self.marks.maybe_publish(engine.watermark, self.tasks)
            self.last = time.time()
            self._check_state_keys()
            output.close()
            self.closed = time.time()
        finally:
            self.processor.close()
            if collecting and not gc.isenabled():
                gc.enable()
        task.next_offset = unit.next_offset
        yield from self._rows(output.collected, output.counts)

    def _publisher(self, unit: Unit) -> WatermarkPublisher | None:
        """With `OutputTarget.marks`: the task's watermark, published to its output topics as a streaming
        instance publishes it (every change, each mark naming the unit's input partition)."""
        if not self.job.output.marks:
            return None
        if not isinstance(self.output, TopicOutput):
            raise ValueError("watermark marks are written to topics: use an output of kind `outputs` or `topic`")
        self.engine.track_time = True  # a downstream stage needs this stage's event-time progress
        return WatermarkPublisher(self.pipeline, self.job.processor, f"backfill-{unit.index}", self.output.producer,
                                  interval=0.0)

    def _check_state_keys(self) -> None:
        """A key the stream's state refuses at the write (not a str) fails the task with that error; a task's
        MemoryState takes any key, so it is checked once the unit is done (stylus/state/memory.py)."""
        for partition_task in self.tasks.values():
            if isinstance(partition_task.state, MemoryState):
                try:
                    partition_task.state.check_keys()
                except TypeError as exc:
                    raise TypeError(f"processor `{self.job.processor}`, state of {partition_task.topic}"
                                    f"[{partition_task.partition}]: {exc}") from exc

    def _rows(self, collected: list[tuple[str, str | None, bytes, int]],
              counts: dict[str, int]) -> Iterator[tuple[Any, ...]]:
        unit = self.unit
        for topic, key, value, ts in collected:
            yield ("out", topic, unit.partition, None if key is None else key.encode("utf-8", "surrogateescape"),
                   value, ts, unit.index)
        if self.job.return_state or self.job.mode == "monoid":
            for task in self.tasks.values():
                if task.store is None:
                    continue
                task.store.save(task.next_offset)
                kv = task.store.kv
                assert isinstance(kv, MemoryKV)
                order = unit.chunks[0].start if unit.chunks else 0
                for raw_key, raw_value in sorted(kv.data.items()):
                    if self.job.mode == "monoid" and not raw_key.startswith(b"s"):
                        continue  # offsets come from the plan; the reduce only merges user state
                    yield ("state", task.topic, task.partition, raw_key, raw_value, 0, order)
        summary = {"read": self.read, "outputs": dict(counts), "next_offset": unit.next_offset,
                   "started": self.started, "first": self.first, "last": self.last, "closed": self.closed}
        yield ("done", unit.topic, unit.partition, None, orjson.dumps(summary), 0, unit.index)


def _rows_batches(rows: Iterator[tuple[Any, ...]]) -> Iterator[pa.RecordBatch]:
    names = RESULT_SCHEMA.names
    for chunk in _batched(rows, ROWS_PER_BATCH):
        columns = list(zip(*chunk, strict=True))
        yield pa.RecordBatch.from_arrays([pa.array(col, type=RESULT_SCHEMA.field(i).type)
                                          for i, col in enumerate(columns)], names=names)


def run_slot(job: JobSpec, units_json: list[str], indexes: list[int]) -> Iterator[tuple[Any, ...]]:
    """Run a slot's units one after the other, yielding their result rows. While a unit runs, the next
    one's first Kafka chunk is already being fetched (`open_unit`): no idle gap between the units of a task."""
    units = [Unit.model_validate_json(units_json[i]) for i in indexes]
    opened = open_unit(units[0], job.bootstrap) if units else None
    output: TaskOutput | None = None  # the previous unit's: the next one shares its producer
    try:
        for k, unit in enumerate(units):
            current = opened
            opened = open_unit(units[k + 1], job.bootstrap) if k + 1 < len(units) else None
            run = UnitRun(job, unit, current, output)
            yield from run.rows()
            output = run.output
        # Delivery is awaited once, here: a unit's records go on being delivered while the next one runs
        # (waiting after each unit would leave the task idle while the broker acknowledges).
        # The task ends only after this wait, so a delivery failure still fails it (and Spark retries it).
        if output is not None:
            output.wait()
    finally:
        if opened is not None:
            opened.close()


def run_units(job_json: str, units_json: list[str], slots: list[list[int]],
              batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body (the monoid path, whose results go on to a shuffle): the input rows are slot numbers
    (`spark.range`, one per Spark partition), a slot is a list of unit indexes (`run_slot`)."""
    job = JobSpec.model_validate_json(job_json)
    for batch in batches:
        for slot in batch.column(0).to_pylist():
            yield from _rows_batches(run_slot(job, units_json, slots[slot]))


def run_slots_rows(job_json: str, units_json: list[str], slots: list[list[int]],
                   numbers: Iterator[int]) -> Iterator[tuple[Any, ...]]:
    """RDD `mapPartitions` body (records mode): the same slots, the result rows as plain tuples (PySpark
    pickles them in batches). A plain RDD job, not a DataFrame one: no Catalyst planning, code generation
    or Arrow exchange on the JVM (which make the first DataFrame job of a session slow to start), and no
    `pa.array` in the worker (the first one of a process imports pandas)."""
    job = JobSpec.model_validate_json(job_json)
    for slot in numbers:
        yield from run_slot(job, units_json, slots[slot])


def assign_slots(sizes: list[int], slots: int) -> list[list[int]]:
    """Units (by planned size) into `slots` lists of about equal work, largest first (LPT); each list
    in unit order. One Spark task per slot: per-task start-up is paid once per core, not once per unit."""
    loads = [(0, s) for s in range(max(1, min(slots, len(sizes))))]
    out: list[list[int]] = [[] for _ in loads]
    heapq.heapify(loads)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, slot = heapq.heappop(loads)
        out[slot].append(index)
        heapq.heappush(loads, (load + sizes[index], slot))
    return [sorted(units) for units in out if units]


def combine_states(job_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the monoid reduce: rows arrive sorted by (topic, partition, key, chunk start);
    equal keys are folded with the processor's own `combine`, in chunk order. Other rows pass through."""
    job = JobSpec.model_validate_json(job_json)
    for path in job.sys_path:
        if path not in sys.path:
            sys.path.append(path)
    pipeline = job.load_pipeline()
    spec = pipeline.processors[job.processor]
    processor: Any = import_processor_class(spec.class_)(config=spec.config, name=job.processor)
    combine = processor.combine

    def rows() -> Iterator[tuple[Any, ...]]:
        current: tuple[str, int, bytes] | None = None
        value: Any = None
        for batch in batches:
            cols = batch.to_pydict()
            for i in range(batch.num_rows):
                if cols["kind"][i] != "state":
                    yield tuple(cols[name][i] for name in RESULT_SCHEMA.names)
                    continue
                ident = (cols["topic"][i], cols["partition"][i], cols["key"][i])
                delta = orjson.loads(cols["value"][i])
                if ident == current:
                    value = combine(value, delta)
                    continue
                if current is not None:
                    yield ("state", current[0], current[1], current[2], orjson.dumps(value), 0, 0)
                current, value = ident, delta
        if current is not None:
            yield ("state", current[0], current[1], current[2], orjson.dumps(value), 0, 0)

    yield from _rows_batches(rows())
