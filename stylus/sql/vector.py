"""A planned expression (stylus.sql.plan's IR) over a whole batch: pyarrow compute on exactly typed columns, for
the batch stages (stylus/sql/batch.py). The per-record closures (stylus/sql/expr.py) define what an expression
means; this is the same computation on columns, for the batches where it provably gives the same values.

Columns are built from the decoded values (`BatchContext.values`), one per field an expression reads, with the
exact kind of its values in this batch: `int`, `float`, `str`, `bool` or `null` (all NULL). A field holding
several kinds (1 and 1.5, a number and a string, a list), an integer past 64 bits, a value that is not a JSON
object, an integer past 2**53 meeting a float, an integer overflow, or an operation on kinds the row-by-row
closures treat otherwise (`'a' + 'b'`, `1 = TRUE`, `NOT 0`) raise `Unfit`: the stage then runs that batch row
by row with the per-record closures, which decide, record by record, as the per-record stage does (including
which rows fail). So a batch stage's output never depends on which of the two ran.

What compiles (`vector_problem` says what does not, at load time): columns, literals, `+ - *`, comparisons,
AND/OR/NOT, unary minus, IS [NOT] NULL, IN (literals), BETWEEN, `/`, `%` / MOD and ABS. Anything else keeps the
stage per-record. A subtree without columns is evaluated once, by the per-record closure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stylus.sql.expr import compile_expr

EXACT = 2**53  # integers up to this convert to float exactly (Python's int/float arithmetic and comparisons)
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_(), "null": pa.null()}
_KINDS: dict[frozenset[type], str] = {
    frozenset({int}): "int", frozenset({int, type(None)}): "int",
    frozenset({float}): "float", frozenset({float, type(None)}): "float",
    frozenset({str}): "str", frozenset({str, type(None)}): "str",
    frozenset({bool}): "bool", frozenset({bool, type(None)}): "bool",
    frozenset({type(None)}): "null", frozenset(): "null",
}
_INFERRED = {pa.int64(): "int", pa.float64(): "float", pa.string(): "str", pa.bool_(): "bool", pa.null(): "null"}
_FLOATS = frozenset({float, type(None)})
_COMPARE = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
            ">=": pc.greater_equal}
_ARITHMETIC = {"+": (pc.add_checked, pc.add), "-": (pc.subtract_checked, pc.subtract),
               "*": (pc.multiply_checked, pc.multiply)}
_VECTOR_FUNCTIONS = ("divide", "mod", "abs")


class Unfit(Exception):
    """This batch's values do not fit the columnar form of an expression: run the batch row by row."""


class NotVectorized(Exception):
    """An expression with no columnar form (at load time): the stage stays per-record."""


@dataclass(frozen=True)
class Vec:
    """A column (a pyarrow Array, one value per row) or a constant (a Python value, the same for every row), and
    the kind of its values."""

    data: Any
    kind: str

    @property
    def constant(self) -> bool:
        return not isinstance(self.data, pa.Array)


def kind_of(value: Any) -> str:
    kind = _KINDS.get(frozenset({type(value)}))
    if kind is None:
        raise Unfit(f"a constant of type {type(value).__name__}")
    return kind


class Rows:
    """A batch's decoded values and the columns built from them, each once, on first use."""

    def __init__(self, values: list[Any]) -> None:
        if values and set(map(type, values)) != {dict}:
            raise Unfit("a value that is not a JSON object")
        self.values = values
        self.n = len(values)
        self._columns: dict[str, Vec] = {}

    def column(self, name: str) -> Vec:
        found = self._columns.get(name)
        if found is None:
            items = [v.get(name) for v in self.values]
            try:  # Arrow's inference refuses a mix of kinds, but for numbers: ints and bools among floats
                array = pa.array(items)
            except ARROW_ERRORS as exc:  # several kinds, an integer past 64 bits
                raise Unfit(str(exc)) from exc
            kind = _INFERRED.get(array.type)
            if kind is None or (kind == "float" and not frozenset(map(type, items)) <= _FLOATS):
                raise Unfit(f"column `{name}` holds values of several kinds, or lists or objects")
            found = self._columns[name] = Vec(array, kind)
        return found

    def filter(self, mask: pa.BooleanArray) -> Rows:
        """The rows where `mask` is true (a NULL is false), with the columns built so far."""
        keep = mask.fill_null(False)
        out = Rows.__new__(Rows)
        out.values = list(compress(self.values, keep.to_pylist()))
        out.n = len(out.values)
        out._columns = {name: Vec(pc.filter(v.data, keep), v.kind) for name, v in self._columns.items()}
        return out


VecFn = Callable[[Rows], Vec]


def vector_problem(node: Any) -> str | None:
    """Why `node` has no columnar form (the first sub-expression that has none), or None."""
    kind = node[0]
    if kind in ("col", "lit"):
        return None
    if kind == "bin":
        return vector_problem(node[2]) or vector_problem(node[3])
    if kind == "fn":
        if node[1] not in _VECTOR_FUNCTIONS:
            return f"the function {node[1].upper()}"
        return next((p for a in node[2] if (p := vector_problem(a))), None)
    if kind in ("and", "or"):
        return vector_problem(node[1]) or vector_problem(node[2])
    if kind in ("not", "neg", "isnull"):
        return vector_problem(node[1])
    if kind == "in":
        if any(a[0] != "lit" for a in node[2]):
            return "IN with a list that is not constants"
        return vector_problem(node[1])
    if kind == "between":
        return next((p for a in node[1:4] if (p := vector_problem(a))), None)
    names = {"udf": "a user function", "like": "LIKE", "case": "CASE", "cast": "CAST", "coalesce": "COALESCE",
             "nullif": "NULLIF", "if": "IF"}
    return names.get(kind, f"`{kind}`")


def _uses_columns(node: Any) -> bool:
    if isinstance(node, list):
        if node and node[0] == "col":
            return True
        return any(_uses_columns(part) for part in node)
    return False


def compile_vector(node: Any, udfs: Mapping[str, Callable[..., Any]] | None = None) -> VecFn:
    """The columnar form of `node`; NotVectorized when it has none (`vector_problem`)."""
    problem = vector_problem(node)
    if problem is not None:
        raise NotVectorized(problem)
    return _compile(node, udfs or {})


def _compile(node: Any, udfs: Mapping[str, Callable[..., Any]]) -> VecFn:
    if not _uses_columns(node):  # a constant: the per-record closure's value, once
        value = compile_expr(node, udfs)({})
        constant = Vec(value, kind_of(value))
        return lambda rows: constant
    kind = node[0]
    if kind == "col":
        name = node[1]
        return lambda rows: rows.column(name)
    if kind == "bin":
        left, right, op = _compile(node[2], udfs), _compile(node[3], udfs), node[1]
        if op in _COMPARE:
            return lambda rows: _compare(op, left(rows), right(rows), rows.n)
        return lambda rows: _arithmetic(op, left(rows), right(rows), rows.n)
    if kind == "fn":
        args = [_compile(a, udfs) for a in node[2]]
        name = node[1]
        return lambda rows: _function(name, [a(rows) for a in args], rows.n)
    if kind in ("and", "or"):
        a, b = _compile(node[1], udfs), _compile(node[2], udfs)
        fn = pc.and_kleene if kind == "and" else pc.or_kleene
        return lambda rows: Vec(fn(_boolean(a(rows), rows.n), _boolean(b(rows), rows.n)), "bool")
    if kind == "not":
        a = _compile(node[1], udfs)
        return lambda rows: Vec(pc.invert(_boolean(a(rows), rows.n)), "bool")
    if kind == "neg":
        a = _compile(node[1], udfs)
        return lambda rows: _negate(a(rows), rows.n)
    if kind == "isnull":
        a = _compile(node[1], udfs)
        return lambda rows: Vec(pc.is_null(_array(a(rows), rows.n)), "bool")
    if kind == "in":
        a = _compile(node[1], udfs)
        items = [item[1] for item in node[2]]
        return lambda rows: _in(a(rows), items, rows.n)
    assert kind == "between"
    x, low, high = (_compile(part, udfs) for part in node[1:4])

    def between(rows: Rows) -> Vec:
        value = x(rows)
        above = _compare(">=", value, low(rows), rows.n)
        below = _compare("<=", value, high(rows), rows.n)
        return Vec(pc.and_(above.data, below.data), "bool")  # NULL when any of the three is NULL

    return between


# ---------------------------------------------------------------------------------------------- helpers
def _array(v: Vec, n: int) -> pa.Array:
    """A Vec as an array of n values (a constant repeated)."""
    if not v.constant:
        return v.data
    return pa.nulls(n, _TYPES[v.kind]) if v.data is None else pa.array([v.data] * n, _TYPES[v.kind])


def _nulls(n: int, kind: str) -> Vec:
    return Vec(pa.nulls(n, _TYPES[kind]), kind)


def _as_float(v: Vec) -> Any:
    """A numeric Vec as floats, exactly (as Python converts an int meeting a float), or Unfit."""
    if v.kind == "float":
        return v.data
    if v.constant:
        if abs(v.data) > EXACT:
            raise Unfit("an integer past 2**53 meets a float")
        return float(v.data)
    try:
        return v.data.cast(pa.float64(), safe=True)
    except ARROW_ERRORS as exc:
        raise Unfit(str(exc)) from exc


def _numeric(*vs: Vec) -> None:
    for v in vs:
        if v.kind not in ("int", "float"):
            raise Unfit(f"arithmetic on {v.kind}")


def _compare(op: str, a: Vec, b: Vec, n: int) -> Vec:
    if "null" in (a.kind, b.kind):
        return _nulls(n, "bool")
    if a.kind in ("int", "float") and b.kind in ("int", "float"):
        x, y = (a.data, b.data) if a.kind == b.kind else (_as_float(a), _as_float(b))
    elif a.kind == b.kind and (a.kind == "str" or (a.kind == "bool" and op in ("=", "<>"))):
        x, y = a.data, b.data
    else:
        raise Unfit(f"{a.kind} {op} {b.kind}")
    if a.constant and b.constant:
        raise Unfit("a comparison of constants")  # folded at compile time; never here
    return Vec(_COMPARE[op](x, y), "bool")


def _arithmetic(op: str, a: Vec, b: Vec, n: int) -> Vec:
    if "null" in (a.kind, b.kind):
        _numeric(*(v for v in (a, b) if v.kind != "null"))
        return _nulls(n, "float" if "float" in (a.kind, b.kind) else "int")
    _numeric(a, b)
    checked, plain = _ARITHMETIC[op]
    try:
        if a.kind == b.kind == "int":
            return Vec(checked(a.data, b.data), "int")
        return Vec(plain(_as_float(a), _as_float(b)), "float")
    except ARROW_ERRORS as exc:  # an integer overflow: Python's integers do not overflow
        raise Unfit(str(exc)) from exc


def _negate(a: Vec, n: int) -> Vec:
    if a.kind == "null":
        return a
    _numeric(a)
    try:
        return Vec(pc.negate_checked(_array(a, n)), a.kind)
    except ARROW_ERRORS as exc:
        raise Unfit(str(exc)) from exc


def _boolean(v: Vec, n: int) -> pa.Array:
    """A condition's values: booleans or NULL only (the row-by-row closures take any value's truth)."""
    if v.kind not in ("bool", "null"):
        raise Unfit(f"a condition of kind {v.kind}")
    return _array(v, n).cast(pa.bool_())


def _in(a: Vec, items: list[Any], n: int) -> Vec:
    if a.kind == "null":
        return _nulls(n, "bool")
    present = [i for i in items if i is not None]
    if a.kind not in ("int", "str") or any(kind_of(i) != a.kind for i in present):
        raise Unfit("IN over values of another kind")
    found = pc.is_in(a.data, value_set=pa.array(present, _TYPES[a.kind]))
    missing = pa.scalar(None, pa.bool_()) if len(present) < len(items) else pa.scalar(False)
    return Vec(pc.if_else(pc.is_null(a.data), pa.scalar(None, pa.bool_()), pc.if_else(found, True, missing)), "bool")


def _function(name: str, args: list[Vec], n: int) -> Vec:
    if any(a.kind == "null" for a in args):
        _numeric(*(a for a in args if a.kind != "null"))
        return _nulls(n, "float" if name == "divide" else "int")
    _numeric(*args)
    if name == "abs":
        (a,) = args
        try:
            return Vec(pc.abs_checked(a.data), a.kind)
        except ARROW_ERRORS as exc:
            raise Unfit(str(exc)) from exc
    a, b = args
    if name == "divide":  # a float quotient, NULL for a zero divisor
        x, y = _array(Vec(_as_float(a), "float"), n), _array(Vec(_as_float(b), "float"), n)
        by_zero = pc.equal(y, 0.0)
        return Vec(pc.if_else(by_zero, pa.scalar(None, pa.float64()), pc.divide(x, pc.if_else(by_zero, 1.0, y))),
                   "float")
    # mod: the remainder with the dividend's sign (C's fmod), NULL for a zero divisor; on integers exact as long
    # as the row-by-row closure's float `math.fmod` is (|x| <= 2**53)
    kind = "int" if a.kind == b.kind == "int" else "float"
    try:
        x, y = (_array(a, n), _array(b, n)) if kind == "int" else (
            _array(Vec(_as_float(a), "float"), n), _array(Vec(_as_float(b), "float"), n))
        if kind == "int":
            for column in (x, y):
                if column.null_count < len(column) and pc.max(pc.abs_checked(column)).as_py() > EXACT:
                    raise Unfit("MOD of an integer past 2**53")
    except ARROW_ERRORS as exc:
        raise Unfit(str(exc)) from exc
    null = pc.or_(pc.or_(pc.is_null(x), pc.is_null(y)), pc.equal(y, 0)).fill_null(True)
    zero: Any = 0 if kind == "int" else 0.0
    xs = x.fill_null(zero).to_numpy(zero_copy_only=False)
    ys = pc.if_else(null, 1 if kind == "int" else 1.0, y).to_numpy(zero_copy_only=False)
    return Vec(pa.array(np.fmod(xs, ys), _TYPES[kind], mask=null.to_numpy(zero_copy_only=False)), kind)
