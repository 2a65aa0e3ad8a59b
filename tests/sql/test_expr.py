"""Expressions as SQL means them (NULLs, three-valued logic, LIKE, CASE, CAST, string and number functions),
compiled once into closures and evaluated on rows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from stylus.api import Record
from stylus.sql.app import compile_app
from stylus.sql.source import SqlSource
from stylus.sql.stage import SqlStage

ROW = {"a": 7, "b": 2, "f": 2.5, "s": "Stylus", "pad": "  x  ", "n": None, "t": True, "z": 0,
       "ts": "2024-01-01T00:00:01.500Z"}
COLUMNS = ", ".join(ROW)


def evaluate(expression: str, row: dict[str, Any] = ROW, where: str | None = None) -> Any:
    app = compile_app(SqlSource(f"CREATE INPUT TABLE t({COLUMNS}) FROM KAFKA('x');\n"
                                f"CREATE TABLE o AS SELECT {expression} AS v FROM t"
                                + (f" WHERE {where}" if where else "") + ";", "test.sql"))
    (stage,) = app.stages
    emitted: list[Any] = []
    ctx = SimpleNamespace(emit=lambda value, key=None: emitted.append(value))
    SqlStage({"sql": {"plan": stage.plan}}).process(Record(None, row, 0, "x", 0, 0), ctx)  # type: ignore[arg-type]
    return emitted[0]["v"] if emitted else None


@pytest.mark.parametrize(("expression", "expected"), [
    ("a + b * 2", 11), ("a - b", 5), ("a / b", 3.5), ("a DIV b", 3), ("-a DIV b", -3), ("a % b", 1), ("-a % b", -1),
    ("a / z", None), ("a % z", None), ("f * 2", 5.0), ("-a", -7), ("(a + b) * 2", 18), ("POWER(b, 3)", 8.0),
    ("a + n", None), ("n * 2", None), ("ABS(-a)", 7), ("ROUND(2.5)", 3.0), ("ROUND(f * 1.234, 2)", 3.09),
    ("FLOOR(f)", 2), ("CEIL(f)", 3), ("SQRT(4)", 2.0), ("GREATEST(a, b, 3)", 7), ("LEAST(a, b)", 2),
    ("a > b", True), ("a = 7", True), ("a <> 7", False), ("a != b", True), ("a >= n", None), ("s = 'Stylus'", True),
    ("a > 1 AND b > 1", True), ("a > 1 AND n > 1", None), ("a < 1 AND n > 1", False), ("a < 1 OR n > 1", None),
    ("a > 1 OR n > 1", True), ("NOT (a > 1)", False), ("NOT (n > 1)", None), ("n IS NULL", True),
    ("a IS NOT NULL", True), ("a IN (1, 7)", True), ("a IN (1, 2)", False), ("a IN (1, n)", None),
    ("a NOT IN (1, 2)", True), ("a BETWEEN 1 AND 7", True), ("a NOT BETWEEN 1 AND 7", False),
    ("s LIKE 'St%'", True), ("s LIKE '_tylus'", True), ("s LIKE 'st%'", False), ("s ILIKE 'st%'", True),
    ("s NOT LIKE '%x%'", True), ("n LIKE 'a'", None), ("s LIKE 'a.b'", False),
    ("CASE WHEN a > 5 THEN 'big' WHEN a > 1 THEN 'mid' ELSE 'small' END", "big"),
    ("CASE WHEN a > 50 THEN 'big' END", None), ("CASE b WHEN 1 THEN 'one' WHEN 2 THEN 'two' END", "two"),
    ("IF(a > 5, 'y', 'n')", "y"), ("COALESCE(n, b, a)", 2), ("NULLIF(a, 7)", None), ("NULLIF(a, 1)", 7),
    ("CAST(f AS BIGINT)", 2), ("CAST('42' AS INT)", 42), ("CAST(a AS VARCHAR)", "7"), ("CAST(t AS VARCHAR)", "true"),
    ("CAST(a AS DOUBLE)", 7.0), ("CAST('true' AS BOOLEAN)", True), ("CAST(ts AS TIMESTAMP)", 1704067201500),
    ("CAST(n AS INT)", None),
    ("UPPER(s)", "STYLUS"), ("LOWER(s)", "stylus"), ("LENGTH(s)", 6), ("CHAR_LENGTH(s)", 6),
    ("SUBSTRING(s, 2, 3)", "tyl"), ("SUBSTRING(s, 3)", "ylus"), ("SUBSTR(s, 0, 2)", "S"),
    ("CONCAT(s, '-', a)", "Stylus-7"), ("s || '!'", "Stylus!"), ("s || n", None), ("TRIM(pad)", "x"),
    ("LTRIM(pad)", "x  "), ("RTRIM(pad)", "  x"), ("TRIM(BOTH 'S' FROM s)", "tylus"),
    ("REPLACE(s, 'y', 'i')", "Stilus"),
    ("POSITION('lus' IN s)", 4), ("UPPER(n)", None), ("TRUE", True), ("NULL", None), ("'it''s'", "it's"),
])
def test_expression(expression: str, expected: Any) -> None:
    value = evaluate(expression)
    assert value == expected and type(value) is type(expected), (expression, value)


def test_where_keeps_a_row_only_when_true() -> None:
    assert evaluate("a", where="a > 1") == 7
    assert evaluate("a", where="a > 100") is None
    assert evaluate("a", where="n > 1") is None  # unknown is not true


def test_a_missing_field_is_null() -> None:
    assert evaluate("COALESCE(a, 0) + 1", {"b": 1}) == 1
