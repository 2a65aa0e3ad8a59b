"""Cross-checks of `tables:` (docs/tables.md): each refuses a table setting that could not be honoured, with
the fix, rather than accept it and fail (or silently join wrongly) once a worker runs."""

from __future__ import annotations

import re
from pathlib import Path

from stylus.config.errors import Problem
from stylus.config.model import NAME_PATTERN, Pipeline, TableSpec


def tables_for(pipeline: Pipeline, processor: str) -> list[str]:
    """The tables `processor` may look up: those it lists under `tables:`, else every table that fits it (a
    global one, or a partitioned one as wide as each of its inputs)."""
    spec = pipeline.processors[processor]
    if spec.tables is not None:
        return list(spec.tables)
    if spec.class_ is None:
        return []
    return [name for name, table in pipeline.tables.items()
            if table.placement == "global" or not _width_mismatch(pipeline, processor, table)]


def parquet_path(pipeline: Pipeline, table: TableSpec) -> Path | None:
    """The table's Parquet snapshot, relative to the pipeline file's directory unless absolute."""
    if table.parquet is None:
        return None
    path = Path(table.parquet)
    if path.is_absolute() or pipeline.source == "<memory>":
        return path
    return Path(pipeline.source).resolve().parent / path


def check_tables(pipeline: Pipeline) -> list[Problem]:
    problems: list[Problem] = []
    name_ok = re.compile(NAME_PATTERN)
    for name, table in pipeline.tables.items():
        where = f"tables.{name}"
        if not name_ok.match(name):
            problems.append(Problem(where, f"`{name}` is not a valid table name",
                                    f"use only letters, digits, '.', '_' and '-' (pattern {NAME_PATTERN})"))
        topic = pipeline.topics.get(table.topic)
        if topic is None:
            problems.append(Problem(f"{where}.topic", f"topic `{table.topic}` is not declared under `topics`",
                                    f"add `{table.topic}: {{partitions: 1, config: {{cleanup.policy: compact}}}}` "
                                    "under `topics`"))
            continue
        fields = [k for k in ("key", "value") if getattr(table, k) is not None]
        if fields and topic.serde != "json":
            problems.append(Problem(f"{where}.{fields[0]}",
                                    f"`{fields[0]}` names fields of JSON objects, but topic `{table.topic}` has "
                                    f"serde {topic.serde}", f"remove `{fields[0]}`, or declare the topic "
                                    "`serde: json`"))
        if table.parquet is not None:
            if table.key is None:
                problems.append(Problem(f"{where}.parquet", "a Parquet snapshot needs the column holding the key",
                                        "add `key: COLUMN` to the table"))
            path = parquet_path(pipeline, table)
            if path is not None and not path.exists():
                problems.append(Problem(f"{where}.parquet", f"`{table.parquet}` not found (looked at {path})",
                                        "give the file's or directory's path relative to the pipeline file, "
                                        "or an absolute one"))
    for proc, spec in pipeline.processors.items():
        if spec.tables is None:
            continue
        where = f"processors.{proc}.tables"
        if spec.tables and spec.class_ is None:
            problems.append(Problem(where, "only a Python `class` processor looks tables up (`ctx.table`)",
                                    "remove `tables`"))
            continue
        for i, name in enumerate(spec.tables):
            listed = pipeline.tables.get(name)
            if listed is None:
                declared = ", ".join(sorted(pipeline.tables)) or "none"
                problems.append(Problem(f"{where}.{i}", f"table `{name}` is not declared under `tables`",
                                        f"declare it (`tables: {{{name}: {{topic: T}}}}`) or use one of: "
                                        f"{declared}"))
                continue
            mismatch = _width_mismatch(pipeline, proc, listed)
            if listed.placement == "partitioned" and mismatch:
                problems.append(Problem(
                    f"{where}.{i}",
                    f"partitioned table `{name}` ({listed.topic}: {pipeline.topics[listed.topic].partitions} "
                    f"partitions) is not co-partitioned with `{proc}`'s input {mismatch}: an instance holds the "
                    "table partitions numbered as its input partitions, so keys would be looked up in the "
                    "wrong partition",
                    f"give `{listed.topic}` the input's partitions under `topics`, or use `placement: global`"))
    return problems


def _width_mismatch(pipeline: Pipeline, processor: str, table: TableSpec) -> str:
    """The first input of `processor` whose partitions differ from the table topic's ('' when none does)."""
    width = pipeline.topics[table.topic].partitions if table.topic in pipeline.topics else None
    for topic in pipeline.processors[processor].inputs:
        spec = pipeline.topics.get(topic)
        if spec is not None and spec.partitions != width:
            return f"`{topic}` ({spec.partitions} partitions)"
    return ""
