"""One processor inside the driver: the production `Engine` over in-memory partitions, with the checkpoint
orderings of stylus/runtime/checkpoint.py applied step by step and a crash that keeps only what they saved.

What survives a crash is what survives a process crash in production: each partition's state database
(a MemoryKV standing in for RocksDB), the consumer group's committed offsets, and what reached the
topics. The processor instance, its engine, the state cache and held or uncommitted output do not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any, cast

from stylus.api import Processor, import_processor_class
from stylus.config.model import EventTimeSpec, Pipeline
from stylus.core.engines import engine_for
from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.clock import clock_of
from stylus.eventtime.control import HEADERS, WatermarkPublisher
from stylus.eventtime.topology import publishes
from stylus.eventtime.tracker import WatermarkTracker
from stylus.runtime.checkpoint import Ordering, Step, ordering_for
from stylus.runtime.failures import FailurePolicy
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from stylus.testing.sink import DriverSink
from stylus.testing.tables import DriverTables
from stylus.testing.topics import Status, Topics

Key = tuple[str, int]


class ManualWatermarks(WatermarkTracker):
    """Every partition's watermark is the one the test set (`TestDriver.advance_watermark`)."""

    def __init__(self, spec: EventTimeSpec | None, mark: int) -> None:
        super().__init__(spec)
        self.mark = mark

    def low_watermark(self, tasks: Iterable[PartitionTask], now: float | None = None) -> int:
        return self.mark


class _ControlProducer:
    """What WatermarkPublisher writes control records through: the in-memory topics."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics

    def produce(self, topic: str, value: bytes, key: bytes | None = None, *, partition: int = 0,
                headers: Any = None) -> None:
        self.topics.append(topic, partition, key, value, 0, list(headers or HEADERS), control=True)

    def poll(self, timeout: float = 0) -> int:
        return 0


class Stage:
    def __init__(self, pipeline: Pipeline, name: str, topics: Topics, clock: Callable[[], int], *,
                 manual: bool) -> None:
        self.pipeline = pipeline
        self.name = name
        self.spec = spec = pipeline.processors[name]
        self.topics = topics
        self.manual = manual
        self.mark = NO_TIME  # the last `advance_watermark`: the watermark (manual mode) or a floor (auto)
        self.ordering: Ordering = ordering_for(spec.semantics.state, spec.semantics.output)
        self.eager = not (self.ordering.holds_output or self.ordering.transactional)
        self.sink = DriverSink(pipeline, spec, topics, clock)
        self.keys: list[Key] = [(t, p) for t in spec.inputs for p in range(topics.width(t))]
        self.disks: dict[Key, MemoryKV] = {key: MemoryKV() for key in self.keys}  # survive crashes
        self.group: dict[Key, int] = {}  # the consumer group's committed offsets: survive crashes
        self.tables = DriverTables(pipeline, name, topics)  # `ctx.table`: kept across crashes, as on disk
        self._boot()

    # ------------------------------------------------------------------ lifecycle
    def _boot(self) -> None:
        """A (re)started instance: a fresh processor and engine, partitions opened from what was saved."""
        spec = self.spec
        self.processor: Processor = import_processor_class(spec.class_)(config=spec.config, name=self.name)
        failures = FailurePolicy(spec.on_error, self.name, self.pipeline.dlq_topic(self.name), cast(Any, self.sink))
        self.engine = engine_for(self.processor, self.name, spec, self.pipeline, self.sink, failures)
        self.engine.tables = self.tables
        if self.manual:
            self.engine.watermarks = ManualWatermarks(spec.event_time, self.mark)
        self.publisher: WatermarkPublisher | None = None
        if not self.manual and publishes(self.pipeline, self.name):
            self.publisher = WatermarkPublisher(self.pipeline, self.name, "driver", _ControlProducer(self.topics))
            self.engine.track_time = True  # downstream needs this stage's event-time progress
        self.engine.start()
        self.tasks = {key: self._open(key) for key in self.keys}

    def _open(self, key: Key) -> PartitionTask:
        """Recovery R5 (stylus/runtime/recovery.py): exactly-once output resumes at the group's committed
        offset, anything else at its local state's offset, else the group's, else the start (earliest)."""
        store = PartitionStore(self.disks[key], cache_entries=self.spec.state.cache_entries) \
            if self.spec.stateful else None
        task = PartitionTask(key[0], key[1], store)
        if self.ordering.transactional or task.next_offset is None:
            task.next_offset = task.committed_offset = self.group.get(key, 0)
        return task

    def crash(self) -> None:
        """Lose the process: held output is never produced, an open transaction aborts; then restart."""
        self.sink.drop()
        self._boot()

    def close(self) -> None:
        self.processor.close()

    # ------------------------------------------------------------------ processing
    def _task_for(self, topic: str, partition: int) -> PartitionTask:
        return self.tasks[(topic, partition)]

    def run(self, now: float) -> None:
        """Consume everything readable on the inputs, in the order it was produced, then move event time."""
        entries = [entry for key, task in self.tasks.items()
                   for entry in self.topics.partition_log(*key)[task.next_offset or 0:]
                   if entry.status is not Status.GONE]
        entries.sort(key=lambda entry: entry.seq)
        self.tables.refresh()  # caught up with what the tables' topics show before these records
        if entries:
            self.engine.process_messages([entry.message() for entry in entries], self._task_for)
        for task in self.tasks.values():
            task.at_eof = True
        self.engine.advance_time(self.tasks.values(), now)
        if self.eager and self.publisher is not None:  # at-least-once output: the mark follows its data at once
            self.publisher.maybe_publish(self.engine.watermark, self.keys, now=now, force=True)

    def set_mark(self, mark: int) -> None:
        """Manual mode: the watermark every partition reports from now on; auto mode: a floor under it."""
        self.mark = max(self.mark, mark)
        if isinstance(self.engine.watermarks, ManualWatermarks):
            self.engine.watermarks.mark = self.mark
        else:
            for task in self.tasks.values():
                clock = clock_of(task)
                clock.floor = max(clock.floor, mark)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, until: Step | None = None) -> None:
        """The ordering's steps in order; with `until`, stop after that one (a crash follows)."""
        watermark = self.engine.watermark
        for step in self.ordering.steps:
            self._step(step)
            if step is until:
                return
        if not self.eager and self.publisher is not None:  # its output is visible now: so may its mark be
            self.publisher.maybe_publish(watermark, self.keys, force=True)

    def _step(self, step: Step) -> None:
        if step is Step.EMIT:
            self.sink.release()
            return
        if step is Step.TRANSACTION:
            self.sink.release()
        for key, task in self.tasks.items():
            offset = task.next_offset or 0
            if task.store is not None:
                if step is Step.STATE:
                    task.store.save(None)
                elif step is Step.OFFSETS:
                    task.store.save(offset, state=False)
                else:  # state+offsets, transaction: one batch
                    task.store.save(offset)
            if step is not Step.STATE:
                self.group[key] = task.committed_offset = offset

    # ------------------------------------------------------------------ inspection
    def state(self, partition: int, topic: str | None = None) -> dict[str, Any]:
        """A copy of the partition's state as `ctx.state` shows it (unsaved writes included)."""
        found: dict[str, Any] = {}
        for (name, part), task in self.tasks.items():
            if part == partition and (topic is None or name == topic) and task.state is not None:
                found.update(task.state.items())
        return copy.deepcopy(found)
