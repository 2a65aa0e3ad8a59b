"""Which of a SQL app's stages run on the columnar batch path (docs/sql.md, "Batch compilation"): a pass over the
expanded pipeline that swaps `SqlStage` / `SqlWindowStage` for `BatchSqlStage` / `BatchSqlWindowStage` where the
processor's `batch:` asks for it and the stage can honour it.

`batch: auto` takes the batch form for the kinds of stage where it was measured faster than the per-record one
on the Nexmark apps (`AUTO`, BENCHMARKS.md "Nexmark"): windowed tables (q5, q7) and projections of every row (q0,
q1), not projections with WHERE (q2's selective filter was as fast either way); `always` takes it for every stage
that has one and refuses the app when a stage has none (shuffles and the QUALIFY merge are per-record by design
and never count); `never` keeps every stage per-record.
"""

from __future__ import annotations

from typing import Any

from stylus.config.errors import Problem
from stylus.config.model import Pipeline, ProcessorSpec

STAGE = "stylus.sql.stage:SqlStage"
WINDOW_STAGE = "stylus.sql.stage:SqlWindowStage"
BATCH_STAGE = "stylus.sql.batch:BatchSqlStage"
BATCH_WINDOW_STAGE = "stylus.sql.batch:BatchSqlWindowStage"
BATCH_CLASSES = (BATCH_STAGE, BATCH_WINDOW_STAGE)
#: the stage kinds `batch: auto` runs on the batch path: where it was measured faster (BENCHMARKS.md, "Nexmark")
AUTO = frozenset({"window", "project"})


def stage_kind(spec: ProcessorSpec) -> str | None:
    """`project` (no WHERE), `filter` (a projection with WHERE) or `window` for a stage that may have a batch form
    (other stages: None)."""
    plan = spec.config["sql"]["plan"]
    if spec.class_ == STAGE and plan["kind"] == "project":
        return "project" if plan.get("where") is None else "filter"
    if spec.class_ == WINDOW_STAGE:
        return "window"
    return None


def batch_problem(spec: ProcessorSpec) -> str | None:
    """Why this stage cannot run on the batch path, or None."""
    from stylus.extras import installed

    kind = stage_kind(spec)
    if kind is None:
        return "it is not a projection or a windowed table"
    if not installed("batch"):
        return "the batch path needs the `batch` extra (pip install 'stylus[batch]')"
    from stylus.sql.batch import batch_window_problem, projection_problem

    plan = spec.config["sql"]["plan"]
    problem = batch_window_problem(plan) if kind == "window" else projection_problem(plan)
    if problem is not None:
        return f"{problem} has no columnar form"
    if kind == "window" and spec.event_time is not None and spec.event_time.late == "update":
        return "`event_time.late: update` corrects closed windows one record at a time"
    if kind != "window" and spec.semantics.output_ids == "always":
        return "`output_ids: always` names each output by its input record, which rows run one at a time cannot"
    if spec.dedup is not None and spec.on_error == "stop":
        return "`dedup` with `on_error: stop` is per-record only"
    return None


def compile_batches(pipeline: Pipeline) -> tuple[Pipeline, list[Problem]]:
    """The expanded pipeline with the batch classes where `batch:` asks, and the problems of `batch: always`."""
    changed: dict[str, ProcessorSpec] = {}
    problems: list[Problem] = []
    refused: set[str] = set()
    for name, spec in pipeline.processors.items():
        sql = spec.config.get("sql")
        if spec.class_ is None or not isinstance(sql, dict) or "plan" not in sql:
            continue  # not a compiled SQL stage
        app = str(sql["processor"])
        kind = stage_kind(spec)
        update: dict[str, Any] = {"batch": "auto"}  # decided here: the stage's own spec carries the default
        if spec.batch != "never" and kind is not None:
            problem = batch_problem(spec)
            if problem is None and (spec.batch == "always" or kind in AUTO):
                update["class_"] = BATCH_WINDOW_STAGE if kind == "window" else BATCH_STAGE
            elif problem is not None and spec.batch == "always" and app not in refused:
                refused.add(app)
                problems.append(Problem(f"processors.{app}.batch", f"`batch: always`: table "
                                        f"`{sql['table']}` (processor `{name}`) cannot run on the "
                                        f"batch path: {problem}", "use `batch: auto` (the batch path where it "
                                        "applies and was measured faster) or `batch: never`"))
        changed[name] = spec.model_copy(update=update)
    if not changed:
        return pipeline, problems
    return pipeline.model_copy(update={"processors": {**pipeline.processors, **changed}}), problems
