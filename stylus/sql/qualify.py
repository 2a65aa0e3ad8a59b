"""Plan `QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY col DESC) <= n` on a windowed table: of the rows a
window emits, keep those whose rank in their partition is at most n; every row tied at a kept rank is kept.

Why QUALIFY: the published Nexmark q5 and q7 keep "the rows equal to the window's maximum" with a JOIN against
a second aggregate, or a subquery with `WHERE rank = 1`; the dialect has neither (a stream join needs state
and timing the core gives a Python processor, not a SELECT). QUALIFY is the standard-SQL window function on
the query itself (BigQuery, Snowflake, Databricks, DuckDB, Teradata), so the app says what it means in one
table, and the dialect stays one-table-per-query.

On a stream a ranking is per window: PARTITION BY must name the window (`window_start` or `window_end`, or
TUMBLE_START/HOP_START/... or an alias of one); other PARTITION BY expressions split the window further.
RANK() and DENSE_RANK() only: ROW_NUMBER() would pick among tied rows arbitrarily, so a replay or a backfill
could keep other rows than the stream did.

The plan (`plan["qualify"]`):
    {"function": "rank" | "dense_rank", "limit": n, "partition": [IR], "order": [[IR, desc, nulls_first]],
     "bounded": bool, "partition_input": [IR], "order_input": [IR]}
IRs are over a closed window's group (as SELECT's). `bounded`: no aggregate, no HAVING, and the ranking reads
group columns only, so each window keeps just the rows that can still rank (stylus/sql/ranking.py) instead
of every group; `partition_input` and `order_input` are then the same expressions over an input row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from stylus.sql.errors import fail
from stylus.sql.plan import WINDOW_COLUMNS, offset_of

if TYPE_CHECKING:
    from stylus.sql.plan import IR, _Query

FORM = "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY col DESC) <= n"
BOUNDS = {"window_start": ["wstart"], "window_end": ["wend"]}


def plan_qualify(query: _Query, node: exp.Qualify, aliases: dict[str, exp.Expr], has_having: bool) -> dict[str, Any]:
    """The QUALIFY clause of a windowed query as its plan, or the error with its fix."""
    window, limit = _condition(node)
    function = window.this
    if isinstance(function, exp.RowNumber):
        raise fail("ROW_NUMBER() picks among tied rows arbitrarily: a replay or a backfill could keep other rows "
                   "than the stream did", "use RANK() (every tied row is kept) or DENSE_RANK()", offset_of(function))
    if not isinstance(function, exp.Rank | exp.DenseRank) or function.expressions:
        raise fail(f"QUALIFY ranks with RANK() or DENSE_RANK(), not `{function.sql()}`", f"write {FORM}",
                   offset_of(function))
    if window.args.get("spec") is not None:
        raise fail("a window frame (ROWS/RANGE BETWEEN ...) means nothing to RANK()", "remove the frame",
                   offset_of(window.args["spec"]))
    order = window.args.get("order")
    if order is None or not order.expressions:
        raise fail("RANK() needs ORDER BY: what ranks a row first", f"write {FORM}", offset_of(window))
    partition: list[IR] = []
    per_window = False
    for item in window.args.get("partition_by") or []:
        ir = _expression(query, item, aliases)
        if ir in BOUNDS.values():
            per_window = True
        else:
            partition.append(ir)
    if not per_window:
        raise fail("a ranking on a stream is per window: PARTITION BY must name the window",
                   "add window_start (or window_end) to PARTITION BY", offset_of(window))
    ordering = [[_expression(query, o.this, aliases), bool(o.args.get("desc")), bool(o.args.get("nulls_first"))]
                for o in order.expressions]
    plan: dict[str, Any] = {"function": "dense_rank" if isinstance(function, exp.DenseRank) else "rank",
                            "limit": limit, "partition": partition, "order": ordering, "bounded": False}
    ranked_by = [*partition, *(o[0] for o in ordering)]
    if not query.aggregates and not has_having and not any(_uses(ir, ("agg", "wstart", "wend")) for ir in ranked_by):
        plan.update(bounded=True, partition_input=[_input(query, ir) for ir in partition],
                    order_input=[_input(query, o[0]) for o in ordering])
    return plan


def _condition(node: exp.Qualify) -> tuple[exp.Window, int]:
    """`RANK() OVER (...) <= n` (or `< n`, or `= 1`): the window function and the highest rank kept."""
    cond = node.this
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not (isinstance(cond, exp.EQ | exp.LTE | exp.LT) and isinstance(cond.this, exp.Window)):
        raise fail("QUALIFY keeps the rows of each window up to a rank", f"write {FORM} (or `= 1`: the first rows)",
                   offset_of(cond))
    bound = cond.expression
    if not (isinstance(bound, exp.Literal) and not bound.is_string and bound.name.isdigit()):
        raise fail(f"`{bound.sql()}` is not a rank: compare RANK() with a whole number", f"write {FORM}",
                   offset_of(bound))
    limit = int(bound.name) - (1 if isinstance(cond, exp.LT) else 0)
    if isinstance(cond, exp.EQ) and limit != 1:
        raise fail(f"`= {limit}` keeps one rank, not the top rows (and a stream may have no row at that rank)",
                   f"write `<= {limit}` for the top {limit}, or `= 1` for the first", offset_of(bound))
    if limit < 1:
        raise fail("no row has a rank below 1: this QUALIFY keeps nothing", f"write {FORM} with n >= 1",
                   offset_of(bound))
    return cond.this, limit


def _expression(query: _Query, node: exp.Expr, aliases: dict[str, exp.Expr]) -> IR:
    """A PARTITION BY or ORDER BY expression over a closed window's group; `window_start`/`window_end` name the
    window's bounds when the SELECT does not define them and the table has no such column."""
    if (isinstance(node, exp.Column) and not node.table and node.name in WINDOW_COLUMNS and node.name not in aliases
            and node.name not in query.source.columns):
        return BOUNDS[node.name]
    return query._post(node, aliases)


def _uses(ir: Any, kinds: tuple[str, ...]) -> bool:
    if not isinstance(ir, list):
        return False
    if ir and ir[0] in kinds:
        return True
    return any(_uses(part, kinds) for part in ir)


def _input(query: _Query, ir: Any) -> Any:
    """A group-only expression over an input row: each `["group", i]` becomes the group's own expression."""
    if isinstance(ir, list):
        if len(ir) == 2 and ir[0] == "group" and isinstance(ir[1], int):
            return query.groups[ir[1]]
        return [_input(query, part) for part in ir]
    return ir
