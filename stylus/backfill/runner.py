"""`stylus backfill` / `stylus replay` without the CLI: resolve the archive, plan, run, seed."""

from __future__ import annotations

from typing import Any

from stylus.archive import DEFAULT_ROOT
from stylus.backfill.bounds import Bound
from stylus.backfill.chain import backfill_chain, chain_of
from stylus.backfill.job import BackfillResult, plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.plan import DEFAULT_CHUNK, Source
from stylus.backfill.seed import seed_monoid_table, seed_state
from stylus.config.model import Pipeline

ARCHIVER_CLASS = "processors.archiver:Archiver"


def archive_root_for(pipeline: Pipeline, name: str) -> str:
    """The `path` of an archiver in the pipeline that archives one of the processor's inputs, else the default."""
    inputs = set(pipeline.processors[name].inputs)
    for spec in pipeline.processors.values():
        if spec.class_ == ARCHIVER_CLASS and inputs & set(spec.inputs):
            return str(spec.config.get("path", DEFAULT_ROOT))
    return DEFAULT_ROOT


def parse_output(value: str | None, *, collect: bool = False) -> OutputTarget:
    """`--output`: a Parquet directory (has a `/`, starts with `.`, a URI or ends in .parquet), `@outputs`
    (the processor's own output topics), or the name of a topic that receives every emitted record."""
    if not value:
        return OutputTarget(kind="collect" if collect else "none")
    if value == "@outputs":
        return OutputTarget(kind="outputs", collect=collect)
    if "/" in value or value.startswith(".") or value.endswith(".parquet"):
        return OutputTarget(kind="parquet", path=value, collect=collect)
    return OutputTarget(kind="topic", topic=value, collect=collect)


def backfill(spark: Any, pipeline: Pipeline, name: str, bootstrap: str, start: Bound, stop: Bound, *,
             output: OutputTarget | None = None, source: Source = "kafka", archive_root: str | None = None,
             seed: bool = False, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> BackfillResult:
    if name not in pipeline.processors:
        raise ValueError(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}")
    if seed and not pipeline.processors[name].stateful:
        raise ValueError(f"--seed-state: processor `{name}` is stateless, it has no state to seed")
    chain = chain_of(pipeline, name)
    if len(chain) > 1:  # a SQL app's stage behind other stages of the app: run them first (backfill/chain.py)
        if seed:
            raise ValueError(f"--seed-state: `{name}` reads what {', '.join(chain[:-1])} of its SQL app write, which "
                             "a backfill runs into scratch topics: its offsets in the app's own topics are unknown. "
                             f"Seed the stages that read the app's input topics instead (--processor {chain[0]}), or "
                             "backfill without --seed-state")
        return backfill_chain(spark, pipeline, name, bootstrap, start, stop, output=output, source=source,
                              archive_root=archive_root or (archive_root_for(pipeline, chain[0])
                                                            if source != "kafka" else None),
                              chunk_size=chunk_size, progress=progress)
    root = archive_root or (archive_root_for(pipeline, name) if source != "kafka" else None)
    plan = plan_for(pipeline, name, bootstrap, start, stop, source=source, archive_root=root, chunk_size=chunk_size)
    result = run_plan(spark, pipeline, name, plan, output, return_state=seed, progress=progress)
    if seed:
        if pipeline.processors[name].state.backend == "postgres":
            seed_monoid_table(pipeline, name, result.states, result.next_offsets)
        else:
            seed_state(pipeline, name, result.states)
    return result
