"""Build a monoid processor, its postgres backend and stores without Kafka."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import psycopg
import yaml

from stylus.api import import_processor_class
from stylus.config import Pipeline, parse_pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.monoid import MonoidProcessor
from stylus.monoid.backend import PostgresBackend
from stylus.monoid.pg import default_table


def pipeline_doc(cls: str, *, backend: str = "rocksdb", dsn: str | None = None, config: dict[str, Any] | None = None,
                 partitions: int = 2, semantics: dict[str, str] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"backend": backend}
    if dsn is not None:
        state["dsn"] = dsn
    return {
        "pipeline": "monoid-test",
        "topics": {"events": {"partitions": partitions}},
        "processors": {"agg": {
            "class": cls, "inputs": ["events"], "config": config or {},
            "semantics": semantics or {"state": "exactly_once", "output": "at_least_once"}, "state": state,
        }},
    }


def make_pipeline(cls: str, **kwargs: Any) -> Pipeline:
    return parse_pipeline(yaml.safe_dump(pipeline_doc(cls, **kwargs)), import_classes=True)


def make_backend(dsn: str, cls: str, config: dict[str, Any] | None = None) -> tuple[Pipeline, PostgresBackend]:
    pipeline = make_pipeline(cls, backend="postgres", dsn=dsn, config=config)
    spec = pipeline.processors["agg"]
    processor = import_processor_class(spec.class_)(config=spec.config, name="agg")
    assert isinstance(processor, MonoidProcessor)
    return pipeline, PostgresBackend(pipeline, "agg", processor)


def table_contents(dsn: str, pipeline: Pipeline, name: str = "agg") -> dict[str, Any]:
    table = pipeline.processors[name].state.table or default_table(pipeline.pipeline, name)
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f'SELECT key, value FROM "{table}"').fetchall())


def stored_offsets(dsn: str) -> dict[tuple[str, int], int | None]:
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass('stylus_monoid_offsets')").fetchone()
        if exists is None or exists[0] is None:
            return {}  # no worker got as far as opening a partition
        rows = conn.execute("SELECT topic, partition, next_offset FROM stylus_monoid_offsets").fetchall()
    return {(t, p): o for t, p, o in rows}


def messages(topic: str, values: Iterable[tuple[int, str | None, dict[str, Any]]]) -> list[RawMessage]:
    """(partition, key, value) -> RawMessages with per-partition offsets from 0, timestamp = value['ts']."""
    offsets: dict[int, int] = {}
    out = []
    for partition, key, value in values:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        out.append(RawMessage(topic, partition, offset, None if key is None else key.encode(), orjson.dumps(value),
                              int(value.get("ts", 0))))
    return out


def engine_for(pipeline: Pipeline, name: str = "agg") -> Engine:
    spec = pipeline.processors[name]
    processor = import_processor_class(spec.class_)(config=spec.config, name=name)
    engine = Engine(processor, name, spec, pipeline, CollectingSink(spec.outputs), RaiseFailures())
    engine.start()
    return engine


def run_checkpointed(engine: Engine, tasks: dict[tuple[str, int], PartitionTask], msgs: list[RawMessage],
                     every: int) -> None:
    """Process `msgs` in batches of `every`, saving every task (state + offsets) after each batch."""
    for start in range(0, len(msgs), every):
        engine.process_messages(msgs[start:start + every], lambda t, p: tasks[(t, p)])
        for task in tasks.values():
            if task.store is not None and task.next_offset is not None:
                task.store.save(task.next_offset, state=True)
                task.committed_offset = task.next_offset
