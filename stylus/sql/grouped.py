"""Plan a GROUP BY without a window: a changelog table (docs/sql.md, "Changelog tables").

`SELECT category, COUNT(*) AS n, SUM(score) AS total FROM events GROUP BY category` has no window to close, so it
never has a final row: its table is the changelog of its groups. Every input row updates its group's aggregates,
and when the group's row changed, the new row is emitted, keyed by the group (a compacted topic then holds each
group's current row). The aggregates are monoids (zero/add/merge), so the table runs on the monoid state backends:
local RocksDB, or PostgreSQL (`state.backend: postgres`), through `stylus.sql.changelog:SqlChangelogStage`.

The plan (`kind: changelog`): `where`, `group` (IRs over an input row), `aggregates`, `select` (IRs over
`(group values, aggregate results, None, None)`, as a window's). HAVING is refused: a changelog row that stops
passing it would need a retraction, which the table has no form for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from stylus.config.errors import Problem
from stylus.config.model import ProcessorSpec
from stylus.sql.errors import fail
from stylus.sql.plan import BOUNDS, Schema, StagePlan, _lower_name, offset_of

if TYPE_CHECKING:
    from stylus.sql.plan import IR, _Query


def plan_changelog(query: _Query, items: list[tuple[str, exp.Expr]], where: IR | None,
                   group_exprs: list[exp.Expr], having: exp.Having | None) -> StagePlan:
    """A GROUP BY query without a window as a changelog table's plan, or the error with its fix."""
    if having is not None:
        raise fail("HAVING on a GROUP BY without a window: a group whose row stops passing it would need its row "
                   "taken back, which a changelog table cannot say", "filter the table's rows downstream (a query "
                   "over this table with WHERE), or group per window (GROUP BY ..., TUMBLE(...)) to filter each "
                   "window's final rows", offset_of(having))
    for _, node in items:
        bound = next((n for n in node.walk() if _lower_name(n) in BOUNDS), None)
        if bound is not None:
            raise fail(f"{_lower_name(bound).upper()} needs a windowed query; this GROUP BY has no window",
                       "group by a window too (GROUP BY ..., TUMBLE(...)), or remove the bound", offset_of(bound))
    query.groups = [query._scalar(g, "GROUP BY") for g in group_exprs]
    select: list[list[Any]] = [[name, query._post(node)] for name, node in items]
    plan: dict[str, Any] = {"kind": "changelog", "where": where, "group": query.groups, "select": select,
                            "aggregates": query.aggregates}
    table = query.table
    schema = Schema(table.name, table.name, tuple(name for name, _ in items), None, None, table.offset, False)
    return StagePlan(table.name, table.offset, query.source, False, plan, schema)


def changelog_problems(name: str, spec: ProcessorSpec, stages: list[StagePlan]) -> list[Problem]:
    """What a changelog table needs from its `sql:` processor's YAML: state for its groups; on PostgreSQL, not to
    be read by another table of the app (those topics are written exactly-once, which the database's own
    transaction cannot be)."""
    problems: list[Problem] = []
    tables = [s for s in stages if s.plan["kind"] == "changelog"]
    if tables and spec.semantics.state is None:
        problems.append(Problem(f"processors.{name}.semantics", f"table `{tables[0].table}` groups without a window: "
                                "its groups' aggregates are state; this processor is stateless",
                                "add `state: exactly_once` (or at_least_once / at_most_once) under `semantics`"))
    read = {s.source.name for s in stages}
    if spec.state.backend == "postgres":
        for table in tables:
            if table.table in read:
                problems.append(Problem(f"processors.{name}.state.backend", f"table `{table.table}` is read by another "
                                        "table of the app, so it is written exactly-once, in a Kafka transaction; "
                                        "with `backend: postgres` its state commits in the database's",
                                        "read the table from another `sql:` processor, or use `backend: rocksdb`"))
    return problems
