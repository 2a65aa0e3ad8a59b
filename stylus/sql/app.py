"""A SQL app from its text to stage plans: read the statements (`dialect`), import its functions (`udfs`),
check and plan every created table (`plan`). Needs sqlglot (the `sql` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stylus.sql.dialect import AppText, read_app
from stylus.sql.plan import RESERVED, StagePlan, plan_app
from stylus.sql.source import SqlSource
from stylus.sql.udfs import resolve


@dataclass(frozen=True)
class CompiledApp:
    name: str | None  # CREATE APPLICATION's, if given
    text: AppText
    stages: list[StagePlan]


def compile_app(source: SqlSource, lookups: Mapping[str, Any] | None = None) -> CompiledApp:
    """Raises SqlError (offsets into `source`) at the first problem. `lookups`: the pipeline's tables a JOIN
    may look up (name -> `stylus.sql.join.LookupTable`)."""
    text = read_app(source)
    functions = resolve(text.functions, RESERVED)
    return CompiledApp(text.name, text, plan_app(text, functions, lookups))
