"""Backfill a SQL app's stage whose input other stages of the same app write: a QUALIFY table's merge (`q5` after
`q5.partial`), a windowed table behind its shuffle, a table over another table of the app.

The topics between an app's stages are the app's own business: a backfill of `q5` over the bids of a range must
give the rows the stream gave for those bids, whether or not the stream ever wrote the candidates of that range
(a new app, an old range, a changed app). So the stage is run with its upstream chain: each upstream stage runs on
Spark as any processor does, over the app's input topics in the range, writing its outputs to a scratch topic of
its own together with the watermark control records a streaming stage publishes (`OutputTarget.marks`); the next
stage reads that scratch topic, its watermark taken from those marks as a streaming stage takes it from the real
topic's (docs/event-time.md). Upstream stages run one task per input partition (each task's marks follow the data
they cover, as an instance's do), whatever their state. The scratch topics are deleted at the end.

Python processors are backfilled one at a time, as before: their topics are part of the pipeline's contract.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from stylus.backfill.bounds import Bound, parse_bound
from stylus.backfill.job import BackfillResult, processing_mode, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.plan import DEFAULT_CHUNK, Plan, Source, plan_ranges
from stylus.config.model import Pipeline

EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def app_of(pipeline: Pipeline, name: str) -> str | None:
    """The `sql:` processor (its YAML name) a compiled stage belongs to, or None for any other processor."""
    sql = pipeline.processors[name].config.get("sql")
    return str(sql["processor"]) if isinstance(sql, dict) and "processor" in sql else None


def chain_of(pipeline: Pipeline, name: str) -> list[str]:
    """`name` and the stages of its app that write its inputs, directly or through other stages, upstream first.
    Just `[name]` for a Python processor or a stage reading the app's input topics only."""
    app = app_of(pipeline, name)
    if app is None:
        return [name]
    members = {n for n in pipeline.processors if app_of(pipeline, n) == app}
    wanted: set[str] = set()
    todo = [name]
    while todo:
        stage = todo.pop()
        if stage in wanted:
            continue
        wanted.add(stage)
        todo += [u for t in pipeline.processors[stage].inputs for u in pipeline.producers_of(t) if u in members]
    return [n for n in pipeline.topological_order() if n in wanted]


def internal_topics(pipeline: Pipeline, chain: list[str]) -> list[str]:
    """The topics a stage of the chain writes and a later stage of it reads."""
    written = {t for n in chain[:-1] for t in pipeline.processors[n].outputs}
    read = {t for n in chain[1:] for t in pipeline.processors[n].inputs}
    return sorted(written & read)


def with_scratch_topics(pipeline: Pipeline, rename: dict[str, str]) -> Pipeline:
    """The pipeline with topics renamed (declared under their new names, with the same settings)."""

    def new(topics: Iterable[str]) -> tuple[str, ...]:
        return tuple(rename.get(t, t) for t in topics)

    processors = {name: spec.model_copy(update={
        "inputs": new(spec.inputs), "outputs": new(spec.outputs),
        "groupings": {rename.get(t, t): g for t, g in spec.groupings.items()}})
        for name, spec in pipeline.processors.items()}
    topics = {rename.get(t, t): s for t, s in pipeline.topics.items()}
    return pipeline.model_copy(update={"processors": processors, "topics": topics})


def plan_stage(pipeline: Pipeline, name: str, bootstrap: str, start: Bound, stop: Bound, scratch: Iterable[str], *,
               per_partition: bool, source: Source = "kafka", archive_root: str | None = None,
               chunk_size: int = DEFAULT_CHUNK) -> Plan:
    """The units of one stage: its input topics in the range (Kafka or the archive), its scratch topics whole."""
    scratch = set(scratch)
    inputs = pipeline.processors[name].inputs
    plans = []
    external = [t for t in inputs if t not in scratch]
    if external:
        plans.append(plan_ranges(bootstrap, external, start, stop, source=source, archive_root=archive_root,
                                 chunk_size=chunk_size, per_partition=per_partition))
    internal = [t for t in inputs if t in scratch]
    if internal:
        plans.append(plan_ranges(bootstrap, internal, EARLIEST, LATEST, chunk_size=chunk_size,
                                 per_partition=per_partition))
    units = [u.model_copy(update={"index": i}) for i, u in enumerate(u for p in plans for u in p.units)]
    return Plan(bootstrap=bootstrap, archive_root=archive_root, units=tuple(units))


def backfill_chain(spark: Any, pipeline: Pipeline, name: str, bootstrap: str, start: Bound, stop: Bound, *,
                   output: OutputTarget | None = None, source: Source = "kafka", archive_root: str | None = None,
                   chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> BackfillResult:
    """Run `name`'s upstream chain (`chain_of`) into scratch topics, then `name` over them into `output`. The
    result is `name`'s, with the upstream stages' results in `upstream`."""
    from stylus.api import import_processor_class
    from stylus.kafka.admin import delete_topics

    chain = chain_of(pipeline, name)
    tag = uuid.uuid4().hex[:8]
    rename = {t: f"stylus-backfill-{tag}.{t}" for t in internal_topics(pipeline, chain)}
    chained = with_scratch_topics(pipeline, rename)
    scratch = list(rename.values())
    upstream: list[BackfillResult] = []
    try:
        for stage in chain:
            last = stage == name
            spec = chained.processors[stage]
            mode = processing_mode(import_processor_class(spec.class_), chained, stage)
            plan = plan_stage(chained, stage, bootstrap, start, stop, scratch, source=source,
                              archive_root=archive_root, chunk_size=chunk_size,
                              per_partition=(spec.stateful and mode != "monoid") if last else True)
            target = output if last else OutputTarget(kind="outputs", marks=True)
            result = run_plan(spark, chained, stage, plan, target, progress=progress)
            if last:
                result.upstream = upstream
                return result
            upstream.append(result)
        raise AssertionError("the chain ends with the stage asked for")  # pragma: no cover
    finally:
        if scratch:
            delete_topics(bootstrap, scratch)
