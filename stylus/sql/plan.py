"""Check a parsed app against its tables and turn each created table into a stage plan: plain JSON that the
stage classes (`stylus.sql.stage`) compile into closures when a worker starts.

A created table is one of two kinds:
- **projection** (no window, no aggregate): WHERE + SELECT per row, one output row per input row kept;
- **windowed** (`FROM t [5 minutes]`, or `GROUP BY TUMBLE(...)` / `HOP(...)`): rows grouped per window and
  group, aggregated as they arrive, one output row per group when the window closes.

Groups (the paper's Puma semantics): with GROUP BY, its expressions; in Puma's form without GROUP BY, the
non-aggregated SELECT columns. `topk(col[, k])` in Puma's form *ranks*: the last non-aggregated column is
the item, the others partition the ranking, and each window emits, per partition, one row for each of the k
items with the highest `col` (an item's best value in the window). So Figure 2's
`SELECT category, event, topk(score) AS score FROM events_score [5 minutes]` is the top 10 events per
category by score in every 5-minute window. With GROUP BY, topk(col, k) is the list of the k largest values.

Every problem raises `SqlError` at the offset of the offending node, with the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from stylus.sql.dialect import AppText, InputTable, TableDef, unit_ms
from stylus.sql.errors import SqlError, fail
from stylus.sql.functions import FUNCTIONS, TYPE_NAMES
from stylus.sql.udfs import Function

IR = list[Any]
DEFAULT_K = 10
WINDOW_FUNCTIONS = {"tumble": "tumbling", "hop": "hopping"}
BOUNDS = {"tumble_start": ("tumbling", "wstart"), "tumble_end": ("tumbling", "wend"),
          "hop_start": ("hopping", "wstart"), "hop_end": ("hopping", "wend")}
AGGREGATES = ("count", "sum", "min", "max", "avg", "topk")
WINDOW_COLUMNS = ("window_start", "window_end")
RESERVED = frozenset({*FUNCTIONS, *AGGREGATES, *BOUNDS, *WINDOW_FUNCTIONS})
#: sqlglot node -> IR: binary operators, two-argument functions, one-argument functions
_BINARY: dict[type, str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<",
                            exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_NAMED: dict[type, str] = {exp.Div: "divide", exp.IntDiv: "int_divide", exp.Mod: "mod", exp.Pow: "power"}
_SIMPLE: dict[type, str] = {exp.Upper: "upper", exp.Lower: "lower", exp.Length: "length", exp.Abs: "abs",
                            exp.Floor: "floor", exp.Ceil: "ceil", exp.Sqrt: "sqrt"}
_ALLOWED_CLAUSES = {"expressions", "from_", "where", "group", "having", "qualify"}
_CLAUSE_NAMES = {"distinct": ("SELECT DISTINCT", "group by the columns instead (with a window)"),
                 "joins": ("JOIN", "join upstream in a Python processor, or write one table per input"),
                 "order": ("ORDER BY", "a stream has no end to sort at; use topk(col, k) for a ranking"),
                 "limit": ("LIMIT", "a stream has no end; use topk(col, k) for the best rows of each window"),
                 "with_": ("WITH", "create each step as its own table: CREATE TABLE step AS SELECT ..."),
                 "windows": ("WINDOW", "use GROUP BY TUMBLE(...) or HOP(...)")}


@dataclass(frozen=True)
class Schema:
    """What a query may read from a table: its columns and its time column."""

    name: str
    topic: str
    columns: tuple[str, ...]
    time: str | None  # the column windows are over, as written in SQL
    time_field: str | None  # the JSON field holding it (event_time.field); None: the record timestamp
    offset: int
    input: bool  # an input table (CREATE INPUT TABLE), not a created one
    key: str | None = None  # the column the records are keyed by (`KEY col`): rows of one value share a partition


@dataclass
class StagePlan:
    """One created table as a processor: what the expansion needs, and the JSON plan for the stage class."""

    table: str
    offset: int
    source: Schema  # the table it reads
    windowed: bool
    plan: dict[str, Any]
    schema: Schema  # what later queries read from it
    also: tuple[Schema, ...] = ()  # the other table a window join reads (stylus/sql/join.py)


@dataclass
class _Window:
    type: str  # tumbling | hopping
    size: int
    slide: int
    time: str
    offset: int

    def spec(self) -> dict[str, Any]:
        if self.type == "tumbling":
            return {"type": "tumbling", "size": self.size}
        return {"type": "hopping", "size": self.size, "slide": self.slide}


def input_schema(table: InputTable) -> Schema:
    return Schema(table.name, table.topic, table.columns, table.time, table.time, table.offset, True, table.key)


def plan_app(app: AppText, functions: dict[str, Function],
             lookups: Mapping[str, Any] | None = None) -> list[StagePlan]:
    """Plans for every created table, in file order; a table may read any input table or a table created
    above it, and a JOIN also the pipeline's `tables:` (`lookups`: name -> `stylus.sql.join.LookupTable`)."""
    schemas: dict[str, Schema] = {name: input_schema(t) for name, t in app.inputs.items()}
    stages: list[StagePlan] = []
    for table in app.tables:
        if table.query.args.get("joins"):
            from stylus.sql.join import plan_join  # it plans with this module's _Query

            stage = plan_join(table, schemas, functions, lookups or {})
        else:
            stage = _Query(table, schemas, functions).plan()
        used = _functions_in(stage.plan)
        stage.plan["functions"] = {n: {"path": f.path, "kind": f.kind} for n, f in functions.items() if n in used}
        schemas[table.name] = stage.schema
        stages.append(stage)
    return stages


def _functions_in(plan: Any) -> set[str]:
    """The user functions a plan calls: `["udf", name, ...]` nodes and `{"fn": "udaf", "name": ...}` aggregates."""
    found: set[str] = set()
    stack = [plan]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("fn") == "udaf":
                found.add(item["name"])
            stack.extend(item.values())
        elif isinstance(item, list):
            if len(item) == 3 and item[0] == "udf" and isinstance(item[1], str):
                found.add(item[1])
            stack.extend(item)
    return found


def offset_of(node: exp.Expr) -> int | None:
    """The first character of `node` in the file (sqlglot keeps the offsets of tokens it made nodes from)."""
    best: int | None = None
    for sub in node.walk():
        meta = sub._meta
        if meta and "start" in meta:
            start = int(meta["start"])
            best = start if best is None else min(best, start)
    return best


def _lower_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__.lower()


def _close(word: str, options: list[str]) -> str:
    found = difflib.get_close_matches(word, options, n=1)
    return f"did you mean `{found[0]}`? " if found else ""


@dataclass
class _Query:
    table: TableDef
    schemas: dict[str, Schema]
    functions: dict[str, Function]
    source: Schema = field(init=False)
    alias: str | None = field(init=False, default=None)
    window: _Window | None = field(init=False, default=None)
    groups: list[IR] = field(init=False, default_factory=list)
    aggregates: list[dict[str, Any]] = field(init=False, default_factory=list)

    # ------------------------------------------------------------------ the query as a whole
    def plan(self) -> StagePlan:
        query = self.table.query
        self._clauses(query)
        self.source = self._from(query)
        items = self._items(query)
        where = query.args.get("where")
        having = query.args.get("having")
        qualify = query.args.get("qualify")
        group = query.args.get("group")
        group_exprs = list(group.expressions) if group is not None else []
        self.window = self._window(group_exprs)
        plain_groups = [g for g in group_exprs if _lower_name(g) not in WINDOW_FUNCTIONS]
        where_ir = self._scalar(where.this, "WHERE") if where is not None else None
        aggregated = [n for _, n in items if self._has_aggregate(n)]
        if having is not None:
            aggregated += [having.this]
        if self.window is None:
            if plain_groups and qualify is None:  # GROUP BY without a window: a changelog table, updated per row
                from stylus.sql.grouped import plan_changelog  # it reads this query's groups and aggregates

                return plan_changelog(self, items, where_ir, plain_groups, having)
            if aggregated or plain_groups:
                node = aggregated[0] if aggregated else plain_groups[0]
                raise fail("an aggregate needs a window: a stream has no end to aggregate over",
                           f"add a window after the table, as in `FROM {self.source.name} [5 minutes]`, or group by "
                           f"one: `GROUP BY TUMBLE({self.source.time or 'time_col'}, INTERVAL '5' MINUTE), ...`; or "
                           "GROUP BY columns for a table of each group's current row (updated per input row)",
                           offset_of(node))
            if qualify is not None:
                raise fail("QUALIFY ranks the rows of a window, and this query has none",
                           f"add a window (`FROM {self.source.name} [5 minutes]`, or GROUP BY TUMBLE(...) / HOP(...))",
                           offset_of(qualify))
            return self._projection(items, where_ir)
        if group is None and having is not None:
            raise fail("HAVING needs GROUP BY", "add GROUP BY, or filter rows with WHERE", offset_of(having))
        return self._windowed(items, where_ir, plain_groups, group is not None, having, qualify)

    def _clauses(self, query: exp.Select) -> None:
        for key, value in query.args.items():
            if not value or key in _ALLOWED_CLAUSES:
                continue
            what, fix = _CLAUSE_NAMES.get(key, (key.upper(), "remove it"))
            node = value[0] if isinstance(value, list) else value
            where = offset_of(node) if isinstance(node, exp.Expr) else None
            raise fail(f"{what} is not supported in a SQL app", fix, where if where is not None else self.table.offset)

    def _from(self, query: exp.Select) -> Schema:
        source = query.args.get("from_")
        if source is None:
            raise fail("the query has no FROM", "read a table: SELECT ... FROM input_table", offset_of(query))
        node = source.this
        if not isinstance(node, exp.Table) or node.args.get("db") is not None or not isinstance(node.this,
                                                                                              exp.Identifier):
            raise fail("a query reads one table by name (subqueries are not supported)",
                       "create the inner query as its own table (CREATE TABLE step AS SELECT ...) and read that",
                       offset_of(node))
        name = node.name
        schema = self.schemas.get(name) or next((s for n, s in self.schemas.items() if n.lower() == name.lower()),
                                                None)
        if schema is None:
            known = sorted(self.schemas)
            raise fail(f"unknown table `{name}`",
                       f"{_close(name, known)}declare it above this query (CREATE INPUT TABLE {name}(...) FROM "
                       f"KAFKA('topic') or CREATE TABLE {name} AS SELECT ...); known tables: "
                       f"{', '.join(known) or '(none)'}", offset_of(node))
        self.alias = node.alias or None
        return schema

    def _items(self, query: exp.Select) -> list[tuple[str, exp.Expr]]:
        """(output name, expression) per SELECT item, `*` expanded to the table's columns."""
        items: list[tuple[str, exp.Expr]] = []
        for node in query.expressions:
            if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
                if isinstance(node, exp.Column):
                    self._qualifier(node)
                items += [(c, exp.column(c)) for c in self.source.columns]
                continue
            items.append(output_item(node))
        return unique_names(items, self.table.offset)

    # ------------------------------------------------------------------ windows
    def _window(self, group_exprs: list[exp.Expr]) -> _Window | None:
        found: _Window | None = None
        puma = self.table.window
        if puma is not None:
            found = _Window("tumbling" if puma.slide is None else "hopping", puma.size, puma.slide or puma.size,
                            self._time_column(None, puma.offset), puma.offset)
        for node in group_exprs:
            name = _lower_name(node)
            if name == "session":
                raise fail("SESSION windows are not supported in SQL apps yet", "use TUMBLE or HOP, or a Python "
                           "processor on stylus.windows (session windows)", offset_of(node))
            if name not in WINDOW_FUNCTIONS:
                continue
            if found is not None:
                raise fail("a query has one window", "keep one of `[N unit]`, TUMBLE(...) and HOP(...)",
                           offset_of(node))
            found = self._window_call(node)
        return found

    def _window_call(self, node: exp.Expr) -> _Window:
        kind = WINDOW_FUNCTIONS[_lower_name(node)]
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else []
        want = 2 if kind == "tumbling" else 3
        form = ("TUMBLE(time_col, INTERVAL '1' MINUTE)" if kind == "tumbling"
                else "HOP(time_col, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) (slide, then size)")
        if len(args) != want:
            raise fail(f"{_lower_name(node).upper()} takes {want} arguments, not {len(args)}", f"write {form}",
                       offset_of(node))
        if not isinstance(args[0], exp.Column):
            raise fail(f"the first argument of {_lower_name(node).upper()} is the time column",
                       f"write {form}", offset_of(args[0]))
        time = self._time_column(args[0], offset_of(args[0]))
        sizes = [self._interval(a, form) for a in args[1:]]
        if kind == "tumbling":
            return _Window(kind, sizes[0], sizes[0], time, offset_of(node) or 0)
        slide, size = sizes
        if slide > size:
            raise fail(f"HOP's slide ({slide} ms) is longer than its size ({size} ms): rows between windows "
                       "would belong to none", "write HOP(time_col, slide, size) with slide <= size",
                       offset_of(args[1]))
        return _Window(kind, size, slide, time, offset_of(node) or 0)

    def _time_column(self, column: exp.Column | None, offset: int | None) -> str:
        """The window's column: the source's time column (`TIME col` of an input table)."""
        source = self.source
        if source.time is None:
            fix = (f"declare it: CREATE INPUT TABLE {source.name}(...) FROM KAFKA('{source.topic}') TIME col"
                   if source.input else f"select the time column of `{self.table.name}`'s source in the query "
                   f"that creates `{source.name}`")
            raise fail(f"table `{source.name}` has no time column to window by", fix, offset)
        if column is None:
            return source.time
        name = self._column_name(column)
        if name != source.time:
            raise fail(f"window on a non-time column: `{name}` is not the time column of `{source.name}` "
                       f"(its time column is `{source.time}`)",
                       f"window on `{source.time}`, or declare `TIME {name}` on the input table", offset)
        return name

    def _interval(self, node: exp.Expr, form: str) -> int:
        if isinstance(node, exp.Interval):
            amount = node.this.name if isinstance(node.this, exp.Literal) else None
            unit = node.args.get("unit")
            unit_name = unit.name if unit is not None else ""
            if amount is not None and not unit_name and " " in amount.strip():
                amount, unit_name = amount.split(None, 1)
            scale = unit_ms(unit_name) if unit_name else None
            try:
                value = float(amount) if amount is not None else None
            except ValueError:
                value = None
            if scale is not None and value is not None and value > 0 and float(value * scale).is_integer():
                return int(value * scale)
        raise fail(f"`{node.sql()}` is not a window length", f"write a positive interval such as "
                   f"INTERVAL '1' MINUTE or INTERVAL '10' SECOND: {form}", offset_of(node))

    # ------------------------------------------------------------------ columns
    def _qualifier(self, column: exp.Column) -> None:
        qualifier = column.table
        if qualifier and qualifier.lower() not in {self.source.name.lower(), (self.alias or "").lower()}:
            names = " or ".join(f"`{n}`" for n in (self.source.name, self.alias) if n)
            raise fail(f"unknown table `{qualifier}` in `{column.sql()}`", f"this query reads {names}",
                       offset_of(column))

    def _column_name(self, column: exp.Column) -> str:
        self._qualifier(column)
        if column.args.get("db") is not None:
            raise fail(f"`{column.sql()}`: nested fields are not supported", "flatten the field upstream",
                       offset_of(column))
        name = column.name
        columns = self.source.columns
        if name in columns:
            return name
        folded = [c for c in columns if c.lower() == name.lower()]
        if len(folded) == 1:
            return folded[0]
        declared = ("declare it in the column list of CREATE INPUT TABLE " if self.source.input
                    else "select it in the query that creates ") + self.source.name
        raise fail(f"unknown column `{name}` in table `{self.source.name}`",
                   f"{_close(name, list(columns))}use one of {', '.join(columns)}; or {declared}", offset_of(column))

    # ------------------------------------------------------------------ expressions
    def _has_aggregate(self, node: exp.Expr) -> bool:
        return any(self._is_aggregate(n) for n in node.walk())

    def _is_aggregate(self, node: exp.Expr) -> bool:
        if isinstance(node, exp.Count | exp.Sum | exp.Min | exp.Max | exp.Avg):
            return True
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            return name == "topk" or any(f.kind == "udaf" and n.lower() == name for n, f in self.functions.items())
        return False

    def _scalar(self, node: exp.Expr, where: str) -> IR:
        """An expression over one input row (WHERE, GROUP BY, projections, aggregate arguments)."""

        def sub(n: exp.Expr) -> IR:
            if self._is_aggregate(n):
                fix = "filter groups with HAVING" if where == "WHERE" else "move the aggregate out"
                raise fail(f"an aggregate is not allowed in {where}", fix, offset_of(n))
            if _lower_name(n) in BOUNDS or _lower_name(n) in WINDOW_FUNCTIONS:
                raise fail(f"{_lower_name(n).upper()} is not allowed in {where}",
                           "use window bounds in the SELECT of a windowed query", offset_of(n))
            return self._translate(n, sub, lambda c: ["col", self._column_name(c)])

        return sub(node)

    def _post(self, node: exp.Expr, aliases: dict[str, exp.Expr] | None = None) -> IR:
        """An expression over one group of a closed window: group expressions, aggregates, window bounds.
        `aliases` (HAVING): output column names usable as their expressions, as most engines allow."""
        resolving: set[str] = set()

        def sub(n: exp.Expr) -> IR:
            if self._is_aggregate(n):
                return ["agg", self._aggregate(n)]
            if (aliases and isinstance(n, exp.Column) and not n.table and n.name in aliases
                    and n.name not in self.source.columns and n.name not in resolving):
                resolving.add(n.name)
                try:
                    return sub(aliases[n.name])
                finally:
                    resolving.discard(n.name)
            name = _lower_name(n)
            if name in BOUNDS:
                return self._bound(n)
            if not self._has_aggregate(n) and not any(_lower_name(x) in BOUNDS for x in n.walk()):
                try:
                    ir = self._scalar(n, "SELECT")
                except SqlError:
                    ir = None  # not an input expression (an alias in HAVING; else the error comes below)
                if ir is not None and ir in self.groups:
                    return ["group", self.groups.index(ir)]
            return self._translate(n, sub, self._ungrouped)

        return sub(node)

    def _ungrouped(self, column: exp.Column) -> IR:
        name = self._column_name(column)
        raise fail(f"non-aggregated column `{name}` is not in GROUP BY",
                   f"add `{name}` to GROUP BY, or aggregate it (e.g. MAX({name}))", offset_of(column))

    def _bound(self, node: exp.Expr) -> IR:
        name = _lower_name(node)
        which = BOUNDS[name][1]
        window = self.window
        assert window is not None
        call = exp.Anonymous(this=name.split("_")[0].upper(), expressions=[a.copy() for a in node.expressions]) \
            if isinstance(node, exp.Anonymous) else node
        call.meta.update(node.meta)
        try:
            declared = self._window_call(call)
        except SqlError as exc:
            raise fail(f"{name.upper()}: {exc.problems[0].message}", exc.problems[0].fix,
                       exc.problems[0].offset) from exc
        if (declared.type, declared.size, declared.slide, declared.time) != (window.type, window.size, window.slide,
                                                                            window.time):
            raise fail(f"{name.upper()} names another window than the query's", "give it the same column and "
                       "intervals as the window in GROUP BY (or FROM ... [N unit])", offset_of(node))
        return [which]

    def _aggregate(self, node: exp.Expr) -> int:
        spec = self._aggregate_spec(node)
        if spec not in self.aggregates:
            self.aggregates.append(spec)
        return self.aggregates.index(spec)

    def _aggregate_spec(self, node: exp.Expr) -> dict[str, Any]:
        def arg(n: exp.Expr) -> IR:
            return self._scalar(n, "an aggregate's argument")

        if isinstance(node, exp.Count):
            inner = node.this
            if inner is None or isinstance(inner, exp.Star) or (isinstance(inner, exp.Literal) and not inner.is_string):
                return {"fn": "count_star", "args": []}
            if isinstance(inner, exp.Distinct):
                if len(inner.expressions) != 1:
                    raise fail("COUNT(DISTINCT ...) takes one column", "write COUNT(DISTINCT col)", offset_of(node))
                return {"fn": "count_distinct", "args": [arg(inner.expressions[0])]}
            return {"fn": "count", "args": [arg(inner)]}
        if isinstance(node, exp.Sum | exp.Min | exp.Max | exp.Avg):
            if isinstance(node.this, exp.Distinct):
                raise fail(f"DISTINCT is supported in COUNT only, not in {_lower_name(node).upper()}",
                           f"write {_lower_name(node).upper()}(col)", offset_of(node))
            return {"fn": _lower_name(node), "args": [arg(node.this)]}
        assert isinstance(node, exp.Anonymous)
        name = str(node.this).lower()
        args = list(node.expressions)
        if name == "topk":
            k = self._k(node, args)
            return {"fn": "topk", "args": [arg(args[0])], "k": k}
        udaf = next(f for n, f in self.functions.items() if n.lower() == name)
        return {"fn": "udaf", "name": udaf.name, "args": [arg(a) for a in args]}

    def _k(self, node: exp.Expr, args: list[exp.Expr]) -> int:
        if not args or len(args) > 2:
            raise fail(f"topk takes a column and an optional k, not {len(args)} arguments", "write topk(col) or "
                       "topk(col, 5)", offset_of(node))
        if len(args) == 1:
            return DEFAULT_K
        k = args[1]
        if not (isinstance(k, exp.Literal) and not k.is_string and k.name.isdigit() and int(k.name) >= 1):
            raise fail("topk's k is a whole number >= 1", "write topk(col, 5)", offset_of(k))
        return int(k.name)

    def _translate(self, node: exp.Expr, sub: Callable[[exp.Expr], IR],
                   column: Callable[[exp.Column], IR]) -> IR:
        """One node as IR, its operands by `sub`, its columns by `column`."""
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise fail("`*` is allowed only as a whole SELECT item", "name the columns", offset_of(node))
            return column(node)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return ["lit", node.name]
            text = node.name
            return ["lit", int(text) if text.lstrip("-").isdigit() else float(text)]
        if isinstance(node, exp.Boolean):
            return ["lit", bool(node.this)]
        if isinstance(node, exp.Null):
            return ["lit", None]
        if isinstance(node, exp.Paren | exp.Alias):
            return sub(node.this)
        op = _BINARY.get(type(node))
        if op is not None:
            return ["bin", op, sub(node.this), sub(node.expression)]
        if type(node) in _NAMED:
            return ["fn", _NAMED[type(node)], [sub(node.this), sub(node.expression)]]
        if isinstance(node, exp.DPipe):
            return ["fn", "concat", [sub(node.this), sub(node.expression)]]
        if isinstance(node, exp.Concat):
            return ["fn", "concat", [sub(a) for a in node.expressions]]
        if isinstance(node, exp.And):
            return ["and", sub(node.this), sub(node.expression)]
        if isinstance(node, exp.Or):
            return ["or", sub(node.this), sub(node.expression)]
        if isinstance(node, exp.Not):
            return ["not", sub(node.this)]
        if isinstance(node, exp.Neg):
            return ["neg", sub(node.this)]
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise fail(f"`{node.sql()}`: IS supports NULL only", "write `col IS NULL` or `col = TRUE`",
                           offset_of(node))
            return ["isnull", sub(node.this)]
        if isinstance(node, exp.In):
            if node.args.get("query") is not None or node.args.get("unnest") is not None:
                raise fail("IN (SELECT ...) is not supported", "list the values: col IN (1, 2, 3)", offset_of(node))
            return ["in", sub(node.this), [sub(a) for a in node.expressions]]
        if isinstance(node, exp.Between):
            return ["between", sub(node.this), sub(node.args["low"]), sub(node.args["high"])]
        if isinstance(node, exp.Like | exp.ILike):
            like = ["like", sub(node.this), sub(node.expression), isinstance(node, exp.ILike)]
            return ["not", like] if node.args.get("negate") else like
        if isinstance(node, exp.Escape):
            raise fail("LIKE ... ESCAPE is not supported", "match `%` or `_` literally with a string function "
                       "(POSITION) instead", offset_of(node))
        if isinstance(node, exp.Case):
            operand = sub(node.this) if node.this is not None else None
            default = node.args.get("default")
            return ["case", operand, [[sub(i.this), sub(i.args["true"])] for i in node.args.get("ifs") or []],
                    sub(default) if default is not None else None]
        if isinstance(node, exp.If):
            other = node.args.get("false")
            return ["if", sub(node.this), sub(node.args["true"]), sub(other) if other is not None else ["lit", None]]
        if isinstance(node, exp.Cast | exp.TryCast):
            type_name = node.to.this.name if hasattr(node.to.this, "name") else str(node.to.this)
            cast = TYPE_NAMES.get(type_name.upper())
            if cast is None:
                raise fail(f"CAST to {node.to.sql()} is not supported",
                           "cast to BIGINT, DOUBLE, VARCHAR, BOOLEAN or TIMESTAMP (ms since the epoch)",
                           offset_of(node))
            return ["cast", sub(node.this), cast]
        if isinstance(node, exp.Coalesce):
            return ["coalesce", [sub(node.this), *(sub(a) for a in node.expressions)]]
        if isinstance(node, exp.Nullif):
            return ["nullif", sub(node.this), sub(node.expression)]
        return self._function(node, sub)

    def _function(self, node: exp.Expr, sub: Callable[[exp.Expr], IR]) -> IR:
        if type(node) in _SIMPLE:
            return ["fn", _SIMPLE[type(node)], [sub(node.this)]]
        if isinstance(node, exp.Substring):
            args = [sub(node.this), sub(node.args["start"]) if node.args.get("start") else ["lit", 1]]
            if node.args.get("length") is not None:
                args.append(sub(node.args["length"]))
            return ["fn", "substring", args]
        if isinstance(node, exp.Trim):
            chars = node.expression
            where = str(node.args.get("position") or "BOTH").upper()
            return ["fn", "trim", [sub(node.this), sub(chars) if chars is not None else ["lit", " "], ["lit", where]]]
        if isinstance(node, exp.Replace):
            return ["fn", "replace", [sub(node.this), sub(node.expression), sub(node.args["replacement"])]]
        if isinstance(node, exp.StrPosition) and node.args.get("position") is None:
            return ["fn", "position", [sub(node.args["substr"]), sub(node.this)]]
        if isinstance(node, exp.Round):
            digits = node.args.get("decimals")
            return ["fn", "round", [sub(node.this)] + ([sub(digits)] if digits is not None else [])]
        if isinstance(node, exp.Greatest | exp.Least):
            return ["fn", _lower_name(node), [sub(node.this), *(sub(a) for a in node.expressions)]]
        if isinstance(node, exp.Window):
            raise fail("a window function (OVER) is supported in QUALIFY only",
                       "keep the top rows of each window with QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY "
                       "col DESC) <= n; its rank is not a column", offset_of(node))
        name = _lower_name(node)
        if isinstance(node, exp.Anonymous):
            udf = next((f for n, f in self.functions.items() if n.lower() == name), None)
            if udf is not None and udf.kind == "udf":
                return ["udf", udf.name, [sub(a) for a in node.expressions]]
            if name in WINDOW_FUNCTIONS:
                raise fail(f"{name.upper()} belongs in GROUP BY", f"write GROUP BY {name.upper()}(...), and "
                           f"{name.upper()}_START(...) / {name.upper()}_END(...) for its bounds", offset_of(node))
            if name in BOUNDS:
                raise fail(f"{name.upper()} needs a windowed query", "group by TUMBLE(...) or HOP(...) first",
                           offset_of(node))
        if isinstance(node, exp.Func):
            known = sorted({*FUNCTIONS, *AGGREGATES, *(n.lower() for n in self.functions), *BOUNDS})
            known = [k for k in known if k not in ("divide", "int_divide")]
            raise fail(f"unknown function `{name}`",
                       f"{_close(name, known)}use a built-in function (docs/sql.md: {', '.join(known)}) or register "
                       f"yours: CREATE FUNCTION {name} AS 'module:callable'", offset_of(node))
        raise fail(f"`{node.sql()}` is not supported in a SQL app", "see docs/sql.md for what a query may use",
                   offset_of(node))

    # ------------------------------------------------------------------ the two kinds of table
    def _projection(self, items: list[tuple[str, exp.Expr]], where_ir: IR | None) -> StagePlan:
        select: list[list[Any]] = [[name, self._scalar(node, "SELECT")] for name, node in items]
        time: str | None = None
        if self.source.time is not None:
            time = next((str(name) for name, ir in select if ir == ["col", self.source.time]), None)
        time_field = None if time is None or self.source.time_field is None else time
        plan = {"kind": "project", "where": where_ir, "select": select}
        schema = Schema(self.table.name, self.table.name, tuple(name for name, _ in items), time, time_field,
                        self.table.offset, False)
        return StagePlan(self.table.name, self.table.offset, self.source, False, plan, schema)

    def _windowed(self, items: list[tuple[str, exp.Expr]], where_ir: IR | None,
                  group_exprs: list[exp.Expr], explicit: bool, having: exp.Having | None,
                  qualify: exp.Qualify | None) -> StagePlan:
        window = self.window
        assert window is not None
        plain = [(name, node) for name, node in items if not self._has_aggregate(node)
                 and not any(_lower_name(x) in BOUNDS for x in node.walk())]
        if not explicit:  # Puma: the non-aggregated columns are the group
            group_exprs = [node for _, node in plain if any(isinstance(x, exp.Column) for x in node.walk())]
        self.groups = [self._scalar(g, "GROUP BY") for g in group_exprs]
        ranking = self._ranking(items, plain) if not explicit else None
        if ranking is not None:
            if qualify is not None:
                raise fail("QUALIFY and Puma's ranking topk do not combine", "rank with one of them: topk(col, k) "
                           "without GROUP BY, or GROUP BY with QUALIFY RANK() OVER (...) <= k", offset_of(qualify))
            plan: dict[str, Any] = ranking
        else:
            select = [[name, self._post(node)] for name, node in items]
            plan = {"kind": "window", "select": select, "aggregates": self.aggregates,
                    "having": self._post(having.this, dict(items)) if having is not None else None}
            if qualify is not None:
                from stylus.sql.qualify import plan_qualify  # it reads this query's groups and aggregates

                plan["qualify"] = plan_qualify(self, qualify, dict(items), having is not None)
        names = [name for name, _ in items]
        plan.update({"where": where_ir, "window": window.spec(), "group": self.groups,
                     "bounds": [c for c in WINDOW_COLUMNS if c not in names]})
        columns = (*names, *plan["bounds"])
        schema = Schema(self.table.name, self.table.name, columns, "window_end", None, self.table.offset, False)
        return StagePlan(self.table.name, self.table.offset, self.source, True, plan, schema)

    def _ranking(self, items: list[tuple[str, exp.Expr]],
                 plain: list[tuple[str, exp.Expr]]) -> dict[str, Any] | None:
        """Puma's topk form: one topk over non-aggregated columns, the last of which is the ranked item."""
        tops = [n for _, node in items for n in node.walk()
                if isinstance(n, exp.Anonymous) and str(n.this).lower() == "topk"]
        if not tops:
            return None
        aggregated = [node for _, node in items if self._has_aggregate(node)]
        keyed = [(name, node) for name, node in plain if any(isinstance(x, exp.Column) for x in node.walk())]
        if not keyed:
            return None  # no item to rank: topk is the list of the largest values
        top = tops[0]
        if len(tops) > 1 or len(aggregated) > 1 or aggregated[0] is not top:
            raise fail("in a query without GROUP BY, topk ranks the rows: it must be a whole SELECT item and the "
                       "only aggregate", "select `topk(col) AS name` alone with the columns it ranks, or add GROUP BY "
                       "for other aggregates (then topk(col, k) is the list of the k largest values)",
                       offset_of(top))
        args = list(top.expressions)
        k = self._k(top, args)
        score = self._scalar(args[0], "topk")
        item = self.groups.pop()  # the last non-aggregated column: what is ranked
        select: list[list[Any]] = []
        for name, node in items:
            if node is top:
                select.append([name, ["rank_score"]])
            elif self._has_aggregate(node) is False and any(isinstance(x, exp.Column) for x in node.walk()):
                ir = self._scalar(node, "SELECT")
                select.append([name, ["rank_item"] if ir == item and node is keyed[-1][1] else
                               ["group", self.groups.index(ir)]])
            else:
                select.append([name, self._post(node)])
        return {"kind": "rank", "select": select, "score": score, "item": item, "k": k}


def unique_names(items: list[tuple[str, exp.Expr]], offset: int | None) -> list[tuple[str, exp.Expr]]:
    """`items` (output name, expression), refused when two share a name: a row has one value per column."""
    seen: set[str] = set()
    for name, node in items:
        if name in seen:
            raise fail(f"two output columns are named `{name}`", "give one of them another name with AS",
                       offset_of(node) or offset)
        seen.add(name)
    return items


def output_item(node: exp.Expr) -> tuple[str, exp.Expr]:
    """(output name, expression) of one SELECT item: its alias, a column's own name, else its SQL text."""
    if isinstance(node, exp.Alias):
        return node.alias, node.this
    if isinstance(node, exp.Column):
        return node.name, node
    return node.sql(), node
