"""The processors a JOIN runs as (docs/sql.md, "Joins"; plans from stylus/sql/join.py), on the existing core.

- `SqlLookupStage`: a stream joined with a table of the pipeline (`tables:`). Per row: the stream-only
  conditions, then `ctx.table(name).get(key)` (the table as applied so far; on Spark, as of the row's
  timestamp: docs/tables.md), then the other conditions and the SELECT. One output row per row kept, keyed by
  the input record's key, with its timestamp: stateless, like a projection.
- `SqlJoinSide`: one side of a window join. Per row: that side's conditions, then the row (the columns the
  query reads, named `alias.column`) to the join topic, keyed by the join key (so both sides' rows of a key
  meet in one partition) and stamped with the row's event time.
- `SqlWindowJoinStage`: a `WindowedProcessor` over the join topic. Each window and key keeps both sides'
  rows in `ctx.state`; when the window closes (a timer: the low watermark passed its end, which
  `allowed_lateness` holds back), it pairs them, emits the rows (or, with GROUP BY, which includes the join
  key, one row per group of pairs), and the state goes. A row arriving after its windows closed is late
  (`event_time.late`: dropped or sent to the late topic), as in any windowed table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from stylus.api import Context, Processor, Record
from stylus.sql.aggregates import build_aggregate
from stylus.sql.expr import Fn, compile_expr
from stylus.sql.stage import (
    _aggregate_input,
    _keyer,
    _not_a_row,
    _row_builder,
    group_key,
    plan_of,
    window_of,
)
from stylus.sql.udfs import load
from stylus.windows.aggregates import Aggregate
from stylus.windows.assigners import Tumbling
from stylus.windows.processor import WindowedProcessor

LOOKUP_STAGE = "stylus.sql.joinstage:SqlLookupStage"
SIDE_STAGE = "stylus.sql.joinstage:SqlJoinSide"
WINDOW_JOIN_STAGE = "stylus.sql.joinstage:SqlWindowJoinStage"
JOIN_STAGE_CLASSES = (LOOKUP_STAGE, SIDE_STAGE, WINDOW_JOIN_STAGE)


def _prefixer(columns: list[list[str]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A side's row (its JSON object) -> its columns under their joined names (`alias.column`)."""
    pairs = [(c, p) for c, p in columns]
    return lambda v: {p: v.get(c) for c, p in pairs}


def _value(x: Any) -> Any:
    """A key value as SQL compares it: 2.0 = 2."""
    return int(x) if type(x) is float and x.is_integer() else x


def key_text(values: list[Any]) -> str | None:
    """The join key of a row: one text per distinct tuple of values, the type kept (the number 5 and the
    string '5' are different keys, as they are unequal in SQL); None when a value is NULL (it matches nothing)."""
    if len(values) == 1:
        x = _value(values[0])
        if x is None:
            return None
        if type(x) is int:
            return str(x)
        return "=" + x if type(x) is str else orjson.dumps(x).decode()
    if any(x is None for x in values):
        return None
    return orjson.dumps([_value(x) for x in values]).decode()


def record_key(text: str) -> str | None:
    """The output record's key for a join key text: a string's value, a number's digits, else the JSON."""
    if not text:
        return None
    return text[1:] if text[0] == "=" else text


class SqlLookupStage(Processor):
    """A lookup join (plan kind `lookup`)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(self.config)
        udfs, _ = load(plan.get("functions") or {})

        def opt(ir: Any) -> Fn | None:
            return None if ir is None else compile_expr(ir, udfs)

        # the key and the conditions before the lookup read the stream's columns only: compiled over its value
        names = {p: c for c, p in plan["stream"]}
        self.process = _looker(  # type: ignore[method-assign, assignment]
            plan["table"], plan["join"] == "left", _prefixer(plan["stream"]), [(c, p) for c, p in plan["lookup"]],
            plan["table_key"], compile_expr(_unprefixed(plan["key"], names), udfs),
            opt(_unprefixed(plan["pre"], names)), opt(plan["on"]), opt(plan["where"]),
            _row_builder([(n, compile_expr(ir, udfs)) for n, ir in plan["select"]]))

    def is_late(self, event_time: int, watermark: int) -> bool:
        """Never: a row is joined however late; lateness is judged where windows close, downstream."""
        return False

    def process(self, record: Record, ctx: Context) -> None:
        """Replaced per instance by the join's steps, bound once (`_looker`)."""
        raise NotImplementedError


def _looker(table: str, outer: bool, stream_row: Callable[[dict[str, Any]], dict[str, Any]],
            columns: list[tuple[str, str]], table_key: str, key: Fn, pre: Fn | None, on: Fn | None,
            where: Fn | None, select: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Record, Context], None]:
    nulls = {p: None for _, p in columns}
    key_column = next((c for c, p in columns if p == table_key), None)

    def process(record: Record, ctx: Context) -> None:
        value = record.value
        if type(value) is not dict:
            raise _not_a_row(record)
        if pre is not None and not pre(value):
            return
        k = _value(key(value))
        found = None if k is None else ctx.table(table).get(k)
        row = stream_row(value)
        matched = False
        if found is not None:
            if type(found) is not dict:
                raise TypeError(f"table `{table}`: the value of key {k!r} is a {type(found).__name__}, not a JSON "
                                "object with columns")
            for c, p in columns:
                row[p] = found.get(c)
            if key_column is not None and row[table_key] is None:
                row[table_key] = k  # the key column is the record's key when the value does not repeat it
            matched = on is None or bool(on(row))
        if not matched:
            if not outer:
                return
            row.update(nulls)
        if where is None or where(row):
            ctx.emit(select(row), key=record.key)

    return process


class SqlJoinSide(Processor):
    """One side of a window join (plan kind `join_side`): its rows to the join topic, keyed by the join key."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(self.config)
        udfs, _ = load(plan.get("functions") or {})
        # this side's expressions read its own columns only: compiled over the record's value as it is
        names = {p: c for c, p in plan["columns"]}
        where = compile_expr(_unprefixed(plan["where"], names), udfs) if plan.get("where") is not None else None
        keys = [compile_expr(_unprefixed(k, names), udfs) for k in plan["key"]]
        forward = set(plan["forward"])
        sent = [(c, p) for c, p in plan["columns"] if p in forward]
        self.process = _sider(  # type: ignore[method-assign, assignment]
            int(plan["side"]), where, keys, bool(plan["keep_null"]), sent)

    def is_late(self, event_time: int, watermark: int) -> bool:
        """Never: lateness is judged once, at the join's window stage."""
        return False

    def process(self, record: Record, ctx: Context) -> None:
        """Replaced per instance by the side's steps, bound once (`_sider`)."""
        raise NotImplementedError


def _unprefixed(ir: Any, names: Mapping[str, str]) -> Any:
    """An expression over joined names (`alias.column`) as one over the side's own row (`column`)."""
    if isinstance(ir, list):
        if len(ir) == 2 and ir[0] == "col" and ir[1] in names:
            return ["col", names[ir[1]]]
        return [_unprefixed(x, names) for x in ir]
    return ir


def _sider(side: int, where: Fn | None, keys: list[Fn], keep_null: bool,
           sent: list[tuple[str, str]]) -> Callable[[Record, Context], None]:
    """`sent`: (column, joined name) of the columns the join stage reads; the row goes as those, and `@`: its
    side."""
    one = keys[0] if len(keys) == 1 else None

    def process(record: Record, ctx: Context) -> None:
        value = record.value
        if type(value) is not dict:
            raise _not_a_row(record)
        if where is not None and not where(value):
            return
        key = key_text([one(value)] if one is not None else [k(value) for k in keys])
        if key is None:
            if not keep_null:
                return  # a NULL key equals nothing: the row pairs with none
            key = ""  # LEFT JOIN: kept, unpaired; all in one partition, so that GROUP BY meets its NULLs in one group
        row = {p: value.get(c) for c, p in sent}
        row["@"] = side
        ctx.emit(row, key=key, timestamp=ctx.event_time)  # type: ignore[attr-defined]

    return process


class _Sides(Aggregate):
    """A window's rows of one key: `[left rows, right rows]`, each row as its side sent it (`@`: the side).
    `add` appends in place (a new list per row would copy the window's rows for each of them); the append is the
    last step of a record's processing, so a record that fails never leaves its row behind."""

    def zero(self) -> list[list[dict[str, Any]]]:
        return [[], []]

    def add(self, acc: list[list[dict[str, Any]]], value: dict[str, Any]) -> list[list[dict[str, Any]]]:
        acc[value["@"]].append(value)
        return acc

    def merge(self, a: list[list[dict[str, Any]]], b: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        return [a[0] + b[0], a[1] + b[1]]


class SqlWindowJoinStage(WindowedProcessor):
    """A window join (plan kind `window_join`): both sides' rows per window and key, paired when it closes."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        plan = plan_of(config)
        udfs, udafs = load(plan.get("functions") or {})
        spec = plan["window"]
        self.window = window_of(spec)
        self.aggregate = _Sides()
        self._outer = plan["join"] == "left"
        self._on = compile_expr(plan["on"], udfs) if plan.get("on") is not None else None
        self._where = compile_expr(plan["where"], udfs) if plan.get("where") is not None else None
        # over a joined row, or (GROUP BY) over (group values, aggregate results, start, end)
        self._select: Callable[[Any], dict[str, Any]] = _row_builder([(n, compile_expr(ir, udfs))
                                                                      for n, ir in plan["select"]])
        self._grouped = plan.get("group") is not None
        if self._grouped:  # SELECT and HAVING read (group values, aggregate results, start, end)
            self._groups = [compile_expr(g, udfs) for g in plan["group"]]
            self._group_key = _keyer(self._groups)
            self._aggregates = [build_aggregate(a, udafs) for a in plan["aggregates"]]
            self._inputs = [_aggregate_input(a, udfs) for a in plan["aggregates"]]
            self._having = compile_expr(plan["having"], udfs) if plan.get("having") is not None else None
            self._by_left = bool(plan.get("group_by_left"))  # a left row's pairs share its group
        self._bounds = tuple(plan.get("bounds") or ())
        self._bounds_used = bool(plan.get("bounds_used"))
        self._nulls = {p: None for p in plan["sides"][1]["forward"]}
        super().__init__(config, name)
        add = self.add_tumbling if isinstance(self.window, Tumbling) else self.add

        def process(record: Record, ctx: Context) -> None:
            value = record.value
            if type(value) is not dict or "@" not in value:
                raise _not_a_row(record)
            add(ctx, record.key or "", ctx.event_time, value)  # type: ignore[attr-defined]

        self.process = process  # type: ignore[method-assign]

    def process(self, record: Record, ctx: Context) -> None:
        """Replaced per instance in `__init__`."""
        raise NotImplementedError

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        lefts, rights = acc
        if not lefts or (not rights and not self._outer):
            return
        if self._grouped:
            self._emit_groups(ctx, lefts, rights, start, end)
            return
        out_key = record_key(key)
        for _, row in self._pairs(lefts, rights, start, end):
            out = self._select(row)
            for bound in self._bounds:
                out[bound] = start if bound == "window_start" else end
            ctx.emit(out, key=out_key, timestamp=end - 1)

    def _pairs(self, lefts: list[dict[str, Any]], rights: list[dict[str, Any]], start: int,
               end: int) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """(left row, joined row) of one key in one window, for the joined rows that pass ON and WHERE (LEFT: a
        left row without a match once, with NULLs). `_emit_groups` has the same loops inline."""
        on, where, bounds = self._on, self._where, self._bounds_used
        for left in lefts:
            matched = False
            row = left.copy()  # one joined row per left row, its right columns replaced for each right row
            if bounds:
                row["window_start"], row["window_end"] = start, end
            for right in rights:
                row.update(right)
                if on is not None and not on(row):
                    continue
                matched = True
                if where is None or where(row):
                    yield left, row
            if self._outer and not matched:
                row = left | self._nulls
                if bounds:
                    row["window_start"], row["window_end"] = start, end
                if where is None or where(row):
                    yield left, row

    def _emit_groups(self, ctx: Context, lefts: list[dict[str, Any]], rights: list[dict[str, Any]], start: int,
                     end: int) -> None:
        """GROUP BY: the pairs of one key (those `_pairs` gives, in loops of their own: this runs once per pair)
        aggregated per group (every group is within this key: GROUP BY has the join key), then one row per group
        that passes HAVING, keyed by the group, in the order groups were first met."""
        found: dict[str, tuple[list[Any], list[Any]]] = {}
        aggregates, inputs, group_key_of, groups = self._aggregates, self._inputs, self._group_key, self._groups
        on, where, bounds, by_left = self._on, self._where, self._bounds_used, self._by_left
        one = len(aggregates) == 1
        add0, input0 = (aggregates[0].add, inputs[0]) if one else (None, None)

        def group_of(row: dict[str, Any]) -> list[Any]:
            k = group_key_of(row)
            entry = found.get(k)
            if entry is None:
                entry = found[k] = ([g(row) for g in groups], [a.zero() for a in aggregates])
            return entry[1]

        def fold(accs: list[Any], row: dict[str, Any]) -> None:
            for i, aggregate in enumerate(aggregates):
                accs[i] = aggregate.add(accs[i], inputs[i](row))

        for left in lefts:
            matched = False
            accs: list[Any] | None = None  # the left row's group, when the groups read the left side only
            row = left.copy()  # its right columns replaced for each right row (nothing keeps a joined row)
            if bounds:
                row["window_start"], row["window_end"] = start, end
            for right in rights:
                row.update(right)
                if on is not None and not on(row):
                    continue
                matched = True
                if where is not None and not where(row):
                    continue
                if accs is None or not by_left:
                    accs = group_of(row)
                if one:
                    accs[0] = add0(accs[0], input0(row))  # type: ignore[misc]
                else:
                    fold(accs, row)
            if self._outer and not matched:
                row = left | self._nulls
                if bounds:
                    row["window_start"], row["window_end"] = start, end
                if where is None or where(row):
                    fold(group_of(row), row)
        for values, accs_ in found.values():
            r = (values, [a.result(x) for a, x in zip(aggregates, accs_, strict=True)], start, end)
            if self._having is not None and not self._having(r):
                continue
            out = self._select(r)
            for bound in self._bounds:
                out[bound] = start if bound == "window_start" else end
            ctx.emit(out, key=group_key(values), timestamp=end - 1)
