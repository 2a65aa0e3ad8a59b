"""A JOIN table of a SQL app as processors of the pipeline (called by stylus/sql/expand.py).

- A lookup join runs as one stateless processor (`SqlLookupStage`), named as the table's stage, reading the
  stream's topic, with `tables: [the table]` so the table is caught up before its first row (docs/tables.md).
- A window join runs as three: `<name>.left` and `<name>.right` (`SqlJoinSide`, stateless) write each side's
  rows to `<pipeline>.<name>.join` keyed by the join key (created with the pipeline's topics, as wide as the
  wider input), and `<name>` (`SqlWindowJoinStage`) pairs them per window. The sides publish their inputs'
  watermarks (each with its own time column, `idle_timeout` and `confidence`); `allowed_lateness` and `late`
  apply once, at `<name>`, whose watermark is the lower of the two sides'.
"""

from __future__ import annotations

from typing import Any

from stylus.config.errors import Problem
from stylus.config.model import EventTimeSpec, Pipeline, ProcessorSpec, StateSpec, TopicSpec
from stylus.sql.join import LOOKUP, WINDOW_JOIN, LookupTable
from stylus.sql.joinstage import LOOKUP_STAGE, SIDE_STAGE, WINDOW_JOIN_STAGE

_SOURCE_ONLY = ("idle_timeout", "confidence")


def lookup_tables(pipeline: Pipeline) -> dict[str, LookupTable]:
    """The pipeline's `tables:` as a SQL app's JOIN may read them."""
    return {name: LookupTable(name, table.key or "key", table.value, table.placement == "partitioned")
            for name, table in pipeline.tables.items()}


def join_problems(name: str, spec: ProcessorSpec, stages: list[Any]) -> list[Problem]:
    """YAML settings a join cannot honour."""
    joined = [s for s in stages if s.plan.get("kind") == WINDOW_JOIN]
    if joined and spec.event_time is not None and spec.event_time.late == "update":
        return [Problem(f"processors.{name}.event_time.late", f"table `{joined[0].table}` is a window join, whose "
                        "pairs are emitted once, when each window closes, and its rows then dropped: a late row has "
                        "nothing left to pair with", "use `late: drop` or `late: topic`")]
    return []


def join_stages(pipeline: Pipeline, spec: ProcessorSpec, stage: Any, stage_name: str, display: str, app_name: str,
                processor: str, *, internal: bool) -> tuple[dict[str, ProcessorSpec], dict[str, TopicSpec]]:
    """The processors (and internal topics) of one JOIN table; `internal`: another table of the app reads it,
    so it is written with the guarantee of the app's state (stylus/sql/expand.py, `_internal_semantics`)."""
    from stylus.sql.expand import _internal_semantics, _stage_spec

    def config(plan: dict[str, Any]) -> dict[str, Any]:
        return {"sql": {"file": display, "path": spec.sql, "app": app_name, "processor": processor,
                        "table": stage.table, "plan": plan}}

    timing = {k: getattr(spec.event_time, k) for k in spec.event_time.model_fields_set} if spec.event_time else {}
    made: dict[str, ProcessorSpec] = {}
    topics: dict[str, TopicSpec] = {}
    if stage.plan["kind"] == LOOKUP:
        made[stage_name] = _stage_spec(spec, stage, display, app_name, processor).model_copy(
            update={"class_": LOOKUP_STAGE, "tables": (stage.plan["table"],)})
    else:
        sources = (stage.source, *stage.also)
        widths = [pipeline.topics[s.topic] for s in sources]
        topic = f"{pipeline.pipeline}.{stage_name}.join"
        topics[topic] = TopicSpec(partitions=max(w.partitions for w in widths),
                                  replication_factor=widths[0].replication_factor)
        state_dir = StateSpec.model_validate({"dir": spec.state.dir} if "dir" in spec.state.model_fields_set else {})
        side_timing = {k: v for k, v in timing.items() if k not in ("allowed_lateness", "late")}
        for i, (suffix, source) in enumerate(zip(("left", "right"), sources, strict=True)):
            side = stage.plan["sides"][i]
            plan = {"kind": "join_side", "side": i, "columns": side["columns"], "forward": side["forward"],
                    "where": side["where"], "key": side["key"], "keep_null": side["keep_null"],
                    "functions": stage.plan["functions"]}
            made[f"{stage_name}.{suffix}"] = spec.model_copy(update={
                "sql": None, "class_": SIDE_STAGE, "inputs": (source.topic,), "outputs": (topic,),
                "config": config(plan), "semantics": _internal_semantics(spec, stateful=False), "state": state_dir,
                "dedup": None, "event_time": EventTimeSpec.model_validate({**side_timing, "field": source.time_field}),
            })
        made[stage_name] = spec.model_copy(update={
            "sql": None, "class_": WINDOW_JOIN_STAGE, "inputs": (topic,), "outputs": (stage.table,),
            "config": config(stage.plan),
            "event_time": EventTimeSpec.model_validate({k: v for k, v in timing.items()
                                                        if k not in ("field", *_SOURCE_ONLY)}),
        })
    if internal:
        made[stage_name] = made[stage_name].model_copy(update={
            "semantics": _internal_semantics(spec, stateful=made[stage_name].semantics.state is not None)})
    return made, topics
