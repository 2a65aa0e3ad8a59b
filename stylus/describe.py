"""A short human summary of a pipeline (used by `stylus validate`)."""

from __future__ import annotations

import shlex

from stylus.config.durations import format_duration
from stylus.config.model import Pipeline


def describe(pipeline: Pipeline) -> str:
    lines = [f"pipeline {pipeline.pipeline}: {len(pipeline.topics)} topics, {len(pipeline.processors)} processors"]
    for name in pipeline.topological_order():
        spec = pipeline.processors[name]
        sem = spec.semantics
        state = sem.state or "stateless"
        sql = spec.config.get("sql") if spec.class_ and spec.class_.startswith("stylus.sql.") else None
        origin = f"  (sql: {sql['file']}, table {sql['table']})" if isinstance(sql, dict) else ""
        lines.append(
            f"  {name}: {spec.class_ or 'command: ' + shlex.join(spec.command or ())}{origin}  "
            f"state={state} output={sem.output}  "
            f"checkpoint every {format_duration(spec.checkpoint.interval)}  replicas={spec.replicas}  "
            f"on_error={spec.on_error}"
        )
    return "\n".join(lines) + "\n"
