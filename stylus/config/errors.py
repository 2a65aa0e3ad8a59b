"""Configuration errors that tell the user where the problem is and what to write instead."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str  # dotted path inside the YAML, e.g. "processors.scorer.semantics"
    message: str
    fix: str
    line: int | None = None
    # a problem inside a file the YAML names (a `sql:` app): that file and the column, so the message points
    # at the SQL itself (`apps/top.sql:4:12`) rather than at the YAML line that names it
    column: int | None = None
    file: str | None = None

    def render(self, file: str) -> str:
        where = self.file or file
        if self.line:
            where += f":{self.line}" + (f":{self.column}" if self.column else "")
        path = self.path or "(top level)"
        return f"{where}: {path}: {self.message}\n    fix: {self.fix}"


class PipelineError(Exception):
    """One or more problems in a pipeline file; str() lists them all."""

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = problems
        super().__init__("\n".join(p.render(file) for p in problems))
