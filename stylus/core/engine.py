"""Run one processor over messages: decode by the topic's serde, call `process`, route `emit`,
fire timers. Kafka-free: the runtime hands it consumed messages, backfill hands it `RawMessage`s."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, Protocol

import orjson

from stylus.api import Processor, Record
from stylus.config.model import Pipeline, ProcessorSpec
from stylus.core.dedup import DedupFilter
from stylus.core.deferred import InOrder, Then, is_async
from stylus.core.groupings import Routes
from stylus.core.message import RawMessage
from stylus.core.sink import DirectOutput, Sink, refuse_oversized
from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.clock import META_KEY, PartitionClock, clock_of
from stylus.eventtime.control import decode as decode_control
from stylus.eventtime.control import is_control
from stylus.eventtime.late import LateHandler
from stylus.eventtime.timestamps import epoch_ms
from stylus.eventtime.tracker import WatermarkTracker
from stylus.serde import decoder, encode_key, encoder

_JSON_ENCODE = encoder("json")  # orjson.dumps, retried with an option for non-str dict keys
#: `record.headers` of a record without headers (most): one shared read-only mapping, not a dict per record
NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})


class StopProcessing(Exception):
    """Raised by a failure handler whose policy is `stop`: the runtime checkpoints and exits non-zero."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class FailureHandler(Protocol):
    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None: ...


class RaiseFailures:
    """The failure handler for backfill and tests: any failing record stops the run."""

    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
        raise StopProcessing(
            f"{stage} failed at {msg.topic()}[{msg.partition()}]@{msg.offset()}: {type(exc).__name__}: {exc}",
            msg.offset(),
        ) from exc


class EngineContext:
    """The `ctx` handed to the processor; its fields are repointed per record, not rebuilt."""

    __slots__ = ("_default_topic", "_deferred", "_direct", "_encode", "_encode_any", "_fixed", "_made", "_outputs",
                 "_pending", "_raw_key", "_routes", "_sink", "_stamp", "_stamp_name", "_task",
                 "_timer", "_timestamp", "engine", "event_time", "processor_name", "record", "state", "watermark")

    def __init__(self, engine: Engine, name: str, default_topic: str | None) -> None:
        self.engine = engine
        self.processor_name = name
        self.state: Any = None
        self.record: Record | None = None
        self.watermark = NO_TIME  # the processor's low watermark, or the partition's restored floor if higher
        self.event_time = NO_TIME  # the current record's event time (when the processor works in event time)
        self._task: PartitionTask | None = None
        self._timer: tuple[int, str] | None = None  # (timestamp, key) while on_timer runs
        self._timestamp = 0
        self._sink = engine.sink
        self._default_topic = default_topic
        self._outputs = frozenset(engine.spec.outputs)
        # the partitions of outputs with a grouping other than by key, and the check of `emit(partition=n)`
        self._routes = engine.routes
        self._fixed = engine.routes.fixed  # output -> its partitions, for `all` and `global` outputs only
        # While a record (or timer) runs, its emits wait here and reach the sink only if it succeeds:
        # a record that fails leaves no partial output behind (stylus/runtime/failures.py).
        self._pending: list[tuple[Any, ...]] | None = None
        # While a record runs against a sink that offers it (KafkaSink.direct), emits are encoded at once and
        # wait in `_pending` as `produce` arguments; `_encode` is the default output's encoder then, else None.
        self._direct: DirectOutput | None = None
        self._encode: Callable[[Any], bytes] | None = None
        # the default output's own encoder: `_encode` is plain `orjson.dumps` when that is the JSON encoder
        # (no Python frame per output), and a TypeError (non-str dict keys) is retried with this one
        self._encode_any: Callable[[Any], bytes] = _JSON_ENCODE
        self._raw_key: bytes | None = None  # the current record's key as read: reused when emitted unchanged
        # exactly-once output on the direct path (DirectOutput.stamp): each held output carries its `stylus.id`
        # header, `_stamp` % (input offset, emit index), built here; None otherwise
        self._stamp: bytes | None = None
        self._stamp_name = ""
        # while a record runs under per-record atomicity: the timers it added, taken out again if it fails
        self._made: list[tuple[int, str]] | None = None
        # while an async `process` runs in order (stylus/core/deferred.py): what it deferred, awaited after it
        self._deferred: list[tuple[Any, Then | None]] | None = None

    def emit(
        self,
        value: Any,
        key: str | None = None,
        topic: str | None = None,
        timestamp: int | None = None,
        headers: Mapping[str, Any] | None = None,
        partition: int | None = None,
    ) -> None:
        encode = self._encode
        if encode is not None and topic is None and headers is None and partition is None:  # hot path: `_direct`
            record: Any = self.record
            out: Any = self._pending  # a list whenever `_encode` is set
            try:
                data = encode(value)
            except TypeError:
                data = self._encode_any(value)
            stamp = self._stamp
            if stamp is None:
                out.append((  # the positional arguments of `produce`: topic, value, key, -1, None, None, timestamp
                    self._default_topic, data,
                    None if key is None else self._raw_key if key is record.key else _key_bytes(key),
                    -1, None, None, self._timestamp if timestamp is None else int(timestamp),
                ))
            else:  # the same, and the headers: our id, emit index = position among the record's outputs
                out.append((
                    self._default_topic, data,
                    None if key is None else self._raw_key if key is record.key else _key_bytes(key),
                    -1, None, None, self._timestamp if timestamp is None else int(timestamp),
                    [(self._stamp_name, stamp % (record.offset, len(out)))],
                ))
            return
        target = topic or self._default_topic
        if target is None:
            raise ValueError(f"processor `{self.processor_name}` has no outputs to emit to")
        if target not in self._outputs:
            raise ValueError(f"emitted to `{target}`, which is not among the processor's outputs")
        ts = self._timestamp if timestamp is None else int(timestamp)
        # the partitions a grouping or `partition=n` chose (stylus/core/groupings.py); None: the producer's
        fixed = self._fixed
        parts = (self._routes.partitions(target, partition) if partition is not None
                 else fixed.get(target) if fixed else None)
        pending = self._pending
        direct = self._direct
        if pending is None:
            if parts is None:
                self._sink(target, key, value, ts, headers)
            else:
                for part in parts:
                    self._sink(target, key, value, ts, headers, partition=part)
        elif direct is not None:
            encoded = direct.encoders[target](value)
            checked: Any = direct.headers(headers) if headers else None
            raw_key = None if key is None else _key_bytes(key)
            stamp = self._stamp
            for part in (-1,) if parts is None else parts:
                if stamp is not None:  # our id first, as TransactionalSink stamps (see the hot path above)
                    offset = self.record.offset  # type: ignore[union-attr]  # set while a record runs
                    item_headers: Any = [(self._stamp_name, stamp % (offset, len(pending))), *(checked or ())]
                else:
                    item_headers = checked
                pending.append((target, encoded, raw_key, part, None, None, ts, item_headers))
        else:
            check = getattr(self._sink, "check", None)
            if check is not None:  # encoded only when released: an unencodable value must fail its record now
                check(target, value)
            if parts is None:
                pending.append((self._sink, target, key, value, ts, headers))
                return
            for part in parts:
                pending.append((partial(self._sink, partition=part), target, key, value, ts, headers))

    def defer(self, work: Any, then: Then | None = None) -> None:
        """Slow I/O on the record's behalf (docs/acker.md). Here, outside `concurrency`, it runs in order: the
        record is done once `work` is, and `then(result, ctx)` has run (stylus/core/deferred.py)."""
        self.engine.in_order.defer(self, work, then)

    def table(self, name: str) -> Any:
        """A table declared under `tables:` (docs/tables.md): `.get(key)` answers as of the table records applied
        so far. Only processors that call it pay for tables: the per-record path never looks at them."""
        tables = self.engine.tables
        if tables is None:
            raise LookupError(f"processor `{self.processor_name}` has no table `{name}` here: declare it under "
                              "`tables:` of the pipeline (docs/tables.md)")
        return tables.view(name, self)

    def set_timer(self, key: str, timestamp: int) -> None:
        task = self._task
        if task is None or task.store is None:
            raise RuntimeError(
                f"processor `{self.processor_name}` is stateless; set `semantics.state` to use timers"
            )
        timers = task.store.timers
        made = self._made
        if made is not None:
            entry = (int(timestamp), key)
            if entry not in timers:  # new: a failure of the record takes it out again
                made.append(entry)
        timers.add(key, int(timestamp))


class Engine:
    #: gains from a partition's records given as columns (`process_columns`) rather than as Messages
    takes_columns = False

    def __init__(
        self,
        processor: Processor,
        name: str,
        spec: ProcessorSpec,
        pipeline: Pipeline,
        sink: Sink,
        failures: FailureHandler,
    ) -> None:
        self.processor = processor
        self.name = name
        self.spec = spec
        self.sink = sink
        self.failures = failures
        # a processor with `raw_input = True` (the archiver) gets the value bytes exactly as on the topic
        raw = bool(getattr(processor, "raw_input", False))
        self.decoders = {t: decoder("bytes" if raw else pipeline.topics[t].serde) for t in spec.inputs}
        self.routes = Routes(pipeline, spec)  # Storm's groupings on the outputs (docs/groupings.md)
        self.ctx = EngineContext(self, name, spec.outputs[0] if spec.outputs else None)
        self.event_field = spec.event_time.field if spec.event_time else None
        self.track_time = spec.event_time is not None or type(processor).on_timer is not Processor.on_timer
        # the processor's low watermark: it rises with its partitions' floors and goes back only for a partition
        # that joins behind them (advance_time); see stylus/eventtime
        self.watermark = NO_TIME
        self.watermarks = WatermarkTracker(spec.event_time, pipeline, spec.inputs)
        self.late = LateHandler(pipeline, name, processor, sink)
        self.check_late = spec.event_time is not None  # `event_time.late` applies only where it is configured
        self.control_records = 0
        # per-record atomicity (journal + held emits) exists for failure policies that skip a record; a
        # runner whose every failure ends the run (backfill's RaiseFailures) may turn it off for speed
        self.atomic = True
        self.dedup = DedupFilter(spec.dedup) if spec.dedup is not None else None  # stylus/core/dedup.py
        # `ctx.table(name)`'s lookups (stylus/tables/registry.py, or the TestDriver's): set by the runner, if any
        self.tables: Any = None
        # an `async def process` runs here one record at a time, to its end (`concurrency` overlaps records in
        # the worker instead: stylus/core/concurrent.py); a plain `process` pays one test per batch
        self.in_order = InOrder()
        self.in_order_process = self.in_order.wrap(processor) if is_async(processor) else None
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.processor.setup(self.ctx)

    def process_columns(self, topic: str, partition: int, offsets: Sequence[int], keys: Sequence[bytes | None],
                        values: Sequence[bytes | None], timestamps: Sequence[int], headers: Sequence[Any],
                        task_for: Callable[[str, int], PartitionTask]) -> int:
        """One partition's records given as columns, in offset order (`headers`: each record's as
        `Message.headers()` gives them), processed as `process_messages` processes them."""
        return self.process_messages(
            [RawMessage(topic, partition, offset, key, value, timestamp, record_headers)
             for offset, key, value, timestamp, record_headers in zip(offsets, keys, values, timestamps, headers,
                                                                      strict=True)], task_for)

    def process_messages(self, msgs: Iterable[Any], task_for: Callable[[str, int], PartitionTask]) -> int:
        """Process a batch; advances each task's `next_offset`. Returns the number of records handled."""
        ctx = self.ctx
        process = self.in_order_process or self.processor.process  # read per batch: `setup` may rebind it
        new_record = object.__new__
        failures = self.failures
        track_time = self.track_time
        field = self.event_field
        last_topic: str | None = None
        last_partition = -1
        task: Any = None
        decode: Any = None
        undo: Any = None
        pending: list[tuple[Any, ...]] = []
        atomic = self.atomic
        # where emits wait until the record has succeeded: for atomicity, and for a sink's direct path (the
        # engine then produces them itself, which is cheaper than a sink call per output even without it)
        held = pending if atomic or getattr(self.sink, "direct", None) is not None else None
        sink: Any = None
        direct: DirectOutput | None = None  # the current partition's sink offers the hot path
        stamp_owner: Any = None  # the sink whose ids `ctx.emit` stamps (DirectOutput.stamp)
        produce: Any = None
        hold: Any = None  # the sink's held output while it holds (DirectOutput.hold): items are appended there
        emitted = 0  # outputs produced through `direct` since it was chosen (its sink's counter)
        count = 0
        dedup = self.dedup
        if dedup is not None:  # one check per batch: repeats are dropped (offsets advanced) before the loop
            msgs = dedup.filter(msgs, task_for)
        now = time.monotonic()
        ctx._pending = held  # a record's emits wait here until it has succeeded
        made: list[tuple[int, str]] | None = [] if atomic else None  # the timers the record in progress added
        ctx._made = made
        late_mark = NO_TIME
        sketch: Any = None
        clock: Any = None
        try:
            for msg in msgs:
                topic = msg.topic()
                partition = msg.partition()
                if partition != last_partition or topic != last_topic:
                    task = task_for(topic, partition)
                    decode = self.decoders[topic]
                    ctx.state = task.state
                    ctx._task = task
                    if (task.sink or self.sink) is not sink:
                        sink = ctx._sink = task.sink or self.sink
                        if emitted:
                            direct.owner.emitted += emitted  # type: ignore[union-attr]
                            emitted = 0
                        offer = getattr(sink, "direct", None) if held is not None else None
                        direct = ctx._direct = offer() if offer is not None else None
                        encode = direct.encoders[ctx._default_topic] if direct and ctx._default_topic else None
                        if encode is not None and ctx._default_topic in self.routes:
                            encode = None  # a grouped default output takes emit's general path
                        ctx._encode_any = encode or _JSON_ENCODE
                        ctx._encode = orjson.dumps if encode is _JSON_ENCODE else encode
                        produce = direct.produce if direct is not None else None
                        hold = direct.hold if direct is not None else None
                        if direct is not None and direct.stamp is not None:
                            ctx._stamp_name, ctx._stamp = direct.stamp
                            stamp_owner = direct.owner
                        else:
                            ctx._stamp = stamp_owner = None
                    undo = task.state.journal() if task.state is not None and atomic else None
                    last_topic, last_partition = topic, partition
                    clock = task.clock
                    if clock is None:  # the partition's first records since it was assigned (see _joined)
                        clock = self._joined(task)
                    clock.last_active = now
                    task.at_eof = False
                    ctx.watermark = max(self.watermark, clock.floor)
                    late_mark = ctx.watermark if self.check_late else NO_TIME
                    if track_time and clock.sketch is None:
                        clock.sketch = self.watermarks.new_sketch()
                    sketch = clock.sketch
                offset = msg.offset()
                raw_headers = msg.headers()
                if raw_headers and is_control(raw_headers):  # an upstream watermark: never user input
                    report = decode_control(msg.value())
                    if report is not None:
                        clock.report(*report)
                    self.control_records += 1
                    task.next_offset = offset + 1
                    continue
                try:
                    raw = msg.value()
                    value = None if raw is None else decode(raw)
                except Exception as exc:
                    failures(msg, exc, "decode", task)
                    task.next_offset = offset + 1
                    continue
                timestamp = msg.timestamp()[1]
                key = msg.key()
                # Record's fields set here: no Python __init__ frame per record on the hottest path
                record = new_record(Record)
                record.key = None if key is None else key.decode("utf-8", "surrogateescape")
                record.value = value
                record.timestamp = timestamp
                record.topic = topic
                record.partition = partition
                record.offset = offset
                record.headers = dict(raw_headers) if raw_headers else NO_HEADERS
                if track_time:
                    if field is not None and type(value) is dict and type(event_time := value.get(field)) is int:
                        pass  # the common case, without a call
                    else:
                        event_time = _event_time(value, field, timestamp)
                    if event_time > task.max_event_time:
                        task.max_event_time = event_time
                        if sketch is not None:
                            sketch.add_in_order()
                    elif sketch is not None:
                        sketch.add(task.max_event_time - event_time)
                    ctx.event_time = event_time
                    if event_time < late_mark and self.late(msg, record.key, value, event_time, late_mark, ctx._sink):
                        task.next_offset = offset + 1
                        count += 1
                        continue
                ctx.record = record
                ctx._raw_key = key
                ctx._timestamp = timestamp
                if undo:
                    undo.clear()  # the journal covers exactly this record's writes
                if made:
                    made.clear()
                try:
                    process(record, ctx)
                    if pending:  # the record succeeded: its outputs go out, in order
                        if produce is not None:
                            if hold is not None:  # held until the checkpoint: one list extend per record
                                refuse_oversized(pending, direct.max_bytes)  # type: ignore[union-attr]
                                hold += pending
                            else:
                                for item in pending:
                                    try:
                                        produce(*item)
                                    except BufferError:  # the producer's queue is full: wait for room
                                        direct.retry(item)  # type: ignore[union-attr]
                            emitted += len(pending)
                            if stamp_owner is not None:  # its next own id continues after these (_next_id)
                                stamp_owner._origin, stamp_owner._index = offset, len(pending) - 1
                        else:
                            for out_sink, target, out_key, out_value, out_ts, out_headers in pending:
                                out_sink(target, out_key, out_value, out_ts, out_headers)
                        pending.clear()
                except StopProcessing:
                    _undo(task, pending, made)
                    raise
                except Exception as exc:
                    encode, ctx._pending, ctx._encode = ctx._encode, None, None
                    _undo(task, pending, made)  # a failing record leaves no state, timer or output behind
                    failures(msg, exc, "process", task)
                    ctx._pending, ctx._encode = held, encode
                task.next_offset = offset + 1
                count += 1
        finally:
            ctx._pending = ctx._made = None  # emits outside a record (timers) go straight to the sink
            ctx._direct = ctx._encode = ctx._stamp = None
            if emitted:
                direct.owner.emitted += emitted  # type: ignore[union-attr]
        if dedup is not None:
            count += dedup.batch_dropped  # dropped repeats are handled input too
        return count

    def fire_timers(self, tasks: Iterable[PartitionTask], watermark: int) -> int:
        """Advance the watermark and call `on_timer` for every timer it passed, oldest first."""
        if watermark <= self.watermark:
            return 0
        self.watermark = watermark
        ctx = self.ctx
        ctx.watermark = watermark
        fired = 0
        for task in tasks:
            if task.store is None:
                continue
            due = task.store.timers.pop_due(watermark)
            for i, (timestamp, key) in enumerate(due):
                ctx.state = task.state
                ctx._task = task
                ctx._sink = task.sink or self.sink
                ctx.record = None
                ctx._timer = (timestamp, key)
                ctx._timestamp = timestamp
                try:
                    self._fire_one(task, key, timestamp)
                except StopProcessing:  # on_error: stop. The final checkpoint keeps the unfired timers.
                    for entry in due[i:]:
                        task.store.timers.add(entry[1], entry[0])
                    ctx._timer = None
                    raise
                fired += 1
        ctx._timer = None
        return fired

    def advance_time(self, tasks: Iterable[PartitionTask], now: float | None = None) -> int:
        """Recompute the low watermark from the partitions, fire the timers it passed, and remember it in
        each partition's state (its floor after a restart). Returns the number of timers fired."""
        tasks = list(tasks)
        low = self.watermarks.low_watermark(tasks, now)
        if low < self.watermark:
            # A partition joined behind the others (an incremental assignment, a re-opened partition): the
            # watermark goes back to it, or its records would be judged against the others' progress. The
            # partitions held before keep their floors, so their fired timers and late records stay so.
            self.watermark = self.ctx.watermark = low
        fired = self.fire_timers(tasks, low)
        mark = self.watermark
        for task in tasks:
            clock = clock_of(task)
            if clock.floor < mark:
                clock.floor = mark
            if task.store is not None:
                snapshot = clock.snapshot()
                if snapshot is not None:
                    task.store.set_meta(META_KEY, snapshot)
        return fired

    def _joined(self, task: PartitionTask) -> PartitionClock:
        """A partition's clock, the first time the engine meets the partition: one that joins behind the
        others (an incremental assignment, a partition re-opened from its state) takes the watermark back to
        its floor at once, before its first records are judged late against the others' progress."""
        clock = clock_of(task)
        if clock.floor < self.watermark:
            self.watermark = clock.floor
        return clock

    def _fire_one(self, task: PartitionTask, key: str, timestamp: int) -> None:
        """One `on_timer` call, atomic like a record: on failure its state writes and emits are undone and
        the failure policy gets a stand-in message (stage `timer`) carrying the timer as JSON."""
        ctx = self.ctx
        undo = task.state.journal() if task.state is not None else None
        pending: list[tuple[Any, ...]] = []
        made: list[tuple[int, str]] = []
        ctx._pending, ctx._made = pending, made
        if undo:
            undo.clear()
        try:
            self.processor.on_timer(key, timestamp, ctx)
            if pending:
                _release(pending)
        except StopProcessing:
            ctx._pending = ctx._made = None
            _undo(task, pending, made)
            raise
        except Exception as exc:
            ctx._pending = ctx._made = None
            _undo(task, pending, made)
            self.failures(timer_message(task, key, timestamp), exc, "timer", task)
        ctx._pending = ctx._made = None


def timer_message(task: PartitionTask, key: str, timestamp: int) -> RawMessage:
    """A failed timer as a message for the failure policy: offset -1, the timer as a JSON value."""
    value = orjson.dumps({"timer": key, "timestamp": timestamp})
    return RawMessage(task.topic, task.partition, -1, encode_key(key), value, timestamp, None)


def _key_bytes(key: Any) -> bytes:
    """An emitted key as KafkaSink encodes it."""
    return key if type(key) is bytes else str(key).encode("utf-8", "surrogateescape")


def _release(pending: list[tuple[Any, ...]]) -> None:
    """Hand a successful record's emits to their sink, in order (held as `emit` holds them without a direct
    sink: also a concurrent record's, stylus/core/concurrent.py)."""
    for sink, target, key, value, ts, headers in pending:
        sink(target, key, value, ts, headers)
    pending.clear()


def _undo(task: PartitionTask, pending: list[tuple[Any, ...]], made: list[tuple[int, str]] | None = None) -> None:
    """A failed record (or timer) leaves nothing behind: its outputs dropped, its state writes rolled back,
    the timers it added (`made`) taken out."""
    pending.clear()
    if task.state is not None:
        task.state.rollback()
    if made:
        timers = task.store.timers  # type: ignore[union-attr]  # timers were set: there is a store
        for timestamp, key in made:
            timers.remove(key, timestamp)
        made.clear()


def _event_time(value: Any, field: str | None, timestamp: int) -> int:
    if field is not None and isinstance(value, dict):
        event_time = value.get(field)
        if isinstance(event_time, int | float) and not isinstance(event_time, bool):
            return int(event_time)
        if isinstance(event_time, str):  # an ISO-8601 timestamp (a SQL app's time column may hold one)
            parsed = epoch_ms(event_time)
            if parsed is not None:
                return parsed
    return timestamp
