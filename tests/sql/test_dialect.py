"""Puma's statements around sqlglot: what is read from the tokens, and that blanking the Puma clauses keeps
every offset (so errors after them still point at the right line and column)."""

from __future__ import annotations

import pytest

from stylus.sql.dialect import read_app
from stylus.sql.errors import SqlError
from stylus.sql.source import SqlSource

FIGURE_2 = """CREATE APPLICATION top_events;
CREATE INPUT TABLE events_score(event_time, event, category, score)
  FROM SCRIBE("events_stream") TIME event_time;
CREATE TABLE top_events_5min AS
  SELECT category, event, topk(score) AS score
  FROM events_score [5 minutes];
"""


def test_figure_2_as_printed_in_the_paper() -> None:
    app = read_app(SqlSource(FIGURE_2, "fig2.sql"))
    assert app.name == "top_events"
    (table,) = app.inputs.values()
    assert (table.name, table.columns, table.topic, table.time) == (
        "events_score", ("event_time", "event", "category", "score"), "events_stream", "event_time")
    (created,) = app.tables
    assert created.name == "top_events_5min" and created.window is not None and created.window.size == 300_000
    assert created.query.sql() == "SELECT category, event, TOPK(score) AS score FROM events_score"


@pytest.mark.parametrize(("window", "ms"), [
    ("[5 minutes]", 300_000), ("[1 minute]", 60_000), ("[30 seconds]", 30_000), ("[2 hours]", 7_200_000),
    ("[1 day]", 86_400_000), ("[500 milliseconds]", 500), ("[10 s]", 10_000),
])
def test_puma_windows(window: str, ms: int) -> None:
    app = read_app(SqlSource(f"CREATE INPUT TABLE t(a) FROM KAFKA('x') TIME a;\n"
                             f"CREATE TABLE o AS SELECT COUNT(*) AS n FROM t AS alias {window};", "w.sql"))
    window_ = app.tables[0].window
    assert window_ is not None and window_.size == ms


def test_comments_functions_and_statements_in_any_case() -> None:
    app = read_app(SqlSource("-- a comment; with a semicolon\n/* block; */ create input table t(a, b) "
                             "from kafka('x');\ncreate function f as 'pkg.mod:fn';\n"
                             "create table o as select a from t", "c.sql"))
    assert list(app.inputs) == ["t"] and app.inputs["t"].time is None
    assert app.functions["f"].path == "pkg.mod:fn"
    assert [t.name for t in app.tables] == ["o"]


def test_an_error_after_a_window_keeps_its_column() -> None:
    text = ("CREATE INPUT TABLE t(a) FROM KAFKA('x') TIME a;\n"
            "CREATE TABLE o AS SELECT COUNT(*) AS n FROM t [5 minutes] WHERE a >;\n")
    source = SqlSource(text, "e.sql")
    with pytest.raises(SqlError) as info:
        read_app(source)
    (problem,) = info.value.problems
    assert problem.offset is not None
    assert source.position(problem.offset) == (2, text.split("\n")[1].index(">") + 1)  # the incomplete `>`


@pytest.mark.parametrize(("text", "message"), [
    ("", "the SQL file has no statements"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA('x');", "the app creates no table"),
    ("SELECT 1;", "a statement of a SQL app starts with CREATE"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA('x');\nCREATE APPLICATION late;\nCREATE TABLE o AS SELECT a FROM t;",
     "`CREATE APPLICATION` must be the first statement"),
    ("CREATE INPUT TABLE t(a, a) FROM KAFKA('x');", "column `a` is listed twice"),
    ("CREATE INPUT TABLE t(a INT) FROM KAFKA('x');", "expected `,` or `)` in the column list"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA(x);", "expected the topic's name as a string"),
    ("CREATE FUNCTION f AS fn;", "expected the function's import path as a string 'module:callable'"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA('x');\nCREATE TABLE t AS SELECT a FROM t;", "table `t` is defined twice"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA('x');\nCREATE TABLE o AS SELECT a FROM t [5];", "`[5]` is not a window"),
    ("CREATE INPUT TABLE t(a) FROM KAFKA('x');\nCREATE TABLE o AS SELECT a FROM t UNION SELECT a FROM t;",
     "a table is defined by one SELECT, not a UNION"),
])
def test_statement_errors(text: str, message: str) -> None:
    with pytest.raises(SqlError) as info:
        read_app(SqlSource(text, "s.sql"))
    assert message in str(info.value)
    assert info.value.problems[0].fix
