"""`BatchEngine`: the per-record `Engine` with `process_messages` done a partition at a time, in columns.

Everything around processing is the per-record engine's own, inherited or called: the partition's clock and
watermark (`_joined`, `advance_time`, `fire_timers`: timers fire through `on_timer` as for any processor), the
late-record policy (`LateHandler`, per late row), dead letters (the worker's `FailurePolicy`), duplicate
suppression (`DedupFilter`), the sinks (their direct path, held output, exactly-once stamping). Checkpoints see
what they see of a per-record processor: `task.next_offset`, the partition's buffered state and timers, the
sinks' held output. So every semantics pair, backups and recovery apply unchanged.

A batch is undone when `process_batch` raises (its state writes rolled back by the state's journal, its outputs
and timers never released) and split in halves, recursively, down to the records that fail alone: those go to
`on_error` (a dead letter by default), every other record is processed exactly once, in input order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from typing import Any

import numpy as np
import pyarrow as pa

from stylus.api import BatchProcessor, Record
from stylus.config.model import Pipeline, ProcessorSpec
from stylus.core.batch.columns import RENAMED, Run, Values, decode_values, record_batch
from stylus.core.batch.context import BatchContext, Rows
from stylus.core.engine import Engine, FailureHandler, StopProcessing, _event_time, _release
from stylus.core.sink import Sink, refuse_oversized
from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.control import decode as decode_control
from stylus.eventtime.control import is_control


def partition_runs(msgs: list[Any], multi_topic: bool) -> list[tuple[tuple[str, int], list[Any]]]:
    """The batch's records per input partition, in input order within each: partitions are independent (their
    own state, offsets and clocks), so each is one run however the consumer interleaved them."""
    if not msgs:
        return []
    if multi_topic:
        keys: list[Any] = [(m.topic(), m.partition()) for m in msgs]
    else:
        topic = msgs[0].topic()
        try:  # one class (confluent-kafka's Message): its accessor mapped in C
            keys = list(map(type(msgs[0]).partition, msgs))
        except (TypeError, AttributeError):  # messages of several kinds (tests)
            keys = [m.partition() for m in msgs]
    runs: dict[Any, list[Any]] = {}
    pos = 0
    for key, group in groupby(keys):
        size = len(list(group))
        runs.setdefault(key, []).extend(msgs[pos:pos + size])
        pos += size
    return [(key if multi_topic else (topic, key), run) for key, run in runs.items()]


class BatchEngine(Engine):
    takes_columns = True  # except with `dedup`, whose filter reads Messages (process_run)

    def __init__(self, processor: BatchProcessor, name: str, spec: ProcessorSpec, pipeline: Pipeline, sink: Sink,
                 failures: FailureHandler) -> None:
        super().__init__(processor, name, spec, pipeline, sink, failures)
        self.batch_processor = processor
        raw = bool(getattr(processor, "raw_input", False))
        self.serdes = {t: "bytes" if raw else pipeline.topics[t].serde for t in spec.inputs}
        self.ctx: BatchContext = BatchContext(self, name, spec.outputs[0] if spec.outputs else None,
                                              {t: pipeline.topics[t].serde for t in spec.outputs})
        fields = processor.fields
        if fields is not None and self.event_field is not None and self.event_field not in fields:
            fields = (*fields, self.event_field)  # decoded too: event times read from its column
        self.fields = fields
        self.batches = 0  # process_batch calls that succeeded
        self.splits = 0  # failed batches split in two (bisection)

    def process_messages(self, msgs: Iterable[Any], task_for: Callable[[str, int], PartitionTask]) -> int:
        """Process a consumed batch, one run per input partition; advances each task's `next_offset`. Returns
        the number of records handled (as `Engine.process_messages` counts them)."""
        dedup = self.dedup
        if dedup is not None:  # repeats dropped (offsets advanced) before any batch is formed
            msgs = dedup.filter(msgs, task_for)
        count = 0
        try:
            for (topic, partition), run in partition_runs(list(msgs), len(self.serdes) > 1):
                count += self._run(task_for(topic, partition), topic, Run(run))
        finally:
            self._done()
        if dedup is not None:
            count += dedup.batch_dropped
        return count

    def process_columns(self, topic: str, partition: int, offsets: Sequence[int], keys: Sequence[bytes | None],
                        values: Sequence[bytes | None], timestamps: Sequence[int], headers: Sequence[Any],
                        task_for: Callable[[str, int], PartitionTask]) -> int:
        """As `Engine.process_columns`, with no object per record (`Run.of_columns`; lists are taken as they are)."""
        columns = [column if type(column) is list else list(column) for column in (keys, values, timestamps, headers)]
        return self.process_run(Run.of_columns(topic, partition, offsets, *columns), task_for)

    def process_run(self, run: Run, task_for: Callable[[str, int], PartitionTask]) -> int:
        """One partition's records already read as columns (`Run.of_columns`: an archive's rows), processed as
        `process_messages` processes messages. Not with `dedup`, whose filter reads messages."""
        if self.dedup is not None:
            raise ValueError("a run of columns skips `dedup`'s filter: hand `dedup` processors messages")
        topic, partition = run.source
        try:
            return self._run(task_for(topic, partition), topic, run)
        finally:
            self._done()

    def _done(self) -> None:
        """Between calls the context holds no batch: emits outside one (setup, timers) go straight out."""
        ctx = self.ctx
        ctx._pending = ctx._direct = ctx._stamp = ctx.record = None
        ctx._run = ctx._timers = ctx.event_times = ctx._decoded = ctx._where = None

    # ---------------------------------------------------------------- one partition's run
    def _run(self, task: PartitionTask, topic: str, run: Run) -> int:
        ctx = self.ctx
        clock = task.clock
        if clock is None:  # the partition's first records since it was assigned
            clock = self._joined(task)
        clock.last_active = time.monotonic()
        task.at_eof = False
        ctx.state = task.state
        ctx._task = task
        sink = ctx._sink = task.sink or self.sink
        offer = getattr(sink, "direct", None)
        direct = ctx._direct = offer() if offer is not None else None
        ctx._stamp_name, ctx._stamp = direct.stamp if direct is not None and direct.stamp is not None else ("", None)
        ctx.watermark = max(self.watermark, clock.floor)
        if self.track_time and clock.sketch is None:
            clock.sketch = self.watermarks.new_sketch()
        end = run.offsets[-1] + 1
        if any(run.headers):  # upstream watermarks (control records): never handed to the processor
            control = [i for i, headers in enumerate(run.headers) if headers and is_control(headers)]
            for i in control:
                report = decode_control(run.values[i])
                if report is not None:
                    clock.report(*report)
            self.control_records += len(control)
            if control:
                run = run.without(control)
        count = 0
        if len(run):
            decoded, failed = decode_values(run.values, self.serdes[topic], self.fields)
            start = 0
            for i, exc in [*failed, (len(run), None)]:  # records that do not decode split the run
                if i > start:
                    count += self._segment(task, topic, run, decoded, start, i)
                if exc is not None:
                    self.failures(run.message(i), exc, "decode", task)
                    task.next_offset = run.offsets[i] + 1
                start = i + 1
        task.next_offset = end
        return count

    def _segment(self, task: PartitionTask, topic: str, run: Run, decoded: Values, lo: int, hi: int) -> int:
        """Records lo..hi of the run, all decoded: the batch, event time and late rows, then `process_batch`."""
        rows: range | None = None if lo == 0 and hi == len(run) else range(lo, hi)
        batch = record_batch(run, rows, decoded, self.serdes[topic], self.fields)
        where: Sequence[int] = range(lo, hi)
        event_times = None
        handled = 0
        if self.track_time:
            times = self._event_times(run, batch, decoded, where)
            self._observe(task, times)
            mark = self.ctx.watermark if self.check_late else NO_TIME
            if mark != NO_TIME and times.min() < mark:
                behind = np.flatnonzero(times < mark).tolist()
                dropped = [j for j in behind if self._late(run, decoded, where[j], int(times[j]), mark)]
                if dropped:
                    handled = len(dropped)
                    if handled == len(where):
                        task.next_offset = run.offsets[hi - 1] + 1
                        return handled
                    keep = np.ones(len(where), dtype=bool)
                    keep[dropped] = False
                    batch, times = batch.filter(pa.array(keep)), times[keep]
                    where = [where[j] for j in np.flatnonzero(keep).tolist()]
            event_times = pa.array(times)
        self.ctx._run, self.ctx._decoded = run, decoded
        return handled + self._attempt(task, run, batch, where, event_times)

    def _event_times(self, run: Run, batch: pa.RecordBatch, decoded: Values, where: Sequence[int]) -> np.ndarray:
        """Each row's event time, as the per-record engine takes it (`event_time.field`, else the record
        timestamp): from the field's column when it holds integers only, else record by record."""
        field = self.event_field
        if field is None:
            return batch.column("timestamp").to_numpy()
        name = field if field in batch.schema.names else RENAMED + field
        if name in batch.schema.names:
            column = batch.column(name)
            if pa.types.is_integer(column.type) and column.null_count == 0:  # the common case
                return column.to_numpy().astype(np.int64, copy=False)
        return np.array([_event_time(decoded[i], field, run.timestamps[i]) for i in where], dtype=np.int64)

    def _observe(self, task: PartitionTask, times: np.ndarray) -> None:
        """The partition's largest event time and lateness sketch, as after each of these records."""
        high = task.max_event_time
        sketch = task.clock.sketch
        if sketch is not None:  # each record's lateness behind the largest event time before it
            before = np.concatenate(([high], np.maximum.accumulate(times)[:-1]))
            before = np.maximum(before, high)
            sketch.add_many(np.where(times > before, 0, before - times).tolist())
        task.max_event_time = max(high, int(times.max()))

    def _late(self, run: Run, decoded: Values, i: int, event_time: int, mark: int) -> bool:
        """The late policy for one record behind the watermark: True when it must not be processed."""
        key = run.keys[i]
        text = None if key is None else key.decode("utf-8", "surrogateescape")
        return self.late(run.message(i), text, decoded[i], event_time, mark, self.ctx._sink)

    # ---------------------------------------------------------------- a batch, and its bisection
    def _attempt(self, task: PartitionTask, run: Run, batch: pa.RecordBatch, where: Sequence[int],
                 event_times: pa.Int64Array | None) -> int:
        """`process_batch` over `batch` (the run's records at `where`), all or nothing; on failure, each half
        again, down to single records. Returns the records handled."""
        ctx = self.ctx
        state = task.state if self.atomic else None
        undo = state.journal() if state is not None else None
        if undo:
            undo.clear()
        pending: list[Any] = []
        timers: list[tuple[str, int]] = []
        ctx._pending, ctx._timers, ctx.event_times, ctx._where = pending, timers, event_times, where
        last = where[-1]
        ctx.record = _stand_in(run, last, task)  # `ctx.emit` keys, stamps and times its outputs by it
        ctx._timestamp = run.timestamps[last]
        direct = ctx._direct
        try:
            self.batch_processor.process_batch(batch, ctx)
            if direct is not None and direct.hold is not None and pending:  # held output is checked now
                refuse_oversized([item for item in pending if type(item) is not Rows], direct.max_bytes)
        except StopProcessing:
            if state is not None:
                state.rollback()
            raise
        except Exception as exc:
            if state is not None:
                state.rollback()
            ctx._pending = ctx._timers = None
            if len(where) == 1 or not self.atomic:  # found (or no undo to split with: the run ends anyway)
                ctx.record = _stand_in(run, where[0], task)
                self.failures(run.message(where[0]), exc, "process", task)
                task.next_offset = run.offsets[last] + 1
                return len(where)
            self.splits += 1
            half = len(where) // 2
            low = None if event_times is None else event_times.slice(0, half)
            high = None if event_times is None else event_times.slice(half)
            return (self._attempt(task, run, batch.slice(0, half), where[:half], low)
                    + self._attempt(task, run, batch.slice(half), where[half:], high))
        ctx._pending = ctx._timers = None
        if pending:
            self._release(pending)
        if timers:
            add = task.store.timers.add  # type: ignore[union-attr]  # set_timer checked there is a store
            for key, timestamp in timers:
                add(key, timestamp)
        task.next_offset = run.offsets[last] + 1
        self.batches += 1
        return len(where)

    def _release(self, pending: list[Any]) -> None:
        """A successful batch's outputs, in order: produced (or held) as the per-record engine does."""
        direct = self.ctx._direct
        if direct is None:
            _release(pending)
            return
        hold = direct.hold
        produce, retry, produce_many = direct.produce, direct.retry, direct.produce_many
        count = 0
        for item in pending:
            if type(item) is not Rows:  # one `ctx.emit`: the positional arguments of `produce`
                count += 1
                if hold is not None:
                    hold.append(item)
                    continue
                try:
                    produce(*item)
                except BufferError:  # the producer's queue is full: wait for room
                    retry(item)
                continue
            count += len(item.values)
            if hold is not None:
                hold.extend(item.tuples())
                continue
            topic = item.topic
            if produce_many is not None:  # one call for the rows, a retry for a row that met a full queue
                values, keys, stamps = item.values, item.keys, item.stamps
                done = 0
                while done < len(values):
                    done = produce_many(topic, values, keys, stamps, done)
                    if done < len(values):
                        retry((topic, values[done], keys[done], -1, None, None, stamps[done]))
                        done += 1
                continue
            for value, key, timestamp in zip(item.values, item.keys, item.stamps, strict=True):
                try:
                    produce(topic, value, key, -1, None, None, timestamp)
                except BufferError:
                    retry((topic, value, key, -1, None, None, timestamp))
        owner = direct.owner
        owner.emitted += count
        if self.ctx._stamp is not None:  # the sink's own next id (a dead letter, a late record) starts afresh
            owner._origin = None


def _stand_in(run: Run, i: int, task: PartitionTask) -> Record:
    """The record at `i` of the run, undecoded: what `ctx.record` is while a batch runs (its offset stamps the
    ids of `ctx.emit` outputs and dead letters under exactly-once output)."""
    key = run.keys[i]
    return Record(None if key is None else key.decode("utf-8", "surrogateescape"), None, run.timestamps[i],
                  task.topic, task.partition, run.offsets[i])
