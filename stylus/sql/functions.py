"""The built-in scalar functions and casts of the SQL dialect, as plain Python over JSON values.

Each takes its evaluated arguments; NULL (None) in gives NULL out unless the function says otherwise
(`expr.compile_expr` checks before calling, so these never see a None they did not ask for). The planner
checks names and argument counts against `ARITY` at load time, so an unknown function never reaches a worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from stylus.eventtime.timestamps import epoch_ms


def _text(value: Any) -> str:
    """SQL's implicit cast to a string: JSON's spelling for booleans, Python's for the rest."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if type(value) is str else str(value)


def upper(s: Any) -> str:
    return _text(s).upper()


def lower(s: Any) -> str:
    return _text(s).lower()


def length(s: Any) -> int:
    return len(_text(s))


def substring(s: Any, start: Any, count: Any = None) -> str:
    """1-based, as in SQL: SUBSTRING('stylus', 2, 3) = 'tyl'; a start before 1 eats into the count."""
    text = _text(s)
    first = int(start) - 1
    if count is None:
        return text[max(first, 0):]
    last = first + int(count)
    return text[max(first, 0):max(last, 0)]


def concat(*parts: Any) -> str:
    return "".join(_text(p) for p in parts)


def trim(s: Any, chars: Any = None, where: str = "BOTH") -> str:
    text = _text(s)
    strip = None if chars is None else _text(chars)
    if where == "LEADING":
        return text.lstrip(strip)
    if where == "TRAILING":
        return text.rstrip(strip)
    return text.strip(strip)


def replace(s: Any, old: Any, new: Any) -> str:
    return _text(s).replace(_text(old), _text(new))


def position(sub: Any, s: Any) -> int:
    """1-based index of `sub` in `s`, 0 when absent (SQL's POSITION(sub IN s))."""
    return _text(s).find(_text(sub)) + 1


def round_(x: Any, digits: Any = 0) -> Any:
    """Half away from zero, as SQL rounds (Python's `round` rounds half to even)."""
    scale = 10 ** int(digits)
    value = math.floor(abs(x) * scale + 0.5) / scale
    value = math.copysign(value, x)
    return int(value) if int(digits) <= 0 and isinstance(x, int) else value


def floor(x: Any) -> int:
    return math.floor(x)


def ceil(x: Any) -> int:
    return math.ceil(x)


def divide(a: Any, b: Any) -> Any:
    """`/`: a float quotient, NULL when dividing by zero (docs/sql.md, "Adaptations")."""
    return None if b == 0 else a / b


def int_divide(a: Any, b: Any) -> Any:
    """`DIV`: the integer quotient rounded toward zero, NULL when dividing by zero."""
    if b == 0:
        return None
    q = abs(a) // abs(b)
    return int(q if (a >= 0) == (b >= 0) else -q)


def modulo(a: Any, b: Any) -> Any:
    """`%` / MOD: the remainder with the sign of the dividend (SQL's, not Python's), NULL for zero."""
    if b == 0:
        return None
    return math.fmod(a, b) if isinstance(a, float) or isinstance(b, float) else int(math.fmod(a, b))


def greatest(*values: Any) -> Any:
    return max(values)


def least(*values: Any) -> Any:
    return min(values)


#: name -> (function, least arguments, most arguments); every one NULL-propagating
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {
    "upper": (upper, 1, 1),
    "lower": (lower, 1, 1),
    "length": (length, 1, 1),
    "substring": (substring, 2, 3),
    "concat": (concat, 1, 255),
    "trim": (trim, 1, 3),
    "replace": (replace, 3, 3),
    "position": (position, 2, 2),
    "abs": (abs, 1, 1),
    "round": (round_, 1, 2),
    "floor": (floor, 1, 1),
    "ceil": (ceil, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "power": (math.pow, 2, 2),
    "divide": (divide, 2, 2),
    "int_divide": (int_divide, 2, 2),
    "mod": (modulo, 2, 2),
    "greatest": (greatest, 1, 255),
    "least": (least, 1, 255),
}


# ---------------------------------------------------------------------------------------------- casts
def to_int(value: Any) -> int:
    if type(value) is str:
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            return int(float(text))
    return int(value)


def to_float(value: Any) -> float:
    return float(value.strip() if type(value) is str else value)


def to_bool(value: Any) -> bool:
    if type(value) is str:
        text = value.strip().lower()
        if text in ("true", "t", "yes", "1"):
            return True
        if text in ("false", "f", "no", "0"):
            return False
        raise ValueError(f"cannot cast {value!r} to BOOLEAN")
    return bool(value)


def to_timestamp(value: Any) -> int:
    """TIMESTAMP is ms since the epoch, as time columns are (docs/sql.md)."""
    ms = epoch_ms(value)
    if ms is None:
        raise ValueError(f"cannot cast {value!r} to TIMESTAMP (ms since the epoch or ISO-8601 text)")
    return ms


CASTS: dict[str, Callable[[Any], Any]] = {
    "int": to_int, "float": to_float, "text": _text, "bool": to_bool, "timestamp": to_timestamp,
}

#: SQL type names (sqlglot's DType names) -> cast
TYPE_NAMES: dict[str, str] = {
    **dict.fromkeys(("TINYINT", "SMALLINT", "INT", "MEDIUMINT", "BIGINT", "UBIGINT", "UINT", "USMALLINT",
                     "UTINYINT"), "int"),
    **dict.fromkeys(("FLOAT", "DOUBLE", "DECIMAL", "DECIMAL32", "DECIMAL64", "DECIMAL128", "BIGDECIMAL"), "float"),
    **dict.fromkeys(("VARCHAR", "CHAR", "TEXT", "NVARCHAR", "NCHAR", "STRING"), "text"),
    "BOOLEAN": "bool",
    **dict.fromkeys(("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ", "DATETIME"), "timestamp"),
}
