"""Plan a query with a JOIN (docs/sql.md, "Joins"): two forms, each compiled onto ordinary processors.

- **Lookup join**: a stream (a table of the app) joined with a table of the pipeline's `tables:` (Laser) on
  `stream_expr = t.<key>`, the table's key column (`key:` of the table, else `key`). Each row looks its key
  up with `ctx.table(name).get(...)` as the row is processed (docs/tables.md: the table as applied so far;
  on Spark, as of the row's timestamp). INNER drops a row without a match, LEFT keeps it with NULLs.
- **Window join**: two streams, each with the same window written after it (`FROM a [10 seconds] JOIN b [10
  seconds] ON a.x = b.y`, or `[10 seconds ADVANCE BY 5 seconds]` hopping), joined on one or more equalities
  between their columns. Each side is re-keyed by the join key into one topic, and a window stage pairs the
  rows of both sides with the same key in the same window when the window closes (the low watermark passes
  its end; `allowed_lateness` applies). INNER emits the pairs, LEFT also the left rows without one.

Columns of both sides live in one namespace, `alias.column` (the alias, or the table's name): the plan's
expressions read `["col", "p.id"]` from a row that holds both sides' columns under those names. Conditions
that read one side only are applied before the join (on the side's stage, or before the lookup); the rest
after it. A window join may GROUP BY (and HAVING) when the groups include a join key: the join stage then holds
each group's pairs whole and aggregates them when the window closes. Otherwise a join's table is the joined rows,
which a further table aggregates (`GROUP BY ..., TUMBLE(window_end, ...)` nests in the join's windows); QUALIFY is
refused.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from stylus.sql.dialect import PumaWindow, TableDef
from stylus.sql.errors import fail
from stylus.sql.plan import (
    _CLAUSE_NAMES,
    BOUNDS,
    IR,
    WINDOW_COLUMNS,
    WINDOW_FUNCTIONS,
    Schema,
    StagePlan,
    _lower_name,
    _Query,
    offset_of,
    output_item,
    unique_names,
)
from stylus.sql.udfs import Function

LOOKUP = "lookup"
WINDOW_JOIN = "window_join"
JOIN_KINDS = (LOOKUP, WINDOW_JOIN)
_AGGREGATE_FIX = ("create the join as its own table (CREATE TABLE pairs AS SELECT ... JOIN ...) and aggregate "
                  "that one: SELECT ... FROM pairs GROUP BY ..., TUMBLE(window_end, INTERVAL '10' SECOND)")


@dataclass(frozen=True)
class LookupTable:
    """A table of the pipeline's `tables:` as a join sees it."""

    name: str
    key: str  # the column ON compares with: the table's `key:` field, else `key`
    columns: tuple[str, ...] | None  # the table's `value:` fields; None: any field of its JSON values
    partitioned: bool  # placement: partitioned (a lookup reads the partition of the row being processed)


@dataclass
class _Side:
    alias: str  # the prefix of its columns in the joined row
    name: str
    offset: int
    schema: Schema | None = None  # a table of the app (a stream)
    lookup: LookupTable | None = None
    window: PumaWindow | None = None
    used: list[str] = field(default_factory=list)  # columns read, in first-use order

    @property
    def columns(self) -> tuple[str, ...] | None:
        if self.schema is not None:
            return self.schema.columns
        assert self.lookup is not None
        declared = self.lookup.columns
        return None if declared is None else (*declared, *([self.lookup.key] if self.lookup.key not in declared
                                                           else []))

    def column(self, name: str) -> str | None:
        """The column `name` names (exact, else the one matching case-insensitively); None if there is none."""
        columns = self.columns
        if columns is None:
            return name
        if name in columns:
            return name
        folded = [c for c in columns if c.lower() == name.lower()]
        return folded[0] if len(folded) == 1 else None

    def prefixed(self, column: str) -> str:
        if column not in self.used:
            self.used.append(column)
        return f"{self.alias}.{column}"


def plan_join(table: TableDef, schemas: dict[str, Schema], functions: dict[str, Function],
              lookups: Mapping[str, LookupTable]) -> StagePlan:
    return _JoinQuery(table, schemas, functions, lookups).plan()


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    """`a AND (b AND c)` -> [a, b, c]."""
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def _and(parts: list[IR]) -> IR | None:
    if not parts:
        return None
    out = parts[0]
    for part in parts[1:]:
        out = ["and", out, part]
    return out


class _JoinQuery(_Query):
    def __init__(self, table: TableDef, schemas: dict[str, Schema], functions: dict[str, Function],
                 lookups: Mapping[str, LookupTable]) -> None:
        super().__init__(table, schemas, functions)
        self.lookups = lookups
        self.sides: list[_Side] = []
        self.bounds_used = False
        self.windowed = False

    # ------------------------------------------------------------------ the query
    def plan(self) -> StagePlan:
        query = self.table.query
        self._join_clauses(query)
        join = query.args["joins"][0]
        self.sides = [self._side(query.args["from_"].this if query.args.get("from_") else None, query),
                      self._side(join.this, join)]
        left, right = self.sides
        if left.alias.lower() == right.alias.lower():
            raise fail(f"both tables of the join are called `{left.alias}`", "give one of them an alias: FROM "
                       f"{left.name} x JOIN {right.name} y ON ...", right.offset)
        outer = self._join_type(join)
        lookup = next((i for i, s in enumerate(self.sides) if s.lookup is not None), None)
        if left.lookup is not None and right.lookup is not None:
            raise fail(f"`{left.name}` and `{right.name}` are both tables of the pipeline: a join reads a stream",
                       "join a stream (an input table of the app, or a table it creates) with a table of the "
                       "pipeline", right.offset)
        if lookup is not None and outer and lookup == 0:
            raise fail(f"LEFT JOIN keeps every row of the left table, here the pipeline's table `{left.name}`: a "
                       "lookup join keeps rows of the stream", f"put the stream first: FROM {right.name} "
                       f"LEFT JOIN {left.name} ON ...", left.offset)
        self.windowed = lookup is None
        self._windows(lookup)
        self.source = self.sides[0 if lookup != 0 else 1].schema  # type: ignore[assignment]
        items = self._join_items(query)
        group, having = query.args.get("group"), query.args.get("having")
        if group is None:
            if having is not None:
                raise fail("HAVING needs GROUP BY", "add GROUP BY, or filter rows with WHERE", offset_of(having))
            for _, node in items:
                self._no_aggregate(node, "SELECT")
        elif lookup is not None:
            raise fail("GROUP BY on a lookup join: a stream has no end to aggregate over, and a lookup join has no "
                       "window", "create the join as its own table and aggregate that one in a window: SELECT ... "
                       "FROM joined GROUP BY ..., TUMBLE(time_col, INTERVAL '1' MINUTE)", offset_of(group))
        for _, node in items:
            self._no_window_function(node)
        on = conjuncts(join.args.get("on"))
        where = conjuncts(query.args["where"].this) if query.args.get("where") is not None else []
        for node in (*on, *where):
            self._no_aggregate(node, "ON" if node in on else "WHERE")
            self._no_window_function(node)
        if outer:  # ON decides which rows match; WHERE filters the joined rows (NULLs included)
            on_parts = [(n, self._scalar(n, "ON")) for n in on]
            where_parts = [(n, self._scalar(n, "WHERE")) for n in where]
        else:  # an inner join: ON and WHERE are one condition (the published `FROM a, b WHERE a.x = b.y` too)
            on_parts, where_parts = [], [(n, self._scalar(n, "WHERE")) for n in (*on, *where)]
        keys, on_rest = self._keys(on_parts if outer else where_parts, join, lookup)
        if not outer:
            where_parts = on_rest
            on_rest = []
        if group is None:
            select = [[name, self._scalar(node, "SELECT")] for name, node in items]
            if lookup is not None:
                return self._lookup_plan(items, select, keys, on_rest, where_parts, lookup, outer)
            return self._window_plan(items, select, keys, on_rest, where_parts, outer)
        self._grouping(group, keys)
        select = [[name, self._post(node)] for name, node in items]
        having_ir = self._post(having.this, dict(items)) if having is not None else None
        return self._window_plan(items, select, keys, on_rest, where_parts, outer, having_ir)

    def _grouping(self, group: exp.Group, keys: list[tuple[IR, IR]]) -> None:
        """The groups of an aggregating window join: they must include a join key, so that the rows of a group are
        the pairs of one key, which the join stage holds whole when the window closes."""
        for node in group.expressions:
            self._no_window_function(node)
        self.groups = [self._scalar(g, "GROUP BY") for g in group.expressions]
        if not any(ir in self.groups for pair in keys for ir in pair):
            first = keys[0][0]
            key = first[1] if first[0] == "col" else "the key"
            raise fail("GROUP BY on a join groups the pairs of each join key: it must include a column the join "
                       "compares", f"add the join key to GROUP BY (GROUP BY {key}, ...), or create the join as its "
                       "own table and aggregate that one (SELECT ... FROM pairs GROUP BY ..., TUMBLE(window_end, "
                       "...))", offset_of(group))

    def _join_clauses(self, query: exp.Select) -> None:
        for key, value in query.args.items():
            if not value or key in ("expressions", "from_", "joins", "where"):
                continue
            node = value[0] if isinstance(value, list) else value
            where = offset_of(node) if isinstance(node, exp.Expr) else None
            where = where if where is not None else self.table.offset
            if key in ("group", "having"):
                continue  # on a window join that groups by its key (`_grouping`)
            if key == "qualify":
                raise fail("QUALIFY is not supported on a join", _AGGREGATE_FIX.replace("aggregate that one",
                                                                                          "rank in that one"), where)
            what, fix = _CLAUSE_NAMES.get(key, (key.upper(), "remove it"))
            raise fail(f"{what} is not supported in a SQL app", fix, where)
        joins = query.args["joins"]
        if len(joins) > 1:
            raise fail("a query joins two tables, not more", "create the first join as its own table (CREATE TABLE "
                       "step AS SELECT ... JOIN ...) and join that table in another query",
                       offset_of(joins[1]) or self.table.offset)

    def _join_type(self, join: exp.Join) -> bool:
        """Whether the join is LEFT (outer); refuses the kinds it cannot run."""
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        where = offset_of(join) or self.table.offset
        if join.args.get("using"):
            raise fail("JOIN ... USING is not supported", "write the condition: ON a.col = b.col", where)
        if kind == "CROSS" or (kind not in ("", "INNER", "OUTER") and side != "LEFT"):
            raise fail(f"a {kind} JOIN pairs every row with every row; a stream has no end to pair with",
                       "join on an equality: JOIN t ON s.col = t.col", where)
        if side in ("RIGHT", "FULL"):
            fix = ("swap the tables and write LEFT JOIN" if side == "RIGHT"
                   else "use LEFT JOIN (the left table's rows kept) or JOIN")
            raise fail(f"{side} JOIN is not supported", fix, where)
        if side == "LEFT" and join.args.get("on") is None:
            raise fail("LEFT JOIN needs ON", "write LEFT JOIN t ON s.col = t.col", where)
        return side == "LEFT"

    def _side(self, node: exp.Expr | None, at: exp.Expr) -> _Side:
        if node is None:
            raise fail("the query has no FROM", "read a table: SELECT ... FROM a JOIN b ON ...", offset_of(at))
        if not isinstance(node, exp.Table) or node.args.get("db") is not None or not isinstance(node.this,
                                                                                              exp.Identifier):
            raise fail("a join reads tables by name (subqueries are not supported)", "create the inner query as "
                       "its own table (CREATE TABLE step AS SELECT ...) and join that", offset_of(node))
        name = node.name
        offset = offset_of(node) or 0
        alias = node.alias or name
        schema = self.schemas.get(name) or next((s for n, s in self.schemas.items() if n.lower() == name.lower()),
                                                None)
        if schema is not None:
            return _Side(alias, schema.name, offset, schema=schema)
        lookup = self.lookups.get(name) or next((t for n, t in self.lookups.items() if n.lower() == name.lower()),
                                                None)
        if lookup is not None:
            return _Side(alias, lookup.name, offset, lookup=lookup)
        known = sorted(self.schemas)
        tables = sorted(self.lookups)
        close = difflib.get_close_matches(name, [*known, *tables], n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise fail(f"unknown table `{name}`: neither a table of the app nor one of the pipeline's `tables:`",
                   f"{hint}declare it above this query (CREATE INPUT TABLE {name}(...) FROM KAFKA('topic')), or "
                   f"under `tables:` in the pipeline YAML for a lookup join; tables of the app: "
                   f"{', '.join(known) or '(none)'}; of the pipeline: {', '.join(tables) or '(none)'}", offset)

    def _windows(self, lookup: int | None) -> None:
        by_table = {w.table_offset: w for w in self.table.windows}
        for side in self.sides:
            side.window = by_table.get(side.offset)
        left, right = self.sides
        if lookup is not None:
            windowed = next((s for s in self.sides if s.window is not None), None)
            if windowed is not None:
                assert windowed.window is not None
                raise fail("a lookup join has no window: each row looks the table up as it is processed",
                           "remove the window, or aggregate the joined rows in a further table", windowed.window.offset)
            return
        missing = next((s for s in self.sides if s.window is None), None)
        if missing is not None:
            other = right if missing is left else left
            example = f"[{_size_text(other.window)}]" if other.window is not None else "[10 seconds]"
            raise fail(f"a join of two streams needs a window on both: `{missing.name}` has none (a stream has no "
                       "end, so its rows would be kept forever)",
                       f"write the same window after both tables: FROM {left.name} {example} JOIN {right.name} "
                       f"{example} ON ...; or declare `{right.name}` under `tables:` in the pipeline YAML for a "
                       "lookup join", missing.offset)
        assert left.window is not None and right.window is not None
        if (left.window.size, left.window.slide) != (right.window.size, right.window.slide):
            raise fail(f"the two sides of a join have different windows ([{_size_text(left.window)}] and "
                       f"[{_size_text(right.window)}]): rows pair within one window",
                       f"give both the same window: [{_size_text(left.window)}]", right.window.offset)
        for side in self.sides:
            assert side.schema is not None and side.window is not None
            if side.schema.time is None:
                raise fail(f"table `{side.name}` has no time column to window by",
                           f"declare it: CREATE INPUT TABLE {side.name}(...) FROM KAFKA('{side.schema.topic}') "
                           "TIME col" if side.schema.input else f"select a time column in the query that "
                           f"creates `{side.name}`", side.window.offset)

    # ------------------------------------------------------------------ columns
    def _column_name(self, column: exp.Column) -> str:
        if column.args.get("db") is not None:
            raise fail(f"`{column.sql()}`: nested fields are not supported", "flatten the field upstream",
                       offset_of(column))
        qualifier = column.table
        name = column.name
        if qualifier:
            side = next((s for s in self.sides if s.alias.lower() == qualifier.lower()), None) or next(
                (s for s in self.sides if s.name.lower() == qualifier.lower()), None)
            if side is None:
                names = " and ".join(f"`{s.alias}`" for s in self.sides)
                raise fail(f"unknown table `{qualifier}` in `{column.sql()}`", f"this query reads {names}",
                           offset_of(column))
            found = side.column(name)
            if found is None:
                self._unknown(column, [side])
            assert found is not None
            return side.prefixed(found)
        definite = [s for s in self.sides if s.columns is not None and s.column(name) is not None]
        if len(definite) > 1:
            a, b = definite
            raise fail(f"column `{name}` is ambiguous: both `{a.alias}` and `{b.alias}` have it",
                       f"qualify it: {a.alias}.{name} or {b.alias}.{name}", offset_of(column))
        if definite:
            found = definite[0].column(name)
            assert found is not None
            return definite[0].prefixed(found)
        if self.windowed and name.lower() in WINDOW_COLUMNS:
            self.bounds_used = True
            return name.lower()
        undeclared = [s for s in self.sides if s.columns is None]
        if undeclared:
            return undeclared[0].prefixed(name)
        self._unknown(column, self.sides)
        raise AssertionError  # _unknown raised

    def _unknown(self, column: exp.Column, sides: list[_Side]) -> None:
        name = column.name
        options = [c for s in sides for c in s.columns or ()]
        close = difflib.get_close_matches(name, options, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        where = " or ".join(f"`{s.name}`" for s in sides)
        fix = "; ".join(f"`{s.alias}` has {', '.join(s.columns or ())}" for s in sides)
        declare = [s for s in sides if s.lookup is not None]
        extra = (f"; the columns of the pipeline's table `{declare[0].name}` are its `value:` fields"
                 if declare else "")
        raise fail(f"unknown column `{name}` in {where}", f"{hint}{fix}{extra}", offset_of(column))

    def _no_aggregate(self, node: exp.Expr, clause: str) -> None:
        for sub in node.walk():
            if self._is_aggregate(sub):
                fix = ("filter groups with HAVING" if clause != "SELECT" else "group the pairs by the join key: GROUP "
                       "BY a.key, ...; or " + _AGGREGATE_FIX)
                raise fail(f"an aggregate in the {clause} of a join", fix, offset_of(sub))

    def _no_window_function(self, node: exp.Expr) -> None:
        for sub in node.walk():
            name = _lower_name(sub)
            if name in WINDOW_FUNCTIONS or name in BOUNDS:
                raise fail(f"{name.upper()} in a join: a join's window is written after each table",
                           "write FROM a [10 seconds] JOIN b [10 seconds] ON ...; `window_start` and `window_end` "
                           "are its bounds", offset_of(sub))

    def _ungrouped(self, column: exp.Column) -> IR:
        """In a grouping join's SELECT and HAVING, `window_start` and `window_end` are the window's bounds."""
        if not column.table and column.name.lower() in WINDOW_COLUMNS and not any(
                s.columns is not None and s.column(column.name) is not None for s in self.sides):
            return ["wstart" if column.name.lower() == "window_start" else "wend"]
        return super()._ungrouped(column)

    def _join_items(self, query: exp.Select) -> list[tuple[str, exp.Expr]]:
        items: list[tuple[str, exp.Expr]] = []
        for node in query.expressions:
            star = isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))
            if star:
                qualifier = node.table if isinstance(node, exp.Column) else ""
                sides = self.sides
                if qualifier:
                    sides = [s for s in self.sides if qualifier.lower() in (s.alias.lower(), s.name.lower())]
                    if not sides:
                        names = " and ".join(f"`{s.alias}`" for s in self.sides)
                        raise fail(f"unknown table `{qualifier}` in `{node.sql()}`", f"this query reads {names}",
                                   offset_of(node))
                for side in sides:
                    if side.columns is None:
                        raise fail(f"`*` on the pipeline's table `{side.name}`, whose columns are not declared",
                                   f"name its columns ({side.alias}.col), or declare them: `value: [...]` under "
                                   f"tables.{side.name}", offset_of(node))
                    items += [(c, exp.column(c, table=side.alias)) for c in side.columns]
                continue
            items.append(output_item(node))
        return unique_names(items, self.table.offset)

    # ------------------------------------------------------------------ conditions
    def _sides_of(self, ir: IR) -> set[int]:
        """Which sides (0, 1) an expression reads."""
        found: set[int] = set()
        stack: list[Any] = [ir]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                if len(item) == 2 and item[0] == "col" and isinstance(item[1], str):
                    alias = item[1].split(".", 1)[0] if "." in item[1] else None
                    found |= {i for i, s in enumerate(self.sides) if s.alias == alias}
                else:
                    stack.extend(item)
        return found

    def _keys(self, parts: list[tuple[exp.Expr, IR]], join: exp.Join,
              lookup: int | None) -> tuple[list[tuple[IR, IR]], list[tuple[exp.Expr, IR]]]:
        """The equalities between the sides ((left IR, right IR) each) and the other conditions."""
        keys: list[tuple[IR, IR]] = []
        rest: list[tuple[exp.Expr, IR]] = []
        for node, ir in parts:
            pair = self._equality(node, ir)
            if pair is not None and lookup is not None:
                table_side = self.sides[lookup]
                assert table_side.lookup is not None
                table_key = ["col", f"{table_side.alias}.{table_side.lookup.key}"]
                stream_ir, table_ir = (pair[1], pair[0]) if lookup == 0 else pair
                # another column of the table (or a second key): a condition on the looked-up row
                pair = None if table_ir != table_key or keys else (stream_ir, table_ir)
            if pair is None:
                rest.append((node, ir))
            else:
                keys.append(pair)
        if keys:
            return keys, rest
        where = offset_of(join.args["on"]) if join.args.get("on") is not None else offset_of(join)
        left, right = self.sides
        if lookup is not None:
            table, stream = self.sides[lookup], self.sides[1 - lookup]
            assert table.lookup is not None
            raise fail(f"a lookup join finds the row of `{table.name}` by its key: the join needs `{stream.alias}.col "
                       f"= {table.alias}.{table.lookup.key}`", f"compare a column of `{stream.name}` with the key "
                       f"column `{table.lookup.key}` of the pipeline's table `{table.name}` (its `key:` field, else "
                       "`key`): ON ... = " f"{table.alias}.{table.lookup.key}", where)
        raise fail("a join of two streams pairs rows with equal keys: it needs an equality between a column of "
                   "each (conditions such as < or BETWEEN alone would compare every pair)",
                   f"add one: ON {left.alias}.col = {right.alias}.col (further conditions may follow with AND)", where)

    def _equality(self, node: exp.Expr, ir: IR) -> tuple[IR, IR] | None:
        """(the left side's IR, the right side's IR) of an equality between the two sides, else None."""
        if not (isinstance(node, exp.EQ) and ir[0] == "bin" and ir[1] == "="):
            return None
        a, b = ir[2], ir[3]
        sa, sb = self._sides_of(a), self._sides_of(b)
        if sa == {0} and sb == {1}:
            return a, b
        if sa == {1} and sb == {0}:
            return b, a
        return None

    # ------------------------------------------------------------------ the two plans
    def _output(self, items: list[tuple[str, exp.Expr]], select: list[list[Any]], keyed: Any,
                windowed: bool) -> tuple[Schema, list[str]]:
        """The joined table's schema and the window bounds its rows get; `keyed`: the expression (or the
        expressions, all equal) the rows' records are keyed by, whose selected column becomes the schema's key."""
        names = [name for name, _ in items]
        options = [] if keyed is None else list(keyed) if isinstance(keyed, tuple) else [keyed]
        key = next((str(name) for name, ir in select if ir in options), None)
        if windowed:
            bounds = [c for c in WINDOW_COLUMNS if c not in names]
            return Schema(self.table.name, self.table.name, (*names, *bounds), "window_end", None,
                          self.table.offset, False, key), bounds
        stream = self.source
        side = next(s for s in self.sides if s.schema is not None)
        time = None if stream.time is None else next(
            (str(name) for name, ir in select if ir == ["col", f"{side.alias}.{stream.time}"]), None)
        time_field = None if time is None or stream.time_field is None else time
        return Schema(self.table.name, self.table.name, tuple(names), time, time_field, self.table.offset, False,
                      key), []

    def _lookup_plan(self, items: list[tuple[str, exp.Expr]], select: list[list[Any]], keys: list[tuple[IR, IR]],
                     on_rest: list[tuple[exp.Expr, IR]], where: list[tuple[exp.Expr, IR]], lookup: int,
                     outer: bool) -> StagePlan:
        stream, table = self.sides[1 - lookup], self.sides[lookup]
        assert table.lookup is not None and stream.schema is not None
        stream_key, _ = keys[0]
        if table.lookup.partitioned and not (stream.schema.key is not None
                                             and stream_key == ["col", f"{stream.alias}.{stream.schema.key}"]):
            raise fail(f"the pipeline's table `{table.name}` is partitioned: a lookup reads the partition of the "
                       f"row being processed, so `{stream.name}` must be keyed by the column compared with its key",
                       f"declare `KEY col` on `{stream.name}` if its producer keys records by that column (and "
                       f"compare that column: ON {stream.alias}.col = {table.alias}.{table.lookup.key}), or give "
                       f"`{table.name}` `placement: global`", offset_of(self.table.query.args["joins"][0]))
        pre = [ir for _, ir in where if self._sides_of(ir) == {1 - lookup}]  # filters before the lookup
        post = [ir for _, ir in where if self._sides_of(ir) != {1 - lookup}]
        plan: dict[str, Any] = {
            "kind": LOOKUP, "table": table.lookup.name, "join": "left" if outer else "inner",
            "stream": [[c, f"{stream.alias}.{c}"] for c in stream.used],
            "lookup": [[c, f"{table.alias}.{c}"] for c in table.used],
            "table_key": f"{table.alias}.{table.lookup.key}",
            "key": stream_key, "pre": _and(pre), "on": _and([ir for _, ir in on_rest]), "where": _and(post),
            "select": select,
        }
        # rows keep their record's key: the stream's KEY column, if selected, still says how they are keyed
        keyed = None if stream.schema.key is None else ["col", f"{stream.alias}.{stream.schema.key}"]
        schema, _ = self._output(items, select, keyed, False)
        return StagePlan(self.table.name, self.table.offset, stream.schema, False, plan, schema)

    def _window_plan(self, items: list[tuple[str, exp.Expr]], select: list[list[Any]], keys: list[tuple[IR, IR]],
                     on_rest: list[tuple[exp.Expr, IR]], where: list[tuple[exp.Expr, IR]],
                     outer: bool, having: IR | None = None) -> StagePlan:
        left, right = self.sides
        assert left.schema is not None and right.schema is not None and left.window is not None
        pushed: list[list[IR]] = [[], []]
        after: list[IR] = []
        for _, ir in where:  # WHERE: a condition on one side's columns filters that side's rows before the join,
            sides = self._sides_of(ir)  # except the right side's under LEFT JOIN (its NULLs are filtered too)
            if len(sides) == 1 and not (outer and sides == {1}):
                pushed[sides.pop()].append(ir)
            else:
                after.append(ir)
        on_after: list[IR] = []
        for _, ir in on_rest:  # ON (LEFT JOIN): a right-side condition filters the right rows before the join
            if self._sides_of(ir) == {1}:
                pushed[1].append(ir)
            else:
                on_after.append(ir)
        window = left.window
        spec = ({"type": "tumbling", "size": window.size} if window.slide is None
                else {"type": "hopping", "size": window.size, "slide": window.slide})
        # the joined rows are keyed by the join key, the grouped ones by their group: a selected column holding it
        # says so to the tables reading them
        keyed = (["group", 0] if len(self.groups) == 1 else None) if self.groups else (
            keys[0] if len(keys) == 1 else None)
        schema, bounds = self._output(items, select, keyed, True)
        # what the join stage reads of each row: the side sends only those columns (a column the side's WHERE or
        # the key alone reads stays behind)
        needed = _columns_in([select, on_after, after, self.groups, self.aggregates])
        plan: dict[str, Any] = {
            "kind": WINDOW_JOIN, "join": "left" if outer else "inner", "window": spec,
            "sides": [{"alias": s.alias, "table": s.name, "columns": [[c, f"{s.alias}.{c}"] for c in s.used],
                       "forward": [f"{s.alias}.{c}" for c in s.used if f"{s.alias}.{c}" in needed],
                       "where": _and(pushed[i]), "key": [k[i] for k in keys], "keep_null": outer and i == 0}
                      for i, s in enumerate(self.sides)],
            "on": _and(on_after), "where": _and(after), "select": select, "bounds": bounds,
            "bounds_used": self.bounds_used,
        }
        if self.groups:  # the pairs of each key aggregated per group: `select` and `having` read the groups
            plan.update({"group": self.groups, "aggregates": self.aggregates, "having": having,
                         "group_by_left": all(self._sides_of(g) <= {0} for g in self.groups)})
        return StagePlan(self.table.name, self.table.offset, left.schema, True, plan, schema, also=(right.schema,))


def _columns_in(plan: Any) -> set[str]:
    """The joined-row columns (`alias.column`) an IR, or any structure of IRs, reads."""
    found: set[str] = set()
    stack = [plan]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            if len(item) == 2 and item[0] == "col" and isinstance(item[1], str):
                found.add(item[1])
            else:
                stack.extend(item)
    return found


def _size_text(window: PumaWindow | None) -> str:
    if window is None:
        return "10 seconds"
    text = _ms_text(window.size)
    return text if window.slide is None else f"{text} ADVANCE BY {_ms_text(window.slide)}"


def _ms_text(ms: int) -> str:
    for unit, size in (("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if ms % size == 0:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms} milliseconds"
