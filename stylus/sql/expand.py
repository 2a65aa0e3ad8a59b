"""A `sql:` processor of the pipeline YAML, expanded at load time into ordinary processors: one per table
the app creates, so everything after loading (run, deploy, lag, backfill, replay, dlq, backups, metrics)
sees plain `class:` processors.

Names: an app that creates one table runs as one processor named as in the YAML (`top_events`: consumer
group `<pipeline>.top_events`). An app that creates several runs one processor per table, named
`<yaml name>.<table>` (`nexmark_q5.hot_items`), each its own consumer group; a table that reads another
table of the app reads its topic. (Adding a second table to a one-table app renames its processor, so it
starts a new consumer group and state.) A windowed table on several input partitions is shuffled first
(`<name>.shuffle`) unless its input is keyed by a column it groups by (`KEY col`) or it ranks group columns with
QUALIFY; a QUALIFY table on several partitions ranks per partition in `<name>.partial` and merges in `<name>`
(stylus/sql/final.py).

Each stage's `config: {sql: {file, path, app, processor, table, plan}}` says where it comes from (`path` as the
YAML wrote it: `stylus deploy` mounts the file there next to the pipeline) and carries the compiled plan.

What each stage gets from the YAML entry: `semantics`, `checkpoint`, `state`, `on_error`, `batch_size`,
`replicas`, `kafka`, `alerts`, `dedup`, and `event_time` with its `field` set to the table's time column.
A projection stage (no window) is stateless (only `semantics.output` applies; with `dedup` it keeps the
state semantics), keeps `event_time` only to publish a correct watermark to windows downstream (none when
nothing downstream works in event time), and never drops late rows; `late` applies to windowed tables.
A windowed stage needs state (RocksDB: windows are timers).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from stylus.config.errors import Problem
from stylus.config.model import EventTimeSpec, Pipeline, ProcessorSpec, Semantics, StateSpec, TopicSpec

STAGE = "stylus.sql.stage:SqlStage"
WINDOW_STAGE = "stylus.sql.stage:SqlWindowStage"
RANK_STAGE = "stylus.sql.final:SqlRankStage"
LOOKUP_STAGE = "stylus.sql.joinstage:SqlLookupStage"  # JOINs: stylus/sql/joinexpand.py
STAGE_CLASSES = (STAGE, WINDOW_STAGE, RANK_STAGE, LOOKUP_STAGE, "stylus.sql.joinstage:SqlJoinSide",
                 "stylus.sql.joinstage:SqlWindowJoinStage",
                 "stylus.sql.batch:BatchSqlStage", "stylus.sql.batch:BatchSqlWindowStage",  # stylus/sql/batching.py
                 "stylus.sql.changelog:SqlChangelogStage")  # GROUP BY without a window
_SOURCE_ONLY = ("idle_timeout", "confidence")  # stylus/config/applicability.py: they shape source watermarks


class _Refused(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def sql_file(pipeline: Pipeline, spec: ProcessorSpec) -> str:
    """The app's path as shown in messages and read: relative to the pipeline file's directory."""
    assert spec.sql is not None
    if os.path.isabs(spec.sql) or pipeline.source in ("<memory>", "<string>"):
        return os.path.normpath(spec.sql)
    return os.path.normpath(os.path.join(os.path.dirname(pipeline.source), spec.sql))


def expand_sql(pipeline: Pipeline) -> tuple[Pipeline, list[Problem]]:
    """The pipeline with every `sql:` processor replaced by its stages, and the problems found."""
    problems: list[Problem] = []
    processors: dict[str, ProcessorSpec] = {}
    topics = dict(pipeline.topics)
    for name, spec in pipeline.processors.items():
        if spec.sql is None:
            processors[name] = spec
            continue
        try:
            stages, shuffles = _expand(pipeline, name, spec)
        except _Refused as refused:
            problems += refused.problems
            continue
        for stage_name, stage in stages.items():
            if stage_name != name and (stage_name in pipeline.processors or stage_name in processors):
                problems.append(Problem(f"processors.{name}", f"the SQL app runs a processor named `{stage_name}`, "
                                        "a name another processor already has", f"rename that processor, or `{name}`"))
            processors[stage_name] = stage
        for topic, topic_spec in shuffles.items():
            if topic in topics:
                problems.append(Problem("topics", f"`{topic}` is a topic the SQL app `{name}` passes its rows "
                                        "through, and is declared here too", f"rename the topic `{topic}`"))
            topics[topic] = topic_spec
    expanded = pipeline.model_copy(update={"processors": processors, "topics": topics})
    from stylus.sql.batching import compile_batches  # which stages run on the batch path (`batch:`)

    expanded, batch_problems = compile_batches(_internal_event_time(expanded))
    return expanded, problems + batch_problems


def _expand(pipeline: Pipeline, name: str,
            spec: ProcessorSpec) -> tuple[dict[str, ProcessorSpec], dict[str, TopicSpec]]:
    from stylus.extras import EXTRAS, installed

    where = f"processors.{name}.sql"
    if not installed("sql"):
        raise _Refused([Problem(where, f"a `sql:` processor needs {EXTRAS['sql'][0]}, which is not installed",
                                "pip install 'stylus[sql]'")])
    display = sql_file(pipeline, spec)
    try:
        text = Path(display).read_text(encoding="utf-8")
    except OSError as exc:
        raise _Refused([Problem(where, f"cannot read `{display}`: {exc.strerror}",
                                "give the SQL file's path relative to the pipeline file")]) from exc
    except UnicodeDecodeError as exc:
        raise _Refused([Problem(where, f"`{display}` is not UTF-8 text", "save it as UTF-8")]) from exc
    from stylus.sql.app import compile_app
    from stylus.sql.errors import SqlError
    from stylus.sql.joinexpand import join_stages, lookup_tables
    from stylus.sql.source import SqlSource

    source = SqlSource(text, display)
    try:
        app = compile_app(source, lookup_tables(pipeline))
    except SqlError as exc:
        raise _Refused([_at(where, source, p.message, p.fix, p.offset) for p in exc.problems]) from exc
    problems = _check(pipeline, name, spec, app, source)
    if problems:
        raise _Refused(problems)
    several = len(app.stages) > 1
    stages: dict[str, ProcessorSpec] = {}
    shuffles: dict[str, TopicSpec] = {}
    read = {s.name for stage in app.stages for s in (stage.source, *stage.also)}  # tables another table reads
    for stage in app.stages:
        stage_name = f"{name}.{stage.table}" if several else name
        if stage.plan["kind"] in ("lookup", "window_join"):
            made, internal_topics = join_stages(pipeline, spec, stage, stage_name, display, app.name or name, name,
                                                internal=stage.table in read)
            stages.update(made)
            shuffles.update(internal_topics)
            continue
        source_topic = pipeline.topics[stage.source.topic]
        spread = source_topic.partitions > 1
        qualify = stage.plan.get("qualify")
        # with QUALIFY on several partitions, the window stage ranks per partition and a last stage merges
        window_name = f"{stage_name}.partial" if qualify and spread else stage_name
        input_topic: str | None = None
        grouped = stage.windowed or stage.plan["kind"] == "changelog"  # state per group: one partition per group
        if grouped and spread and not _partitioned_by_group(stage) and not (qualify and qualify["bounded"]):
            # a group's rows must meet in one input partition (window state is per partition): shuffle them
            # by the group's key through a topic of the pipeline's own, as a Stylus pipeline re-keys by hand
            input_topic = f"{pipeline.pipeline}.{stage_name}.shuffle"
            shuffles[input_topic] = TopicSpec(partitions=source_topic.partitions,
                                              replication_factor=source_topic.replication_factor)
            shuffle = {"kind": "shuffle", "where": stage.plan["where"], "group": stage.plan["group"],
                       "functions": stage.plan["functions"]}
            stages[f"{stage_name}.shuffle"] = _shuffle_spec(spec, stage, display, app.name or name, name, shuffle,
                                                            input_topic)
            stage.plan = {**stage.plan, "where": None}  # applied by the shuffle
        if qualify is not None:
            stage.plan = {**stage.plan, "qualify": {**qualify, "emit": "candidates" if spread else "rows"}}
        if qualify and spread:
            partial_topic = f"{pipeline.pipeline}.{stage_name}.partial"
            shuffles[partial_topic] = TopicSpec(partitions=1, replication_factor=source_topic.replication_factor)
            # written with the YAML's output guarantee, not the state's as other internal topics are: the merge
            # keeps a group once, so a candidate written twice after a crash changes nothing
            stages[window_name] = _stage_spec(spec, stage, display, app.name or name, name, input_topic=input_topic,
                                              output_topic=partial_topic)
            stages[stage_name] = _rank_spec(spec, stage, display, app.name or name, name, partial_topic)
        else:
            stages[stage_name] = _stage_spec(spec, stage, display, app.name or name, name, input_topic=input_topic)
        if stage.table in read:
            stages[stage_name] = stages[stage_name].model_copy(update={
                "semantics": _internal_semantics(spec, stateful=stages[stage_name].semantics.state is not None)})
    return stages, shuffles


def _at(where: str, source: Any, message: str, fix: str, offset: int | None) -> Problem:
    line, column = source.position(offset if offset is not None else 0)
    return Problem(where, message, fix, line, column, source.file)


def _check(pipeline: Pipeline, name: str, spec: ProcessorSpec, app: Any, source: Any) -> list[Problem]:
    """What the app needs from the YAML: its topics declared (JSON), state for windows, its own time field."""
    where = f"processors.{name}.sql"
    problems: list[Problem] = []
    declared = sorted(pipeline.topics)
    yaml_file = pipeline.source

    def topic_problem(topic: str, offset: int, what: str) -> None:
        spec_ = pipeline.topics.get(topic)
        if spec_ is None:
            close = difflib.get_close_matches(topic, declared, n=1)
            hint = f"did you mean `{close[0]}`? or " if close else ""
            problems.append(_at(where, source, f"topic `{topic}` ({what}) is not declared under `topics` of "
                                f"{yaml_file}", f"{hint}add `{topic}: {{partitions: 1}}` under `topics`", offset))
        elif spec_.serde != "json":
            problems.append(_at(where, source, f"topic `{topic}` ({what}) has serde {spec_.serde}; a SQL table's "
                                "rows are JSON objects", f"declare `{topic}` with `serde: json`", offset))

    read: set[str] = set()
    for stage in app.stages:
        for source_table in (stage.source, *stage.also):
            if source_table.input and source_table.name not in read:
                read.add(source_table.name)
                table = app.text.inputs[source_table.name]
                topic_problem(table.topic, table.topic_offset, f"read by input table `{table.name}`")
        topic_problem(stage.table, stage.offset, f"the output of table `{stage.table}`")
    windowed = [s for s in app.stages if s.windowed]
    if windowed and spec.semantics.state is None:
        problems.append(Problem(f"processors.{name}.semantics", f"table `{windowed[0].table}` is windowed, and its "
                                "windows are state; this processor is stateless",
                                "add `state: exactly_once` (or at_least_once / at_most_once) under `semantics`"))
    if windowed and spec.state.backend != "rocksdb":
        problems.append(Problem(f"processors.{name}.state.backend", f"table `{windowed[0].table}` is windowed: its "
                                "windows close on timers, which live in local RocksDB state",
                                "use `backend: rocksdb` (the default)"))
    ranked = [s for s in app.stages if s.plan.get("qualify") is not None]
    if ranked and spec.event_time is not None and spec.event_time.late == "update":
        problems.append(Problem(f"processors.{name}.event_time.late", f"table `{ranked[0].table}` ranks its windows "
                                "with QUALIFY, once, when each closes: a late row cannot re-rank a window whose "
                                "rows are out", "use `late: drop` or `late: topic`"))
    if getattr(spec, "concurrency", None) is not None:
        problems.append(Problem(f"processors.{name}.concurrency", "a SQL app's processors work on one record at a "
                                "time (their windows follow the watermark, which must not pass records in flight)",
                                "remove `concurrency`"))
    if spec.event_time is not None and "field" in spec.event_time.model_fields_set:
        problems.append(Problem(f"processors.{name}.event_time.field", "a SQL app's event time is its tables' time "
                                "column (`TIME col` of CREATE INPUT TABLE)", "remove `field` here"))
    from stylus.sql.grouped import changelog_problems
    from stylus.sql.joinexpand import join_problems

    return problems + join_problems(name, spec, app.stages) + changelog_problems(name, spec, app.stages)


def _partitioned_by_group(stage: Any) -> bool:
    """Whether the input already holds each group in one partition: it is an input table keyed (`KEY col`) by a
    column the table groups by, so all rows of a group share that column's value and so its partition."""
    key = stage.source.key
    return key is not None and ["col", key] in stage.plan["group"]


def _stage_spec(spec: ProcessorSpec, stage: Any, display: str, app_name: str, processor: str,
                input_topic: str | None = None, output_topic: str | None = None) -> ProcessorSpec:
    source = stage.source
    timing = {k: getattr(spec.event_time, k) for k in spec.event_time.model_fields_set} if spec.event_time else {}
    update: dict[str, Any] = {
        "sql": None,
        "class_": WINDOW_STAGE if stage.windowed else STAGE,
        "inputs": (input_topic or source.topic,),
        "outputs": (output_topic or stage.table,),
        "config": {"sql": {"file": display, "path": spec.sql, "app": app_name, "processor": processor,
                           "table": stage.table, "plan": stage.plan}},
    }
    if stage.windowed:
        update["event_time"] = EventTimeSpec.model_validate({**timing, "field": source.time_field})
        return spec.model_copy(update=update)
    if stage.plan["kind"] == "changelog":  # monoid state, the YAML's semantics and backend; no event time
        return spec.model_copy(update={**update, "class_": "stylus.sql.changelog:SqlChangelogStage",
                                       "event_time": None})
    if spec.dedup is None:  # a projection keeps no state
        semantics: dict[str, Any] = {"output": spec.semantics.output}
        if "output_ids" in spec.semantics.model_fields_set:
            semantics["output_ids"] = spec.semantics.output_ids
        update["semantics"] = Semantics.model_validate(semantics)
        update["state"] = StateSpec.model_validate({"dir": spec.state.dir} if "dir" in spec.state.model_fields_set
                                                   else {})
    # a projection publishes the watermark of its time column, for the windows downstream
    update["event_time"] = EventTimeSpec.model_validate(
        {**{k: v for k, v in timing.items() if k != "late"}, "field": source.time_field}
    ) if source.time_field is not None else None
    return spec.model_copy(update=update)


def _shuffle_spec(spec: ProcessorSpec, stage: Any, display: str, app_name: str, processor: str,
                  plan: dict[str, Any], topic: str) -> ProcessorSpec:
    """The stateless stage that re-keys a windowed table's rows by group: WHERE applied, rows unchanged. It
    publishes its input's watermark (the time column's, with the YAML's source settings) and leaves
    `allowed_lateness` to the window stage, so a window closes as it would without the shuffle."""
    timing = {k: getattr(spec.event_time, k) for k in spec.event_time.model_fields_set
              if k not in ("allowed_lateness", "late")} if spec.event_time else {}
    return spec.model_copy(update={
        "sql": None, "class_": STAGE, "inputs": (stage.source.topic,), "outputs": (topic,),
        "config": {"sql": {"file": display, "path": spec.sql, "app": app_name, "processor": processor,
                           "table": stage.table, "plan": plan}},
        "semantics": _internal_semantics(spec, stateful=False),
        "state": StateSpec.model_validate({"dir": spec.state.dir} if "dir" in spec.state.model_fields_set else {}),
        "dedup": None,
        "event_time": EventTimeSpec.model_validate({**timing, "field": stage.source.time_field}),
    })


def _rank_spec(spec: ProcessorSpec, stage: Any, display: str, app_name: str, processor: str,
               topic: str) -> ProcessorSpec:
    """The stage that merges a QUALIFY table's per-partition candidates (stylus/sql/final.py) and writes the
    table. Its event time is the candidates' timestamps, its watermark the window stage's through `topic`:
    lateness was judged there once, so none here."""
    plan = {key: stage.plan[key] for key in ("select", "bounds", "window", "qualify", "functions")}
    timing = {k: getattr(spec.event_time, k) for k in spec.event_time.model_fields_set
              if k not in ("allowed_lateness", "late", "field", *_SOURCE_ONLY)} if spec.event_time else {}
    return spec.model_copy(update={
        "sql": None, "class_": RANK_STAGE, "inputs": (topic,), "outputs": (stage.table,),
        "config": {"sql": {"file": display, "path": spec.sql, "app": app_name, "processor": processor,
                           "table": stage.table, "plan": {"kind": "merge", **plan}}},
        "dedup": None,
        "event_time": EventTimeSpec.model_validate(timing),
    })


def _internal_semantics(spec: ProcessorSpec, *, stateful: bool) -> Semantics:
    """A stage whose output another stage of the app reads writes it with the guarantee the app's state has
    (exactly-once state: exactly-once output), so the final tables' aggregates count each input row as the
    YAML's `semantics.state` promises; the YAML's `output` applies to the tables nothing else in the app reads."""
    mode = spec.semantics.state or spec.semantics.output
    return Semantics.model_validate({"state": spec.semantics.state, "output": mode} if stateful else {"output": mode})


def _internal_event_time(pipeline: Pipeline) -> Pipeline:
    """Stages reading another table of their app take their watermark from its stage: the YAML's
    source-only settings (`idle_timeout`, `confidence`) stay with the stages that read the input topics."""
    changed: dict[str, ProcessorSpec] = {}
    for name, spec in pipeline.processors.items():
        timing = spec.event_time
        if spec.class_ not in STAGE_CLASSES or timing is None or not any(k in timing.model_fields_set
                                                                         for k in _SOURCE_ONLY):
            continue
        processor = spec.config["sql"]["processor"]
        reads_own_app = any(
            other.class_ in STAGE_CLASSES and other.config["sql"]["processor"] == processor
            and other.outputs[0] == spec.inputs[0] for other_name, other in pipeline.processors.items()
            if other_name != name)
        if reads_own_app:
            kept = {k: getattr(timing, k) for k in timing.model_fields_set if k not in _SOURCE_ONLY}
            changed[name] = spec.model_copy(update={"event_time": EventTimeSpec.model_validate(kept)})
    if changed:
        pipeline = pipeline.model_copy(update={"processors": {**pipeline.processors, **changed}})
    return _terminal_projections(pipeline)


def _terminal_projections(pipeline: Pipeline) -> Pipeline:
    """A projection stage keeps `event_time` only to publish its input's watermark: where nothing downstream
    works in event time, it has none (the engine then tracks no time for it, which costs per record)."""
    from stylus.eventtime.topology import publishes

    changed = {name: spec.model_copy(update={"event_time": None}) for name, spec in pipeline.processors.items()
               if spec.class_ in (STAGE, LOOKUP_STAGE) and spec.event_time is not None
               and spec.config["sql"]["plan"]["kind"] in ("project", "lookup") and not publishes(pipeline, name)}
    if not changed:
        return pipeline
    return pipeline.model_copy(update={"processors": {**pipeline.processors, **changed}})


def stages_of(pipeline: Pipeline, name: str) -> list[str]:
    """The processors a `sql:` processor named `name` in the YAML runs as (its own name for a one-table app)."""
    return [n for n, spec in pipeline.processors.items()
            if n == name or (spec.class_ in STAGE_CLASSES and spec.config["sql"]["processor"] == name)]
