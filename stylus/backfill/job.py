"""The driver side of a backfill: plan, run the units on Spark, gather the summary (and state), seed.

Data path: one Spark partition per slot (k = executor cores; units balanced over the slots by planned size,
`assign_slots`); the task reads its units' records itself and runs the processor (`stylus.backfill.task`),
so records never become Spark rows (faster than a Python data source: BENCHMARKS.md, "Backfill on Spark").
Records mode is a plain RDD job (`parallelize(range(k), k).mapPartitions`) returning row tuples: the first
DataFrame job of a session costs the JVM planning and code generation. Monoid processors run per chunk through
`mapInArrow`, and their per-chunk states are merged by key with the processor's `combine` after a
shuffle (the reduceByKey path). Batch processors (docs/batch.md) run through `mapInArrow` too, on the batch
engine: their records become columns in the task and their results come back as Arrow.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from stylus.api import BatchProcessor, Processor, import_processor_class
from stylus.backfill.bounds import Bound
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.plan import DEFAULT_CHUNK, Plan, Source, plan_ranges
from stylus.backfill.progress import SparkProgress
from stylus.backfill.task import RESULT_SCHEMA, JobSpec, assign_slots, combine_states, run_slots_rows, run_units
from stylus.config.model import Pipeline, TopicSpec

RESULT_DDL = "kind string, topic string, partition int, key binary, value binary, timestamp bigint, n bigint"
assert RESULT_SCHEMA.names == [c.split()[0] for c in RESULT_DDL.split(", ")]


@dataclass
class Emitted:
    topic: str
    key: str | None
    value: Any
    timestamp: int
    input_partition: int


@dataclass
class BackfillResult:
    processor: str
    mode: str
    units: int
    records: int = 0
    outputs: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    states: dict[tuple[str, int], dict[bytes, bytes]] = field(default_factory=dict)
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    emitted: list[Emitted] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)  # each unit's summary: read, outputs, first, last
    span: tuple[float, float] | None = None  # wall clock of the first and the last record any task processed
    upstream: list[BackfillResult] = field(default_factory=list)  # a SQL stage's chain, run first (backfill/chain.py)

    @property
    def processing_seconds(self) -> float:
        """First to last record processed, over all tasks: measured as a stream's replay is (benchmarks)."""
        return self.span[1] - self.span[0] if self.span else 0.0

    def user_state(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Decoded `ctx.state` per input partition."""
        return {tp: {k[1:].decode("utf-8", "surrogateescape"): orjson.loads(v)
                     for k, v in kv.items() if k.startswith(b"s")}
                for tp, kv in self.states.items()}

    def summary(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        lines = [f"{stage.processor}: {stage.records} records in {stage.seconds:.1f}s into a scratch topic "
                 f"(upstream of {self.processor})" for stage in self.upstream]
        lines += [f"{self.processor}: {self.records} records in {self.seconds:.1f}s ({rate:,.0f}/s), "
                  f"{self.units} tasks, mode {self.mode}"]
        lines += [f"  emitted {n} to {t}" for t, n in sorted(self.outputs.items())]
        return "\n".join(lines) + "\n"


def processing_mode(cls: type[Processor], pipeline: Pipeline, name: str) -> str:
    """`batch` for a BatchProcessor (columns through Arrow: `mapInArrow`); `monoid` when the processor is a pure
    MonoidProcessor (no own process/on_timer, no event time); `records` otherwise."""
    if issubclass(cls, BatchProcessor):
        return "batch"
    try:
        from stylus.monoid import MonoidProcessor
    except ImportError:  # pragma: no cover - the monoid module ships with stylus
        return "records"
    spec = pipeline.processors[name]
    if (issubclass(cls, MonoidProcessor) and cls.process is MonoidProcessor.process
            and cls.on_timer is Processor.on_timer and spec.event_time is None):
        return "monoid"
    return "records"


def plan_for(pipeline: Pipeline, name: str, bootstrap: str, start: Bound, stop: Bound, *,
             source: Source = "kafka", archive_root: str | None = None, chunk_size: int = DEFAULT_CHUNK) -> Plan:
    spec = pipeline.processors[name]
    mode = processing_mode(import_processor_class(spec.class_), pipeline, name)
    return plan_ranges(bootstrap, spec.inputs, start, stop, source=source, archive_root=archive_root,
                       chunk_size=chunk_size, per_partition=spec.stateful and mode != "monoid")


def run_plan(spark: Any, pipeline: Pipeline, name: str, plan: Plan, output: OutputTarget | None = None, *,
             return_state: bool = False, progress: bool = False) -> BackfillResult:
    """Run `name` over the planned units. Returns counts, and the state per input partition when asked."""
    output = output or OutputTarget()
    spec = pipeline.processors[name]
    mode = processing_mode(import_processor_class(spec.class_), pipeline, name)
    result = BackfillResult(name, mode, len(plan.units))
    for unit in plan.units:
        result.next_offsets[(unit.topic, unit.partition)] = unit.next_offset
    _prepare_output(output, pipeline, name, plan.bootstrap)
    if not plan.units:
        return result
    job = JobSpec(pipeline=pipeline.model_dump(mode="json", by_alias=True), processor=name,
                  bootstrap=plan.bootstrap, archive_root=plan.archive_root, output=output, mode=mode,
                  return_state=return_state, sys_path=tuple(_import_roots()))
    job_json = job.model_dump_json()
    units_json = [u.model_dump_json() for u in plan.units]
    started = time.monotonic()
    n = len(units_json)
    slots = assign_slots([sum(c.size for c in u.chunks) for u in plan.units],
                         int(spark.sparkContext.defaultParallelism))
    with SparkProgress(spark, f"backfill {name}", enabled=progress):
        if mode == "monoid":
            width = max(1, min(n, int(spark.conf.get("spark.sql.shuffle.partitions"))))
            frame = (spark.range(0, len(slots), 1, len(slots))
                     .mapInArrow(functools.partial(run_units, job_json, units_json, slots), RESULT_DDL)
                     .repartition(width, "topic", "partition", "key")
                     .sortWithinPartitions("topic", "partition", "key", "n")
                     .mapInArrow(functools.partial(combine_states, job_json), RESULT_DDL))
            cols = frame.toArrow().to_pydict()
        elif mode == "batch":  # a task's records stay columns end to end: Arrow in the task and back to the driver
            cols = (spark.range(0, len(slots), 1, len(slots))
                    .mapInArrow(functools.partial(run_units, job_json, units_json, slots), RESULT_DDL)
                    .toArrow().to_pydict())
        else:
            rows = spark.sparkContext.parallelize(range(len(slots)), len(slots)).mapPartitions(
                functools.partial(run_slots_rows, job_json, units_json, slots)).collect()
            cols = dict(zip(RESULT_SCHEMA.names, map(list, zip(*rows, strict=True)), strict=True)) if rows \
                else {col: [] for col in RESULT_SCHEMA.names}
    result.seconds = time.monotonic() - started
    _gather(result, cols, pipeline, want_state=return_state)
    return result


def _gather(result: BackfillResult, cols: dict[str, list[Any]], pipeline: Pipeline, *, want_state: bool) -> None:
    for i, kind in enumerate(cols["kind"]):
        if kind == "done":
            summary = orjson.loads(cols["value"][i])
            result.tasks.append(summary)
            result.records += summary["read"]
            result.outputs.update(summary["outputs"])
            if summary.get("first") is not None:
                first, last = summary["first"], summary["last"]
                result.span = (min(first, result.span[0]), max(last, result.span[1])) if result.span else (first, last)
        elif kind == "state" and want_state:
            tp = (cols["topic"][i], cols["partition"][i])
            result.states.setdefault(tp, {})[bytes(cols["key"][i])] = bytes(cols["value"][i])
        elif kind == "out":
            key = cols["key"][i]
            result.emitted.append(Emitted(cols["topic"][i], None if key is None else bytes(key).decode(
                "utf-8", "surrogateescape"), orjson.loads(cols["value"][i]), cols["timestamp"][i],
                cols["partition"][i]))
    if want_state and result.mode == "monoid":
        from stylus.state.store import PartitionStore

        for tp, offset in result.next_offsets.items():
            result.states.setdefault(tp, {}).update(
                {k: v for k, v in PartitionStore.offset_change(offset).items() if v is not None})
    result.emitted.sort(key=lambda e: (e.input_partition, e.timestamp))


def _prepare_output(output: OutputTarget, pipeline: Pipeline, name: str, bootstrap: str) -> None:
    """Parquet: drop this output's old part files (a re-run replaces them). Topics: create if missing."""
    if output.kind == "parquet" and output.path:
        directory = Path(output.path.removeprefix("file://"))
        if directory.is_dir():
            for old in directory.glob("part-*.parquet"):
                old.unlink()
    elif output.kind in ("topic", "outputs"):
        from stylus.kafka.admin import create_topics

        spec = pipeline.processors[name]
        if output.kind == "topic" and output.topic:
            width = max((pipeline.topics[t].partitions for t in spec.outputs), default=1)
            create_topics(bootstrap, {output.topic: TopicSpec(partitions=width, serde="bytes")})
        else:
            create_topics(bootstrap, {t: pipeline.topics[t] for t in spec.outputs}, pipeline)


def _import_roots() -> list[str]:
    """Where the driver finds processor modules: tasks add these to sys.path (same code, same imports)."""
    roots = [os.getcwd()]
    roots += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    roots += [p for p in sys.path[:1] if p]
    return list(dict.fromkeys(str(Path(r).resolve()) for r in roots))
