"""Puma-style SQL applications compiled onto the processor core (docs/sql.md).

A processor with `sql: FILE` in the pipeline YAML is expanded by the loader (`stylus.sql.expand`) into one
ordinary processor per created table, running `stylus.sql.stage:SqlStage` (filter/projection) or
`stylus.sql.stage:SqlWindowStage` (windowed aggregation on `stylus.windows`) with the compiled plan in its
`config`: semantics, checkpoints, state, backups, dead letters, metrics, deploy, backfill and replay are the
core's own. Loading an app needs sqlglot (`pip install 'stylus[sql]'`); running its stages does not.

Modules: `source` (text, offsets -> line/column), `dialect` (Puma statements around sqlglot), `plan` (checks,
JSON plans), `functions`/`expr` (built-ins, closures), `aggregates`, `udfs`, `stage`, `app`, `expand`.
"""
