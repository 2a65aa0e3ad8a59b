"""Problems in a SQL app, each at a place in the file and with the text to write instead: the loader turns
them into the same `Problem`s YAML errors are (`stylus validate` prints `app.sql:LINE:COL: ... fix: ...`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SqlProblem:
    message: str
    fix: str
    offset: int | None = None  # character offset in the file (0-based); None: the file as a whole


class SqlError(Exception):
    """One or more problems in one app; compilation stops at the first statement that has any."""

    def __init__(self, problems: list[SqlProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))


def fail(message: str, fix: str, offset: int | None = None) -> SqlError:
    """The error for one problem (raise it)."""
    return SqlError([SqlProblem(message, fix, offset)])
