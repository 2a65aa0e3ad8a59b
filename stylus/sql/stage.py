"""The processors a SQL app's tables run as: ordinary `Processor` classes on the existing core, configured by
the JSON plan the loader compiled (`config: {sql: {..., plan: {...}}}`, stylus/sql/expand.py).

- `SqlStage`: a projection table. WHERE + SELECT per input row; one output row per row kept, keyed by the
  input record's key, with its timestamp.
- `SqlWindowStage`: a windowed table, a `WindowedProcessor` (tumbling or hopping windows on `ctx.state` and
  timers, closed by the low watermark, `allowed_lateness` and the late-data policy as for any windowed
  processor). The group columns make the window key; the aggregates are window aggregates. When a window
  closes, one row per group (per ranked item in the topk form) with the SELECT's columns and
  `window_start`/`window_end` (ms), keyed by the group, at timestamp `window_end - 1`. With QUALIFY, only
  the groups that rank (stylus/sql/ranking.py); on several input partitions it emits each partition's ranked
  groups as one candidates record per window instead, which `stylus.sql.final:SqlRankStage` merges.

The plan's expressions are compiled into closures here, once per stage (stylus/sql/expr.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from stylus.api import Context, Processor, Record
from stylus.sql.aggregates import Columns, build_aggregate
from stylus.sql.expr import Fn, compile_expr
from stylus.sql.ranking import Entry, Qualifier, top_rows_for
from stylus.sql.udfs import load
from stylus.windows.aggregates import Aggregate, Count, TopK
from stylus.windows.assigners import Hopping, Tumbling
from stylus.windows.processor import WindowedProcessor

WINDOW_TIMER = "\x00w"  # the timers that close windows (stylus/windows/processor.py, `_WINDOW`)


class NotARow(TypeError):
    """A record whose value is not a JSON object: it has no columns (dead-lettered as any failing record)."""


def plan_of(config: Mapping[str, Any] | None) -> dict[str, Any]:
    sql = dict(config or {}).get("sql")
    if not isinstance(sql, Mapping) or "plan" not in sql:
        raise ValueError("a SQL stage is configured by the loader from a `sql:` processor; it has no plan here")
    return dict(sql["plan"])


def _not_a_row(record: Record) -> NotARow:
    return NotARow(f"{record.topic}[{record.partition}]@{record.offset}: the value is a "
                   f"{type(record.value).__name__}, not a JSON object with the table's columns")


def _row_builder(select: list[tuple[str, Fn]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """row -> output row. Up to six columns the dict is written out (no comprehension frame per row: a tenth
    of a projection's cost per record, bench/sql.py)."""
    names = [n for n, _ in select]
    fns = [f for _, f in select]
    if len(select) == 1:
        (k0,), (f0,) = names, fns
        return lambda v: {k0: f0(v)}
    if len(select) == 2:
        (k0, k1), (f0, f1) = names, fns
        return lambda v: {k0: f0(v), k1: f1(v)}
    if len(select) == 3:
        (k0, k1, k2), (f0, f1, f2) = names, fns
        return lambda v: {k0: f0(v), k1: f1(v), k2: f2(v)}
    if len(select) == 4:
        (k0, k1, k2, k3), (f0, f1, f2, f3) = names, fns
        return lambda v: {k0: f0(v), k1: f1(v), k2: f2(v), k3: f3(v)}
    if len(select) == 5:
        (k0, k1, k2, k3, k4), (f0, f1, f2, f3, f4) = names, fns
        return lambda v: {k0: f0(v), k1: f1(v), k2: f2(v), k3: f3(v), k4: f4(v)}
    if len(select) == 6:
        (k0, k1, k2, k3, k4, k5), (f0, f1, f2, f3, f4, f5) = names, fns
        return lambda v: {k0: f0(v), k1: f1(v), k2: f2(v), k3: f3(v), k4: f4(v), k5: f5(v)}
    return lambda v: {name: f(v) for name, f in select}


class SqlStage(Processor):
    """A projection table: WHERE + SELECT on every row (docs/sql.md). Also the shuffle before a windowed
    table whose input has several partitions (plan kind `shuffle`): WHERE, then the row unchanged, keyed by
    its group so that each group's rows meet in one partition of the window stage's input."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(self.config)
        udfs, _ = load(plan.get("functions") or {})
        where = compile_expr(plan["where"], udfs) if plan.get("where") is not None else None
        if plan["kind"] == "shuffle":
            key = _keyer([compile_expr(g, udfs) for g in plan["group"]])
            self.process = _shuffler(where, key)  # type: ignore[method-assign, assignment]
        else:
            row = _row_builder([(n, compile_expr(ir, udfs)) for n, ir in plan["select"]])
            self.process = _projection(where, row)  # type: ignore[method-assign, assignment]

    def is_late(self, event_time: int, watermark: int) -> bool:
        """Never: a row is passed on however late; lateness is judged where windows close, downstream."""
        return False

    def process(self, record: Record, ctx: Context) -> None:
        """Replaced per instance by the table's own steps, bound once (`_projection`, `_shuffler`)."""
        raise NotImplementedError


def _projection(where: Fn | None, row: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Record, Context],
                                                                                              None]:
    def process(record: Record, ctx: Context) -> None:
        value = record.value
        if type(value) is not dict:
            raise _not_a_row(record)
        if where is None or where(value):
            ctx.emit(row(value), key=record.key)

    return process


def _shuffler(where: Fn | None, key: Callable[[dict[str, Any]], str]) -> Callable[[Record, Context], None]:
    def process(record: Record, ctx: Context) -> None:
        value = record.value
        if type(value) is not dict:
            raise _not_a_row(record)
        if where is None or where(value):
            ctx.emit(value, key=key(value))

    return process


def _keyer(groups: list[Fn]) -> Callable[[dict[str, Any]], str]:
    """row -> the window key of its group: one text per distinct tuple of group values (decoded by `_groups`)."""
    if not groups:
        return lambda v: ""
    if len(groups) == 1:
        (g,) = groups

        def one(v: dict[str, Any]) -> str:
            x = g(v)
            if type(x) is int:
                return str(x)  # an int's JSON text, without the encoder's call
            return "=" + x if type(x) is str else orjson.dumps(x).decode()

        return one
    return lambda v: orjson.dumps([g(v) for g in groups]).decode()


class SqlWindowStage(WindowedProcessor):
    """A windowed table: rows aggregated per window and group on the window machinery (docs/sql.md)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        plan = plan_of(config)
        udfs, udafs = load(plan.get("functions") or {})
        spec = plan["window"]
        self.window = window_of(spec)
        self._kind = plan["kind"]
        self._where = compile_expr(plan["where"], udfs) if plan.get("where") is not None else None
        self._n_groups = len(plan["group"])
        self._key = _keyer([compile_expr(g, udfs) for g in plan["group"]])
        self._select = [(n, compile_expr(ir, udfs)) for n, ir in plan["select"]]
        self._bounds = tuple(plan.get("bounds") or ())
        self._having: Fn | None = None
        self._results: Callable[[Any], list[Any]]
        qualify = plan.get("qualify")
        self._bounded = bool(qualify and qualify["bounded"])  # the window keeps its ranked rows only
        self._qualifier = Qualifier(qualify, udfs) if qualify and not qualify["bounded"] else None
        self._candidates = bool(qualify and qualify.get("emit") == "candidates")  # to SqlRankStage
        self._closing: list[tuple[list[Any], list[Any]]] | None = None  # a closing window's groups (QUALIFY)
        if self._kind == "rank":
            self.aggregate = TopK(int(plan["k"]), "score", "item")
            score, item = compile_expr(plan["score"], udfs), compile_expr(plan["item"], udfs)

            def ranked(v: dict[str, Any]) -> Any:
                s = score(v)
                if s is None:
                    return None
                i = item(v)
                return None if i is None else [s, i]

            self._value: Fn = ranked
            self._skip_none = True
            self._results = list
        elif self._bounded:  # one accumulator per window and PARTITION BY value: the rows that can still rank
            assert qualify is not None
            self.aggregate = top_rows_for(qualify, plan["group"], udfs)
            self._key = _keyer([compile_expr(p, udfs) for p in qualify["partition_input"]])
            self._value, self._skip_none = _itself, False
            self._results = lambda acc: []
        else:
            aggregates = [build_aggregate(a, udafs) for a in plan["aggregates"]]
            inputs = [_aggregate_input(a, udfs) for a in plan["aggregates"]]
            if plan.get("having") is not None:
                self._having = compile_expr(plan["having"], udfs)
            self._skip_none = False
            if not aggregates:  # GROUP BY only: each group is a row
                self.aggregate, self._value = Count(), _none
                self._results = lambda acc: []
            elif len(aggregates) == 1:  # one accumulator, no list around it
                agg: Aggregate = aggregates[0]
                self.aggregate, self._value = agg, inputs[0]
                self._results = lambda acc: [agg.result(acc)]
            else:
                columns = Columns(aggregates)
                self.aggregate = columns
                self._value = lambda v: [f(v) for f in inputs]
                self._results = columns.result
        super().__init__(config, name)
        self.process = self._processor()  # type: ignore[method-assign, assignment]

    # ------------------------------------------------------------------ rows in
    def process(self, record: Record, ctx: Context) -> None:
        self._processor()(record, ctx)

    def _processor(self) -> Callable[[Record, Context], None]:
        """`process` with this table's steps bound once: the engine calls it per record."""
        where, value_of, key_of, skip_none = self._where, self._value, self._key, self._skip_none
        add = self.add_tumbling if isinstance(self.window, Tumbling) else self.add

        def process(record: Record, ctx: Context) -> None:
            value = record.value
            if type(value) is not dict:
                raise _not_a_row(record)
            if where is not None and not where(value):
                return
            aggregated = value_of(value)
            if aggregated is None and skip_none:
                return  # topk: a row without a score or an item ranks nothing
            add(ctx, key_of(value), ctx.event_time, aggregated)  # type: ignore[attr-defined]

        return process

    # ------------------------------------------------------------------ rows out
    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if self._bounded:
            if not late:  # QUALIFY refuses `late: update`: a closed window is never re-ranked
                self._emit_ranked(ctx, key, acc, start, end)
            return
        groups = self._groups(key)
        out_key = self._out_key(key, groups)
        bounds = self._bounds
        if self._kind == "rank":
            for entry in acc:  # [score, item], best first
                ctx.emit(self._row((groups, entry, start, end), bounds, start, end), key=out_key,
                         timestamp=end - 1)
            return
        row = (groups, self._results(acc), start, end)
        having = self._having
        if having is not None and not having(row):
            return
        if self._qualifier is not None:
            if self._closing is not None and not late:
                self._closing.append((groups, row[1]))  # ranked once every group of the window is in
            return
        ctx.emit(self._row(row, bounds, start, end), key=out_key, timestamp=end - 1)

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        """A window closing under QUALIFY: its groups are gathered as they are emitted, then ranked."""
        if self._qualifier is None or key[:2] != WINDOW_TIMER:
            super().on_timer(key, timestamp, ctx)
            return
        self._closing = []
        try:
            super().on_timer(key, timestamp, ctx)
            closing = self._closing
        finally:
            self._closing = None
        start = self.window.start(timestamp)  # type: ignore[union-attr]
        for part, entries in self._qualifier.rank(closing, start, timestamp).items():
            self._emit_ranked(ctx, part, entries, start, timestamp)

    def _emit_ranked(self, ctx: Context, part: str, entries: list[Entry], start: int, end: int) -> None:
        """The ranked groups of one window and PARTITION BY value: its rows, or (several input partitions) one
        candidates record for the merging stage, keyed by the window's end."""
        if not entries:
            return
        if self._candidates:
            ctx.emit({"window_start": start, "window_end": end, "partition": part, "entries": entries},
                     key=str(end), timestamp=end - 1)
            return
        bounds = self._bounds
        for _, groups, results in entries:
            ctx.emit(self._row((groups, results, start, end), bounds, start, end), key=group_key(groups),
                     timestamp=end - 1)

    def _row(self, r: tuple[Any, ...], bounds: tuple[str, ...], start: int, end: int) -> dict[str, Any]:
        out = {name: f(r) for name, f in self._select}
        if bounds:
            if "window_start" in bounds:
                out["window_start"] = start
            if "window_end" in bounds:
                out["window_end"] = end
        return out

    def _groups(self, key: str) -> list[Any]:
        n = self._n_groups
        if n == 0:
            return []
        if n == 1:
            return [key[1:] if key[:1] == "=" else orjson.loads(key)]
        return list(orjson.loads(key))

    def _out_key(self, key: str, groups: list[Any]) -> str | None:
        """The output record's Kafka key: the group's value (one column), the JSON list (several), or none."""
        if not groups:
            return None
        if len(groups) == 1:
            value = groups[0]
            return None if value is None else value if type(value) is str else key
        return key


def group_key(groups: list[Any]) -> str | None:
    """The Kafka key of a row of the group with these values: what `_out_key` gives from its window key."""
    if not groups:
        return None
    if len(groups) == 1:
        value = groups[0]
        return None if value is None else value if type(value) is str else orjson.dumps(value).decode()
    return orjson.dumps(groups).decode()


def _none(v: Any) -> None:
    return None


def _itself(v: Any) -> Any:
    return v


def _aggregate_input(spec: dict[str, Any], udfs: dict[str, Any]) -> Fn:
    """row -> what the aggregate adds: its argument, a list of them for a multi-argument UDAF, None for none."""
    args = [compile_expr(a, udfs) for a in spec.get("args") or []]
    if not args:
        return _none
    if len(args) == 1:
        return args[0]
    return lambda v: [f(v) for f in args]


def window_of(spec: Mapping[str, Any]) -> Tumbling | Hopping:
    """The window assigner a plan's `window` entry names."""
    return Tumbling(spec["size"]) if spec["type"] == "tumbling" else Hopping(spec["size"], spec["slide"])
