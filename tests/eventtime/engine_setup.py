"""Build a real Engine over in-memory state for event-time tests (no broker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import yaml

from stylus.api import import_processor_class
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore


def pipeline_doc(cls: str, *, event_time: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
                 partitions: int = 1, semantics: Mapping[str, str] | None = None) -> Pipeline:
    proc: dict[str, Any] = {
        "class": cls, "inputs": ["in"], "outputs": ["out"], "config": dict(config or {}),
        "semantics": dict(semantics or {"state": "exactly_once", "output": "at_least_once"}),
    }
    if event_time is not None:
        proc["event_time"] = dict(event_time)
    doc = {"pipeline": "et", "topics": {"in": {"partitions": partitions}, "out": {"partitions": 1}},
           "processors": {"p": proc}}
    return parse_pipeline(yaml.safe_dump(doc))


class Rig:
    """One processor on a real Engine; partitions keep their MemoryKV so a 'restart' can reopen them."""

    def __init__(self, pipeline: Pipeline, kvs: dict[int, MemoryKV] | None = None) -> None:
        self.pipeline = pipeline
        spec = pipeline.processors["p"]
        self.sink = CollectingSink(["out", "et.p.late"])
        self.processor = import_processor_class(spec.class_)(config=spec.config, name="p")
        self.engine = Engine(self.processor, "p", spec, pipeline, self.sink, RaiseFailures())
        self.engine.start()
        self.kvs = kvs if kvs is not None else {}
        self.tasks: dict[int, PartitionTask] = {}
        self.offsets: dict[int, int] = {}

    def task(self, partition: int) -> PartitionTask:
        if partition not in self.tasks:
            kv = self.kvs.setdefault(partition, MemoryKV())
            self.tasks[partition] = PartitionTask("in", partition, PartitionStore(kv))
            stored = self.tasks[partition].next_offset
            self.offsets[partition] = stored or 0
        return self.tasks[partition]

    def feed(self, values: list[dict[str, Any]], partition: int = 0, *, ts_field: str = "ts",
             key_field: str | None = None) -> list[Any]:
        self.task(partition)
        msgs = []
        for value in values:
            offset = self.offsets[partition]
            self.offsets[partition] = offset + 1
            key = None if key_field is None else str(value[key_field]).encode()
            msgs.append(RawMessage("in", partition, offset, key, orjson.dumps(value), int(value.get(ts_field, 0))))
        before = len(self.sink.outputs)
        self.engine.process_messages(msgs, lambda t, p: self.tasks[p])
        return self.sink.outputs[before:]

    def advance(self, now: float | None = None) -> list[Any]:
        before = len(self.sink.outputs)
        self.engine.advance_time(list(self.tasks.values()), now)
        return self.sink.outputs[before:]

    def checkpoint(self) -> None:
        for task in self.tasks.values():
            assert task.store is not None
            task.store.save(task.next_offset)
