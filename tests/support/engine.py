"""Run one processor of a pipeline through the real `Engine` without a broker: messages in,
collected outputs out, in-memory state per partition, watermarks advanced by hand."""

from __future__ import annotations

from typing import Any

import orjson

from stylus.api import import_processor_class
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore


class EngineHarness:
    def __init__(self, pipeline: Pipeline, name: str, config: dict[str, Any] | None = None) -> None:
        spec = pipeline.processors[name]
        if config is not None:
            spec = spec.model_copy(update={"config": {**spec.config, **config}})
        self.spec = spec
        self.sink = CollectingSink(spec.outputs)
        self.processor = import_processor_class(spec.class_)(config=spec.config, name=name)
        self.engine = Engine(self.processor, name, spec, pipeline, self.sink, RaiseFailures())
        self.engine.start()
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.offsets: dict[tuple[str, int], int] = {}

    def task_for(self, topic: str, partition: int) -> PartitionTask:
        key = (topic, partition)
        if key not in self.tasks:
            store = PartitionStore(MemoryKV()) if self.spec.stateful else None
            self.tasks[key] = PartitionTask(topic, partition, store)
        return self.tasks[key]

    def feed(self, values: list[dict[str, Any]], *, key_field: str | None = None, partition: int = 0,
             ts_field: str = "ts") -> list[Any]:
        """Process `values` on one input partition; returns the outputs they produced."""
        topic = self.spec.inputs[0]
        msgs = []
        for value in values:
            offset = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = offset + 1
            key = None if key_field is None else str(value[key_field]).encode()
            msgs.append(RawMessage(topic, partition, offset, key, orjson.dumps(value), int(value.get(ts_field, 0))))
        before = len(self.sink.outputs)
        self.engine.process_messages(msgs, self.task_for)
        return self.sink.outputs[before:]

    def fire(self, watermark: int) -> list[Any]:
        before = len(self.sink.outputs)
        self.engine.fire_timers(list(self.tasks.values()), watermark)
        return self.sink.outputs[before:]

    @property
    def outputs(self) -> list[Any]:
        return self.sink.outputs
