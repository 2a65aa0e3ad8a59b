"""Compile a planned expression (JSON, `stylus.sql.plan`) into one Python closure, once per stage.

Per record there is then no tree to walk and no name to look up: a column is one `dict.get`, a literal a
captured constant, an operator one call. NULL is None and propagates as in SQL: an operator or function
with a NULL argument gives NULL (except AND/OR/COALESCE/IS NULL/CASE, which follow SQL's own rules), and
WHERE/HAVING keep a row only when the condition is true.

Row shapes the closures read:
- input expressions (WHERE, GROUP BY, projections, aggregate arguments): the record's value, a dict;
- output expressions of a windowed table (SELECT, HAVING): `(group values, aggregate results, start, end)`;
  in the top-K ranking form the aggregate results are one ranked `[score, item]` entry.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from stylus.sql.functions import CASTS, FUNCTIONS, modulo

Fn = Callable[[Any], Any]

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


#: `column OP constant`, the commonest filter, with the operator inline (no operator-function call per row)
_COLUMN_VS_CONSTANT: dict[str, Callable[[str, Any], Fn]] = {
    "=": lambda n, c: lambda r: None if (x := r.get(n)) is None else x == c,
    "<>": lambda n, c: lambda r: None if (x := r.get(n)) is None else x != c,
    "<": lambda n, c: lambda r: None if (x := r.get(n)) is None else x < c,
    "<=": lambda n, c: lambda r: None if (x := r.get(n)) is None else x <= c,
    ">": lambda n, c: lambda r: None if (x := r.get(n)) is None else x > c,
    ">=": lambda n, c: lambda r: None if (x := r.get(n)) is None else x >= c,
    "*": lambda n, c: lambda r: None if (x := r.get(n)) is None else x * c,
    "+": lambda n, c: lambda r: None if (x := r.get(n)) is None else x + c,
    "-": lambda n, c: lambda r: None if (x := r.get(n)) is None else x - c,
}


#: `expression OP constant` for any other expression: the same, its value from one closure call
_EXPRESSION_VS_CONSTANT: dict[str, Callable[[Fn, Any], Fn]] = {
    "=": lambda a, c: lambda r: None if (x := a(r)) is None else x == c,
    "<>": lambda a, c: lambda r: None if (x := a(r)) is None else x != c,
    "<": lambda a, c: lambda r: None if (x := a(r)) is None else x < c,
    "<=": lambda a, c: lambda r: None if (x := a(r)) is None else x <= c,
    ">": lambda a, c: lambda r: None if (x := a(r)) is None else x > c,
    ">=": lambda a, c: lambda r: None if (x := a(r)) is None else x >= c,
}
#: `constant OP x` is `x OP' constant`: the fast forms above serve both (`0.908 * price`, `5 < score`). `+` only
#: for a number, since strings concatenate in order.
_FLIPPED = {"*": "*", "=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "+": "+"}


def compile_expr(node: list[Any], udfs: Mapping[str, Callable[..., Any]]) -> Fn:
    """The closure computing `node` from a row."""
    kind = node[0]
    if kind == "col":
        name = node[1]
        return lambda r: r.get(name)
    if kind == "lit":
        value = node[1]
        return lambda r: value
    if kind in ("group", "agg"):
        where, index = (0 if kind == "group" else 1), node[1]
        return lambda r: r[where][index]
    if kind == "wstart":
        return lambda r: r[2]
    if kind == "wend":
        return lambda r: r[3]
    if kind == "rank_score":
        return lambda r: r[1][0]
    if kind == "rank_item":
        return lambda r: r[1][1]
    if kind == "bin":
        return _binary(node[1], node[2], node[3], udfs)
    if kind == "fn":
        args = node[2]
        if len(args) == 2 and args[0][0] == "col" and args[1][0] == "lit" and args[1][1] is not None:
            return _call_column_constant(FUNCTIONS[node[1]][0], args[0][1], args[1][1])
        return _call(FUNCTIONS[node[1]][0], [compile_expr(a, udfs) for a in args])
    if kind == "udf":
        return _udf(udfs[node[1]], [compile_expr(a, udfs) for a in node[2]])
    if kind == "and":
        return _and(compile_expr(node[1], udfs), compile_expr(node[2], udfs))
    if kind == "or":
        return _or(compile_expr(node[1], udfs), compile_expr(node[2], udfs))
    if kind == "not":
        inner = compile_expr(node[1], udfs)
        return lambda r: None if (x := inner(r)) is None else not x
    if kind == "neg":
        inner = compile_expr(node[1], udfs)
        return lambda r: None if (x := inner(r)) is None else -x
    if kind == "isnull":
        inner = compile_expr(node[1], udfs)
        return lambda r: inner(r) is None
    if kind == "in":
        return _in(compile_expr(node[1], udfs), [compile_expr(a, udfs) for a in node[2]])
    if kind == "between":
        return _between(*(compile_expr(a, udfs) for a in node[1:4]))
    if kind == "like":
        return _like(compile_expr(node[1], udfs), node[2], node[3], udfs)
    if kind == "case":
        return _case(node, udfs)
    if kind == "cast":
        inner, cast = compile_expr(node[1], udfs), CASTS[node[2]]
        return lambda r: None if (x := inner(r)) is None else cast(x)
    if kind == "coalesce":
        parts = [compile_expr(a, udfs) for a in node[1]]
        return lambda r: next((x for f in parts if (x := f(r)) is not None), None)
    if kind == "nullif":
        a, b = compile_expr(node[1], udfs), compile_expr(node[2], udfs)
        return lambda r: None if (x := a(r)) == b(r) else x
    if kind == "if":
        cond, then, other = (compile_expr(a, udfs) for a in node[1:4])
        return lambda r: then(r) if cond(r) else other(r)
    raise ValueError(f"unknown expression kind {kind!r}")


def _binary(op: str, left: list[Any], right: list[Any], udfs: Mapping[str, Callable[..., Any]]) -> Fn:
    if left[0] == "lit" and right[0] != "lit" and op in _FLIPPED and (
            op != "+" or type(left[1]) in (int, float)):
        op, left, right = _FLIPPED[op], right, left
    fn = _BINARY[op]
    a = compile_expr(left, udfs)
    if right[0] == "lit":  # the common `col > 5`: the constant captured, one call fewer
        c = right[1]
        if c is None:
            return lambda r: None
        if left[0] == "col":
            compare = _COLUMN_VS_CONSTANT.get(op)
            if compare is not None:
                return compare(left[1], c)
            name = left[1]
            return lambda r: None if (x := r.get(name)) is None else fn(x, c)
        inline = _EXPRESSION_VS_CONSTANT.get(op)
        if inline is not None:
            return inline(a, c)
        return lambda r: None if (x := a(r)) is None else fn(x, c)
    b = compile_expr(right, udfs)

    def run(r: Any) -> Any:
        x = a(r)
        if x is None:
            return None
        y = b(r)
        return None if y is None else fn(x, y)

    return run


def _call(fn: Callable[..., Any], args: list[Fn]) -> Fn:
    if len(args) == 1:
        (a,) = args
        return lambda r: None if (x := a(r)) is None else fn(x)

    def run(r: Any) -> Any:
        values = [f(r) for f in args]
        return None if None in values else fn(*values)

    return run


def _call_column_constant(fn: Callable[..., Any], name: str, c: Any) -> Fn:
    """`f(col, constant)` (`MOD(auction, 123)`, `ROUND(price, 2)`): one closure, no argument list per row."""
    if fn is modulo and type(c) is int and c > 0:
        def mod(r: Any) -> Any:
            x = r.get(name)
            if type(x) is int and x >= 0:
                return x % c  # Python's `%` is SQL's MOD here: a non-negative dividend and a positive divisor
            return None if x is None else fn(x, c)

        return mod
    return lambda r: None if (x := r.get(name)) is None else fn(x, c)


def _udf(fn: Callable[..., Any], args: list[Fn]) -> Fn:
    """A user function gets its arguments as they are, NULLs included: it decides what NULL means."""
    if len(args) == 1:
        (a,) = args
        return lambda r: fn(a(r))
    return lambda r: fn(*[f(r) for f in args])


def _and(a: Fn, b: Fn) -> Fn:
    def run(r: Any) -> Any:
        x = a(r)
        if x is not None and not x:
            return False
        y = b(r)
        if y is not None and not y:
            return False
        return None if x is None or y is None else True

    return run


def _or(a: Fn, b: Fn) -> Fn:
    def run(r: Any) -> Any:
        x = a(r)
        if x:
            return True
        y = b(r)
        if y:
            return True
        return None if x is None or y is None else False

    return run


def _in(a: Fn, items: list[Fn]) -> Fn:
    def run(r: Any) -> Any:
        x = a(r)
        if x is None:
            return None
        unknown = False
        for f in items:
            y = f(r)
            if y is None:
                unknown = True
            elif x == y:
                return True
        return None if unknown else False

    return run


def _between(a: Fn, low: Fn, high: Fn) -> Fn:
    def run(r: Any) -> Any:
        x, lo, hi = a(r), low(r), high(r)
        if x is None or lo is None or hi is None:
            return None
        return lo <= x <= hi

    return run


def like_pattern(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    """SQL LIKE as a regular expression: `%` any run, `_` one character, everything else literal."""
    parts = ("." if ch == "_" else ".*" if ch == "%" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if case_insensitive else 0))


def _like(a: Fn, pattern: list[Any], case_insensitive: bool, udfs: Mapping[str, Callable[..., Any]]) -> Fn:
    if pattern[0] == "lit" and isinstance(pattern[1], str):
        match = like_pattern(pattern[1], case_insensitive).fullmatch
        return lambda r: None if (x := a(r)) is None else match(x if type(x) is str else str(x)) is not None
    p = compile_expr(pattern, udfs)

    def run(r: Any) -> Any:
        x, pat = a(r), p(r)
        if x is None or pat is None:
            return None
        return like_pattern(str(pat), case_insensitive).fullmatch(str(x)) is not None

    return run


def _case(node: list[Any], udfs: Mapping[str, Callable[..., Any]]) -> Fn:
    operand = compile_expr(node[1], udfs) if node[1] is not None else None
    branches = [(compile_expr(w, udfs), compile_expr(t, udfs)) for w, t in node[2]]
    default = compile_expr(node[3], udfs) if node[3] is not None else (lambda r: None)

    def run(r: Any) -> Any:
        if operand is None:
            for when, then in branches:
                if when(r):
                    return then(r)
        else:
            x = operand(r)
            if x is not None:
                for when, then in branches:
                    if when(r) == x:
                        return then(r)
        return default(r)

    return run
