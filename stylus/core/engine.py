"""Run one processor over messages: decode by the topic's serde, call `process`, route `emit`,
fire timers. Kafka-free: the runtime hands it consumed messages, backfill hands it `RawMessage`s."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from stylus.api import Processor, Record
from stylus.config.model import Pipeline, ProcessorSpec
from stylus.core.sink import Sink
from stylus.core.task import NO_TIME, PartitionTask
from stylus.serde import decode_key, decoder


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

    __slots__ = ("_default_topic", "_sink", "_task", "_timestamp", "engine", "processor_name", "record", "state",
                 "watermark")

    def __init__(self, engine: Engine, name: str, default_topic: str | None) -> None:
        self.engine = engine
        self.processor_name = name
        self.state: Any = None
        self.record: Record | None = None
        self.watermark = NO_TIME
        self._task: PartitionTask | None = None
        self._timestamp = 0
        self._sink = engine.sink
        self._default_topic = default_topic

    def emit(
        self,
        value: Any,
        key: str | None = None,
        topic: str | None = None,
        timestamp: int | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        target = topic or self._default_topic
        if target is None:
            raise ValueError(f"processor `{self.processor_name}` has no outputs to emit to")
        self._sink(target, key, value, self._timestamp if timestamp is None else int(timestamp), headers)

    def set_timer(self, key: str, timestamp: int) -> None:
        task = self._task
        if task is None or task.store is None:
            raise RuntimeError(
                f"processor `{self.processor_name}` is stateless; set `semantics.state` to use timers"
            )
        task.store.timers.add(key, int(timestamp))


class Engine:
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
        self.decoders = {t: decoder(pipeline.topics[t].serde) for t in spec.inputs}
        self.ctx = EngineContext(self, name, spec.outputs[0] if spec.outputs else None)
        self.event_field = spec.event_time.field if spec.event_time else None
        self.track_time = spec.event_time is not None or type(processor).on_timer is not Processor.on_timer
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.processor.setup(self.ctx)

    def process_messages(self, msgs: Iterable[Any], task_for: Callable[[str, int], PartitionTask]) -> int:
        """Process a batch; advances each task's `next_offset`. Returns the number of records handled."""
        ctx = self.ctx
        process = self.processor.process
        failures = self.failures
        track_time = self.track_time
        field = self.event_field
        last_topic: str | None = None
        last_partition = -1
        task: Any = None
        decode: Any = None
        count = 0
        for msg in msgs:
            topic = msg.topic()
            partition = msg.partition()
            if partition != last_partition or topic != last_topic:
                task = task_for(topic, partition)
                decode = self.decoders[topic]
                ctx.state = task.state
                ctx._task = task
                last_topic, last_partition = topic, partition
            offset = msg.offset()
            try:
                raw = msg.value()
                value = None if raw is None else decode(raw)
            except Exception as exc:
                failures(msg, exc, "decode", task)
                task.next_offset = offset + 1
                continue
            timestamp = msg.timestamp()[1]
            raw_headers = msg.headers()
            record = Record(
                decode_key(msg.key()), value, timestamp, topic, partition, offset,
                dict(raw_headers) if raw_headers else None,
            )
            if track_time:
                event_time = _event_time(value, field, timestamp)
                if event_time > task.max_event_time:
                    task.max_event_time = event_time
            ctx.record = record
            ctx._timestamp = timestamp
            try:
                process(record, ctx)
            except StopProcessing:
                raise
            except Exception as exc:
                failures(msg, exc, "process", task)
            task.next_offset = offset + 1
            count += 1
        return count

    def fire_timers(self, tasks: Iterable[PartitionTask], watermark: int) -> int:
        """Advance `ctx.watermark` and call `on_timer` for every timer it passed, oldest first."""
        if watermark <= self.ctx.watermark:
            return 0
        ctx = self.ctx
        ctx.watermark = watermark
        fired = 0
        for task in tasks:
            if task.store is None:
                continue
            for timestamp, key in task.store.timers.pop_due(watermark):
                ctx.state = task.state
                ctx._task = task
                ctx.record = None
                ctx._timestamp = timestamp
                self.processor.on_timer(key, timestamp, ctx)
                fired += 1
        return fired


def _event_time(value: Any, field: str | None, timestamp: int) -> int:
    if field is not None and isinstance(value, dict):
        event_time = value.get(field)
        if isinstance(event_time, int | float) and not isinstance(event_time, bool):
            return int(event_time)
    return timestamp
