"""The batch forms of a SQL app's stages (docs/sql.md, "Batch compilation"): the same plans as `SqlStage` and
`SqlWindowStage`, run by the columnar batch engine (docs/batch.md) a partition's batch at a time.

- `BatchSqlStage`, a projection table: WHERE as one boolean column, SELECT as computed columns
  (stylus/sql/vector.py), emitted with `ctx.emit_batch`, each row keyed and timestamped by its input record.
- `BatchSqlWindowStage`, a windowed table: a `SqlWindowStage` (same state layout, timers, closing, HAVING,
  QUALIFY, candidates) whose rows are added a batch at a time: the batch's rows are grouped by (window, group)
  with one pyarrow group-by, the touched accumulators read with one `get_many`, folded with the batch's partial
  aggregates as the per-record `add` folds values, written with one `set_many`. A QUALIFY ranking group columns
  (`bounded`) keeps, of a batch, only the rows that can still rank first in their window before adding them
  one at a time. What a window emits is the per-record stage's own code, on close.

Both build their columns from the decoded values with exact kinds; a batch whose values do not fit (vector.py,
`Unfit`) runs row by row through the per-record stage's own closures, so a stage's output is the per-record
stage's whichever way a batch ran, and a failing row fails alone (the engine bisects). Float SUM and AVG add in
input order, as the per-record fold does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stylus.api import BatchContext, BatchProcessor, Context
from stylus.core.batch.columns import META_COLUMNS, RENAMED
from stylus.sql.expr import compile_expr
from stylus.sql.stage import NotARow, SqlWindowStage, _row_builder, plan_of
from stylus.sql.udfs import load
from stylus.sql.vector import ARROW_ERRORS, EXACT, Rows, Unfit, Vec, VecFn, _array, compile_vector
from stylus.windows.assigners import Hopping, Tumbling
from stylus.windows.processor import _WINDOW, _hex

#: aggregates with a columnar form: each SQL aggregate's pyarrow aggregations, over its argument column `v<i>`
VECTOR_AGGREGATES = ("count_star", "count", "sum", "avg", "min", "max")
_NO_NULL_SUM = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)
_ONLY_VALID = pc.CountOptions(mode="only_valid")
_ALL = pc.CountOptions(mode="all")


def key_text(groups: list[Any]) -> str:
    """The window key of a group with these values: what `stylus.sql.stage._keyer` gives from a row."""
    if not groups:
        return ""
    if len(groups) == 1:
        x = groups[0]
        if type(x) is int:
            return str(x)
        return "=" + x if type(x) is str else orjson.dumps(x).decode()
    return orjson.dumps(groups).decode()


def _not_a_row(ctx: BatchContext, offset: int, value: Any) -> NotARow:
    return NotARow(f"{ctx.topic}[{ctx.partition}]@{offset}: the value is a {type(value).__name__}, not a JSON "
                   "object with the table's columns")


def _key(key: Any) -> str | None:
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key


class BatchSqlStage(BatchProcessor):
    """A projection table on the batch path: WHERE + SELECT over a batch's columns (docs/sql.md)."""

    fields = ()  # the engine decodes the values; the stage makes the columns it reads (`vector.Rows`)

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(self.config)
        if plan["kind"] != "project":
            raise ValueError(f"BatchSqlStage runs projection tables, not a `{plan['kind']}` plan")
        udfs, _ = load(plan.get("functions") or {})
        where = plan.get("where")
        self._where: VecFn | None = compile_vector(where, udfs) if where is not None else None
        self._select = [(RENAMED + n if n in META_COLUMNS else n, compile_vector(ir, udfs)) for n, ir in plan["select"]]
        self._row_where = compile_expr(where, udfs) if where is not None else None
        self._row = _row_builder([(n, compile_expr(ir, udfs)) for n, ir in plan["select"]])
        self.columnar = self.row_by_row = 0  # batches that ran each way (tests, metrics)

    def is_late(self, event_time: int, watermark: int) -> bool:
        """Never: as the per-record projection, a row is passed on however late."""
        return False

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
        values = ctx.values
        try:
            rows = Rows(values)
            kept = batch
            if self._where is not None:
                mask = _condition(self._where(rows), rows.n)
                rows, kept = rows.filter(mask), batch.filter(mask)
            columns = [(name, _array(fn(rows), rows.n)) for name, fn in self._select]
        except Unfit:
            self.row_by_row += 1
            self._row_by_row(batch, values, ctx)
            return
        self.columnar += 1
        if not kept.num_rows:
            return
        table = kept.select(["key", "timestamp", "offset"])  # the records' key, time and offset (their ids)
        for name, column in columns:
            table = table.append_column(name, column)
        ctx.emit_batch(table, key="key")

    def _row_by_row(self, batch: pa.RecordBatch, values: list[Any], ctx: BatchContext) -> None:
        """The per-record stage's steps on each row: what a batch that does not fit the columns gets."""
        where, row = self._row_where, self._row
        keys = batch.column("key").to_pylist()
        stamps = batch.column("timestamp").to_pylist()
        offsets = batch.column("offset").to_pylist()
        for value, key, stamp, offset in zip(values, keys, stamps, offsets, strict=True):
            if type(value) is not dict:
                raise _not_a_row(ctx, offset, value)
            if where is None or where(value):
                out = row(value)
                orjson.dumps(out)  # a value JSON cannot hold (an int past 64 bits) fails its row here, in the batch
                ctx.emit(out, key=_key(key), timestamp=stamp)


def _condition(v: Vec, n: int) -> pa.BooleanArray:
    """WHERE's values as a mask (a NULL keeps no row); a condition that is not a boolean takes the row path."""
    if v.kind not in ("bool", "null"):
        raise Unfit(f"a condition of kind {v.kind}")
    return _array(v, n).cast(pa.bool_()).fill_null(False)


class BatchSqlWindowStage(BatchProcessor, SqlWindowStage):
    """A windowed table on the batch path: a `SqlWindowStage` whose rows are added a batch at a time."""

    fields = ()

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(config)
        problem = batch_window_problem(plan)
        if problem is not None:
            raise ValueError(f"BatchSqlWindowStage cannot run this table: {problem}")
        udfs, _ = load(plan.get("functions") or {})
        where = plan.get("where")
        self._vector_where: VecFn | None = compile_vector(where, udfs) if where is not None else None
        qualify = plan.get("qualify") or {}
        if self._bounded:  # the window key is the PARTITION BY value; the rows themselves are added
            self._vector_keys = [compile_vector(p, udfs) for p in qualify["partition_input"]]
            order = qualify["order"]
            self._prefilter: tuple[VecFn, bool] | None = (
                (compile_vector(qualify["order_input"][0], udfs), bool(order[0][1]))
                if int(qualify["limit"]) == 1 and len(order) == 1 else None)
            self._specs: list[dict[str, Any]] = []
            self._inputs: list[VecFn | None] = []
        else:
            self._vector_keys = [compile_vector(g, udfs) for g in plan["group"]]
            self._specs = list(plan["aggregates"]) or [{"fn": "count_star", "args": []}]  # GROUP BY only: a count
            self._inputs = [compile_vector(s["args"][0], udfs) if s["args"] else None for s in self._specs]
            self._prefilter = None
        self._single = len(plan["aggregates"]) <= 1  # the accumulator is the aggregate's own, not a list
        self.columnar = self.row_by_row = 0  # batches that ran each way (tests, metrics)

    def setup(self, ctx: Context) -> None:
        super().setup(ctx)
        if self.retain_ms:
            raise ValueError(f"{self.name}: `late: update` corrects closed windows one record at a time; the batch "
                             "form of a SQL table cannot (set `batch: never` on the processor)")

    # ------------------------------------------------------------------ a batch
    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
        values = ctx.values
        times = ctx.event_times.to_numpy()
        try:
            rows = Rows(values)
            if self._vector_where is not None:
                mask = _condition(self._vector_where(rows), rows.n)
                rows, times = rows.filter(mask), times[mask.to_numpy(zero_copy_only=False)]
            ends, at = self._windows(times, ctx.watermark)
            if len(ends):
                if self._bounded:
                    self._add_ranked(rows, ends, at, ctx)
                else:
                    self._fold(self._aggregated(rows, ends, at), ctx)
            self.columnar += 1
        except Unfit:
            self.row_by_row += 1
            self._row_by_row(batch, values, ctx)

    def _windows(self, times: np.ndarray, watermark: int) -> tuple[np.ndarray, np.ndarray]:
        """(window end, row) for every open window each row falls in, row by row (`Tumbling/Hopping.ends`)."""
        window = self.window
        if isinstance(window, Tumbling):
            ends, at = times - times % window.size + window.size, np.arange(len(times))
        else:
            assert isinstance(window, Hopping)
            first = times - times % window.slide + window.slide
            pairs = [(first + k * window.slide, np.arange(len(times)))
                     for k in range(-(-window.size // window.slide) + 1)]
            pairs = [(end[end <= times + window.size], at[end <= times + window.size]) for end, at in pairs]
            ends, at = np.concatenate([e for e, _ in pairs]), np.concatenate([a for _, a in pairs])
            order = np.lexsort((ends, at))  # row by row, each row's windows in order
            ends, at = ends[order], at[order]
        open_ = ends > watermark  # a closed window is gone (no `retain`: `late: update` is refused)
        return ends[open_], at[open_]

    def _keys(self, rows: Rows, at: np.ndarray) -> tuple[list[pa.Array], bool]:
        """The window key's columns (group or PARTITION BY values), one value per (row, window); and whether
        Arrow groups them as their key texts do (not floats: -0.0 and 0.0 are one value to Arrow, two keys)."""
        taken = pa.array(at)
        vs = [fn(rows) for fn in self._vector_keys]
        return [_array(v, rows.n).take(taken) for v in vs], all(v.kind != "float" for v in vs)

    # ------------------------------------------------------------------ aggregates
    def _aggregated(self, rows: Rows, ends: np.ndarray, at: np.ndarray) -> list[tuple[int, str, list[Any]]]:
        """(window end, group key, the batch's partial per aggregate) for every group the batch touches."""
        groups, exact = self._keys(rows, at)
        if not exact:
            raise Unfit("a float group value")
        inputs: dict[int, Vec] = {}
        for i, fn in enumerate(self._inputs):
            if fn is not None:
                inputs[i] = fn(rows)
        table = {"end": pa.array(ends), **{f"g{j}": g for j, g in enumerate(groups)}}
        aggregations: list[tuple[Any, ...]] = []
        taken = pa.array(at)
        for i, spec in enumerate(self._specs):
            fn = spec["fn"]
            if fn == "count_star":
                aggregations.append(("end", "count", _ALL))
                continue
            v = inputs[i]
            column = _array(v, rows.n).take(taken)
            table[f"v{i}"] = column
            if fn == "count":
                aggregations.append((f"v{i}", "count", _ONLY_VALID))
                continue
            if fn in ("min", "max"):
                if v.kind not in ("int", "float", "str", "bool", "null"):
                    raise Unfit(f"{fn} of {v.kind}")
                aggregations.append((f"v{i}", fn))
                continue
            if v.kind not in ("int", "float", "null"):  # sum, avg: the per-record fold raises on these
                raise Unfit(f"{fn} of {v.kind}")
            if v.kind == "int":
                _check_int_sum(column)
                aggregations.append((f"v{i}", "sum", _NO_NULL_SUM))
            else:  # floats add in input order, as the per-record fold adds them
                aggregations.append((f"v{i}", "list"))
            if fn == "avg":
                aggregations.append((f"v{i}", "count", _ONLY_VALID))
        keys = ["end", *(f"g{j}" for j in range(len(groups)))]
        try:
            result = pa.table(table).group_by(keys, use_threads=False).aggregate(aggregations)
        except ARROW_ERRORS as exc:  # an aggregation Arrow has no kernel for on this kind
            raise Unfit(str(exc)) from exc
        cols = {name: result.column(name).to_pylist() for name in result.column_names}
        out = []
        for r, end in enumerate(cols["end"]):
            partial = []
            for i, spec in enumerate(self._specs):
                fn = spec["fn"]
                if fn == "count_star":
                    partial.append(cols["end_count"][r])
                elif fn == "count":
                    partial.append(cols[f"v{i}_count"][r])
                elif fn in ("min", "max"):
                    partial.append(cols[f"v{i}_{fn}"][r])
                else:
                    total = cols[f"v{i}_sum"][r] if f"v{i}_sum" in cols else _Ordered(cols[f"v{i}_list"][r])
                    partial.append([total, cols[f"v{i}_count"][r]] if fn == "avg" else total)
            out.append((end, key_text([cols[f"g{j}"][r] for j in range(len(groups))]), partial))
        return out

    def _fold(self, groups: list[tuple[int, str, list[Any]]], ctx: BatchContext) -> None:
        """The batch's partials folded into the stored accumulators (computed first: nothing is written when a
        group does not fit), each new window's closing timer set."""
        prefixes = {end: _WINDOW + _hex(end) for end in {end for end, _, _ in groups}}
        keys = [prefixes[end] + key for end, key, _ in groups]
        before = ctx.state.get_many(keys)
        specs = self._specs
        after = []
        for (_, _, partial), old in zip(groups, before, strict=True):
            accs = [old] if self._single else (old if old is not None else [None] * len(specs))
            after.append(_pick(self._single, [_combine(s["fn"], a, p) for s, a, p in zip(specs, accs, partial,
                                                                                          strict=True)]))
        ctx.state.set_many(dict(zip(keys, after, strict=True)))
        for end in sorted({end for (end, _, _), old in zip(groups, before, strict=True) if old is None}):
            ctx.set_timer(prefixes[end], end)

    # ------------------------------------------------------------------ QUALIFY on group columns
    def _add_ranked(self, rows: Rows, ends: np.ndarray, at: np.ndarray, ctx: BatchContext) -> None:
        """The rows that can still rank first added one at a time, in input order (`TiedTopRows.add`): a row
        ranked after another of its window and partition in the same batch never ranks first."""
        parts, exact = self._keys(rows, at)
        keep = np.ones(len(at), dtype=bool)
        if self._prefilter is not None and exact:
            fn, desc = self._prefilter
            v = fn(rows)
            order = _array(v, rows.n).take(pa.array(at))
            if v.kind in ("int", "float") and order.null_count == 0 and _exact_floats(order):
                codes = _codes([pa.array(ends), *parts])
                values = order.to_numpy().astype(np.float64)
                best = np.full(int(codes.max()) + 1, -np.inf if desc else np.inf)
                (np.maximum if desc else np.minimum).at(best, codes, values)
                keep = values == best[codes]  # ties at the top kept: they all rank first
        chosen = np.flatnonzero(keep)
        kept_parts = [p.take(pa.array(chosen)).to_pylist() for p in parts]
        pairs = [(int(ends[i]), key_text([p[j] for p in kept_parts]), int(at[i])) for j, i in enumerate(chosen)]
        prefixes = {end: _WINDOW + _hex(end) for end, _, _ in pairs}
        keys = list(dict.fromkeys(prefixes[end] + key for end, key, _ in pairs))
        accs = dict(zip(keys, ctx.state.get_many(keys), strict=True))
        new = {end for end, key, _ in pairs if accs[prefixes[end] + key] is None}
        agg = self.aggregate
        assert agg is not None
        values = rows.values
        for end, key, row in pairs:
            skey = prefixes[end] + key
            acc = accs[skey]
            accs[skey] = agg.add(agg.zero() if acc is None else acc, values[row])
        ctx.state.set_many(accs)
        for end in sorted(new):
            ctx.set_timer(prefixes[end], end)

    # ------------------------------------------------------------------ the row path
    def _row_by_row(self, batch: pa.RecordBatch, values: list[Any], ctx: BatchContext) -> None:
        """The per-record stage's steps on each row (`SqlWindowStage._processor`), at each row's event time."""
        where, value_of, key_of, skip_none = self._where, self._value, self._key, self._skip_none
        offsets = batch.column("offset").to_pylist()
        times = ctx.event_times.to_pylist()
        for value, offset, t in zip(values, offsets, times, strict=True):
            if type(value) is not dict:
                raise _not_a_row(ctx, offset, value)
            if where is not None and not where(value):
                continue
            aggregated = value_of(value)
            if aggregated is None and skip_none:
                continue
            self.add(ctx, key_of(value), t, aggregated)


def _exact_floats(column: pa.Array) -> bool:
    """Whether a numeric column converts to floats without changing any order between its values."""
    if pa.types.is_floating(column.type) or not len(column):
        return True
    try:
        return bool(pc.max(pc.abs_checked(column)).as_py() <= EXACT)
    except ARROW_ERRORS:
        return False


class _Ordered(list[Any]):
    """A group's float values in input order: summed one at a time onto the accumulator."""


def _check_int_sum(column: pa.Array) -> None:
    """An int64 sum that cannot overflow (Python's integers never do): otherwise the row path."""
    if column.null_count == len(column):
        return
    try:
        biggest = pc.max(pc.abs_checked(column)).as_py()
    except ARROW_ERRORS as exc:
        raise Unfit(str(exc)) from exc
    if biggest * len(column) >= 2**63:
        raise Unfit("an integer sum that could pass 64 bits")


def _add(acc: Any, total: Any) -> Any:
    """`Sum.add` over a batch's partial: an int total onto an int, or float values one at a time in order."""
    if isinstance(total, _Ordered):
        for value in total:
            if value is not None:
                acc = acc + value
        return acc
    if type(acc) is float:
        raise Unfit("an integer sum onto a float accumulator")  # the per-record fold rounds at every step
    return acc + total


def _combine(fn: str, acc: Any, partial: Any) -> Any:
    """One aggregate's accumulator after the batch (None: the window's first rows)."""
    if fn in ("count_star", "count"):
        return (acc or 0) + partial
    if fn == "sum":
        return _add(0 if acc is None else acc, partial)
    if fn == "avg":
        old = acc if acc is not None else [0, 0]
        return [_add(old[0], partial[0]), old[1] + partial[1]]
    if partial is None:  # min/max of NULLs only
        return acc
    if acc is None:
        return partial
    return partial if (partial < acc if fn == "min" else partial > acc) else acc


def _pick(single: bool, accs: list[Any]) -> Any:
    return accs[0] if single else accs


def _codes(columns: list[pa.Array]) -> np.ndarray:
    """One integer per row, equal for rows equal in every column (NULLs equal)."""
    parts = []
    for column in columns:
        encoded = pc.dictionary_encode(column)
        parts.append(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False))
    if len(parts) == 1:
        return parts[0] + 1
    return np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def batch_window_problem(plan: Mapping[str, Any]) -> str | None:
    """Why a windowed table's plan has no batch form, or None."""
    from stylus.sql.vector import vector_problem

    if plan["kind"] != "window":
        return "Puma's ranking topk (one TopK per row)" if plan["kind"] == "rank" else f"a `{plan['kind']}` plan"
    qualify = plan.get("qualify") or {}
    exprs: list[Any] = [plan.get("where")] if plan.get("where") is not None else []
    if qualify.get("bounded"):
        exprs += [*qualify["partition_input"], *qualify["order_input"][:1]]
    else:
        for spec in plan["aggregates"]:
            if spec["fn"] not in VECTOR_AGGREGATES:
                return {"count_distinct": "COUNT(DISTINCT ...)", "topk": "topk(...)", "udaf": f"the UDAF "
                        f"{spec.get('name')}"}.get(spec["fn"], spec["fn"])
            exprs += spec["args"]
        exprs += plan["group"]
    return next((p for e in exprs if (p := vector_problem(e))), None)


def projection_problem(plan: Mapping[str, Any]) -> str | None:
    """Why a projection table's plan has no batch form, or None."""
    from stylus.sql.vector import vector_problem

    exprs = ([plan["where"]] if plan.get("where") is not None else []) + [ir for _, ir in plan["select"]]
    return next((p for e in exprs if (p := vector_problem(e))), None)

