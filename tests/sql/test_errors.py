"""Bad SQL is refused when the pipeline loads (`stylus validate`, and before `stylus run` starts anything), with
the SQL file, the line and column of the offending text, what is wrong, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from stylus.config import PipelineError, load_pipeline
from tests.sql.helpers import write_app
from tests.support.cli import run_stylus

HEAD = ("CREATE INPUT TABLE events_score(event_time, event, category, score)\n"
        "  FROM KAFKA('events') TIME event_time;\n"
        "CREATE TABLE out AS\n")  # the query under test starts on line 4
PER_MINUTE = ("SELECT category, COUNT(*) AS n FROM events_score\n"
              "GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE)\n")


@dataclass(frozen=True)
class Bad:
    id: str
    query: str  # line 4 on (after HEAD), or the whole app when `whole`
    at: str  # the text the error must point at (its first occurrence from line 4, or in the whole app)
    message: str
    fix: str
    whole: bool = False


BAD = [
    Bad("unknown-column", "SELECT category, event, topk(scroe) AS score FROM events_score [5 minutes];", "scroe",
        "unknown column `scroe` in table `events_score`", "did you mean `score`?"),
    Bad("non-aggregated", "SELECT category, event, COUNT(*) AS n FROM events_score\n"
        "GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE);", "event,",
        "non-aggregated column `event` is not in GROUP BY",
        "add `event` to GROUP BY, or aggregate it (e.g. MAX(event))"),
    Bad("window-on-non-time-column", "SELECT category, COUNT(*) AS n FROM events_score\n"
        "GROUP BY category, TUMBLE(category, INTERVAL '1' MINUTE);", "category, INTERVAL",
        "window on a non-time column: `category` is not the time column of `events_score` (its time column is "
        "`event_time`)", "window on `event_time`, or declare `TIME category` on the input table"),
    Bad("syntax", "SELECT category, COUNT(*) AS n FROM events_score WHERE GROUP BY category;", "GROUP",
        "syntax error at `GROUP BY`: WHERE is incomplete", "complete the WHERE clause, or remove it"),
    Bad("syntax-paren", "SELECT UPPER(category AS c FROM events_score;", "AS c",
        "syntax error at `AS`: expected `)`", "add the missing `)`"),
    Bad("unknown-function", "SELECT uppr(category) AS c FROM events_score;", "uppr",
        "unknown function `uppr`", "did you mean `upper`?"),
    Bad("unknown-table", "SELECT category FROM event_score;", "event_score",
        "unknown table `event_score`", "did you mean `events_score`?"),
    Bad("aggregate-without-window", "SELECT category, COUNT(*) AS n FROM events_score;", "COUNT",
        "an aggregate needs a window", "add a window after the table, as in `FROM events_score [5 minutes]`"),
    Bad("hop-slide-longer-than-size", "SELECT COUNT(*) AS n FROM events_score\n"
        "GROUP BY HOP(event_time, INTERVAL '2' MINUTE, INTERVAL '1' MINUTE);", "'2'",
        "HOP's slide (120000 ms) is longer than its size (60000 ms)", "slide <= size"),
    Bad("bad-puma-window", "SELECT category, COUNT(*) AS n FROM events_score [5 fortnights];", "[5",
        "`[5 fortnights]` is not a window", "[5 minutes]"),
    Bad("aggregate-in-where", "SELECT category FROM events_score WHERE COUNT(*) > 1;", "COUNT",
        "an aggregate is not allowed in WHERE", "filter groups with HAVING"),
    Bad("join-unknown-table", "SELECT category FROM events_score JOIN other ON a = b;", "other",
        "unknown table `other`: neither a table of the app nor one of the pipeline's `tables:`",
        "under `tables:` in the pipeline YAML for a lookup join"),
    Bad("bounds-of-another-window", "SELECT TUMBLE_START(event_time, INTERVAL '2' MINUTE) AS s, COUNT(*) AS n\n"
        "FROM events_score GROUP BY TUMBLE(event_time, INTERVAL '1' MINUTE);", "TUMBLE_START",
        "TUMBLE_START names another window than the query's", "give it the same column and intervals"),
    Bad("undeclared-time-column", "CREATE INPUT TABLE e(a, b) FROM KAFKA('events') TIME c;\n"
        "CREATE TABLE out AS SELECT a FROM e;", "c;", "the time column `c` is not among the columns of `e` (a, b)",
        "add `c` to the column list", whole=True),
    Bad("input-statement", "CREATE INPUT TABLE e(a, b) FROM FILE('x');\nCREATE TABLE out AS SELECT a FROM e;", "FILE",
        "syntax error: an input table is read FROM KAFKA('topic'), not `FILE`", "write CREATE INPUT TABLE", whole=True),
    Bad("unclosed-string", "SELECT category FROM events_score WHERE event = 'abc;", "'abc",
        "syntax error: string is never closed", "close the string"),
    Bad("udf-not-importable", "CREATE FUNCTION f AS 'tests.sql.udfs:nope';\n"
        "CREATE INPUT TABLE e(a) FROM KAFKA('events');\nCREATE TABLE out AS SELECT f(a) AS x FROM e;",
        "'tests.sql.udfs:nope'", "cannot import `tests.sql.udfs:nope`", "give the path as 'package.module:callable'",
        whole=True),
    Bad("undeclared-topic", "CREATE INPUT TABLE e(a) FROM KAFKA('evnts');\nCREATE TABLE out AS SELECT a FROM e;",
        "'evnts'", "topic `evnts` (read by input table `e`) is not declared under `topics`",
        "did you mean `events`? or add `evnts: {partitions: 1}` under `topics`", whole=True),
    Bad("qualify-row-number", f"{PER_MINUTE}QUALIFY ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY n DESC) = 1;",
        "ROW_NUMBER", "ROW_NUMBER() picks among tied rows arbitrarily", "use RANK() (every tied row is kept)"),
    Bad("qualify-without-window", "SELECT category FROM events_score QUALIFY RANK() OVER (PARTITION BY category\n"
        "ORDER BY score) = 1;", "RANK", "QUALIFY ranks the rows of a window, and this query has none",
        "add a window (`FROM events_score [5 minutes]`"),
    Bad("qualify-not-per-window", f"{PER_MINUTE}QUALIFY RANK() OVER (PARTITION BY category ORDER BY n DESC) = 1;",
        "RANK() OVER", "a ranking on a stream is per window: PARTITION BY must name the window",
        "add window_start (or window_end) to PARTITION BY"),
    Bad("qualify-one-rank", f"{PER_MINUTE}QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY n DESC) = 2;",
        "2;", "`= 2` keeps one rank, not the top rows", "write `<= 2` for the top 2, or `= 1` for the first"),
    Bad("qualify-without-order", f"{PER_MINUTE}QUALIFY RANK() OVER (PARTITION BY window_start) = 1;", "RANK",
        "RANK() needs ORDER BY", "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY col DESC) <= n"),
    Bad("qualify-with-topk", "SELECT category, event, topk(score) AS score FROM events_score [5 minutes]\n"
        "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY score DESC) = 1;", "RANK",
        "QUALIFY and Puma's ranking topk do not combine", "rank with one of them"),
    Bad("window-function-in-select", "SELECT category, RANK() OVER (ORDER BY score) AS r FROM events_score [1 minute];",
        "RANK", "a window function (OVER) is supported in QUALIFY only", "keep the top rows of each window with "
        "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY col DESC) <= n"),
    Bad("key-not-a-column", "CREATE INPUT TABLE e(a, b) FROM KAFKA('events') KEY c TIME a;\n"
        "CREATE TABLE out AS SELECT a FROM e;", "c TIME", "the key column `c` is not among the columns of `e` (a, b)",
        "add `c` to the column list, or name one of them after KEY", whole=True),
]


def position(text: str, at: str, whole: bool, head: str = HEAD) -> tuple[int, int]:
    offset = text.index(at) if whole else text.index(at, len(head))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
def test_bad_sql_names_file_line_column_and_fix(bad: Bad, tmp_path: Path) -> None:
    text = bad.query + "\n" if bad.whole else HEAD + bad.query + "\n"
    path = write_app(tmp_path, text, topics={"events": 1, "out": 1})
    with pytest.raises(PipelineError) as info:
        load_pipeline(path)
    rendered = str(info.value)
    line, column = position(text, bad.at, bad.whole)
    assert rendered.startswith(f"{tmp_path / 'app.sql'}:{line}:{column}: processors.app.sql: "), rendered
    assert bad.message in rendered, rendered
    assert "\n    fix: " in rendered and bad.fix in rendered.split("fix: ", 1)[1], rendered
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.column) == (str(tmp_path / "app.sql"), line, column)


JOIN_HEAD = ("CREATE INPUT TABLE events_score(event_time, event, category, score, user_id)\n"
             "  FROM KAFKA('events') TIME event_time;\n"
             "CREATE INPUT TABLE clicks(ts, user_id, page) FROM KAFKA('clicks') TIME ts;\n"
             "CREATE TABLE out AS\n")  # the query under test starts on line 5
#: the pipeline's tables the join errors may look up: `users` (global) and `regions` (partitioned)
JOIN_TABLES = {"users": {"topic": "profiles", "placement": "global", "key": "user_id", "value": ["user_id", "country"]},
               "regions": {"topic": "profiles", "placement": "partitioned", "key": "user_id"}}
ON_USER = "ON e.user_id = c.user_id;"
JOIN_BAD = [
    Bad("join-non-equi", "SELECT e.event FROM events_score [1 minute] e JOIN clicks [1 minute] c ON e.user_id < "
        "c.user_id;", "e.user_id <", "a join of two streams pairs rows with equal keys: it needs an equality",
        "add one: ON e.col = c.col"),
    Bad("join-streams-without-window", f"SELECT e.event, c.page FROM events_score e JOIN clicks c {ON_USER}",
        "events_score e", "a join of two streams needs a window on both: `events_score` has none",
        "write the same window after both tables: FROM events_score [10 seconds] JOIN clicks [10 seconds] ON ...; "
        "or declare `clicks` under `tables:`"),
    Bad("join-one-window", f"SELECT e.event FROM events_score [1 minute] e JOIN clicks c {ON_USER}", "clicks c",
        "a join of two streams needs a window on both: `clicks` has none",
        "FROM events_score [1 minute] JOIN clicks [1 minute] ON ..."),
    Bad("join-different-windows", f"SELECT e.event FROM events_score [1 minute] e JOIN clicks [2 minutes] c {ON_USER}",
        "[2 minutes]", "the two sides of a join have different windows ([1 minute] and [2 minutes])",
        "give both the same window: [1 minute]"),
    Bad("join-right", f"SELECT e.event FROM events_score [1 minute] e RIGHT JOIN clicks [1 minute] c {ON_USER}",
        "clicks [1", "RIGHT JOIN is not supported", "swap the tables and write LEFT JOIN"),
    Bad("join-using", "SELECT e.event FROM events_score [1 minute] e JOIN clicks [1 minute] c USING (user_id);",
        "clicks [1", "JOIN ... USING is not supported", "write the condition: ON a.col = b.col"),
    Bad("join-cross", "SELECT e.event FROM events_score [1 minute] e CROSS JOIN clicks [1 minute] c;", "clicks [1",
        "a CROSS JOIN pairs every row with every row", "join on an equality"),
    Bad("join-group-by", f"SELECT e.category FROM events_score [1 minute] e JOIN clicks [1 minute] c {ON_USER[:-1]}\n"
        "GROUP BY e.category;", "e.category;", "GROUP BY on a join groups the pairs of each join key: it must "
        "include a column the join compares", "add the join key to GROUP BY (GROUP BY e.user_id, ...), or create the "
        "join as its own table and aggregate that one"),
    Bad("lookup-group-by", "SELECT u.country, COUNT(*) AS n FROM events_score e JOIN users u ON e.user_id = "
        "u.user_id\nGROUP BY u.country;", "u.country;", "GROUP BY on a lookup join: a stream has no end to aggregate "
        "over, and a lookup join has no window", "create the join as its own table and aggregate that one in a "
        "window"),
    Bad("join-aggregate", f"SELECT COUNT(*) AS n FROM events_score [1 minute] e JOIN clicks [1 minute] c {ON_USER}",
        "COUNT", "an aggregate in the SELECT of a join", "create the join as its own table"),
    Bad("join-three-tables", "SELECT e.event FROM events_score e JOIN users u ON e.user_id = u.user_id\n"
        "JOIN clicks c ON c.user_id = e.user_id;", "clicks c", "a query joins two tables, not more",
        "create the first join as its own table"),
    Bad("join-ambiguous-column", f"SELECT user_id FROM events_score [1 minute] e JOIN clicks [1 minute] c {ON_USER}",
        "user_id FROM", "column `user_id` is ambiguous: both `e` and `c` have it",
        "qualify it: e.user_id or c.user_id"),
    Bad("lookup-without-key", "SELECT e.event, u.country FROM events_score e JOIN users u ON e.event = u.country;",
        "e.event = u", "a lookup join finds the row of `users` by its key: the join needs `e.col = u.user_id`",
        "compare a column of `events_score` with the key column `user_id` of the pipeline's table `users`"),
    Bad("lookup-left-join-table-first", "SELECT e.event FROM users u LEFT JOIN events_score e ON e.user_id = "
        "u.user_id;", "users u", "LEFT JOIN keeps every row of the left table, here the pipeline's table `users`",
        "put the stream first: FROM events_score LEFT JOIN users ON ..."),
    Bad("lookup-partitioned-not-keyed", "SELECT e.event, r.region FROM events_score e JOIN regions r ON e.user_id = "
        "r.user_id;", "regions r", "the pipeline's table `regions` is partitioned: a lookup reads the partition "
        "of the row being processed", "declare `KEY col` on `events_score` if its producer keys records by that "
        "column"),
    Bad("lookup-with-window", "SELECT e.event FROM events_score [1 minute] e JOIN users u ON e.user_id = u.user_id;",
        "[1 minute]", "a lookup join has no window", "remove the window"),
    Bad("lookup-unknown-column", "SELECT e.event, u.contry FROM events_score e JOIN users u ON e.user_id = "
        "u.user_id;", "u.contry", "unknown column `contry` in `users`", "did you mean `country`?"),
]


@pytest.mark.parametrize("bad", JOIN_BAD, ids=[b.id for b in JOIN_BAD])
def test_bad_joins_name_file_line_column_and_fix(bad: Bad, tmp_path: Path) -> None:
    text = JOIN_HEAD + bad.query + "\n"
    path = write_app(tmp_path, text, topics={"events": 2, "clicks": 2, "profiles": 2, "out": 1}, tables=JOIN_TABLES)
    with pytest.raises(PipelineError) as info:
        load_pipeline(path)
    rendered = str(info.value)
    line, column = position(text, bad.at, False, JOIN_HEAD)
    assert rendered.startswith(f"{tmp_path / 'app.sql'}:{line}:{column}: processors.app.sql: "), rendered
    assert bad.message in rendered, rendered
    assert "\n    fix: " in rendered and bad.fix in rendered.split("fix: ", 1)[1], rendered


def test_a_window_join_refuses_late_update(tmp_path: Path) -> None:
    """Its pairs come out once, when the window closes, and its rows go: a late row has nothing to pair with."""
    text = JOIN_HEAD + f"SELECT e.event, c.page FROM events_score [1 minute] e JOIN clicks [1 minute] c {ON_USER}\n"
    path = write_app(tmp_path, text, topics={"events": 1, "clicks": 1, "out": 1},
                     processor={"event_time": {"late": "update"}})
    with pytest.raises(PipelineError) as info:
        load_pipeline(path)
    rendered = str(info.value)
    assert ": processors.app.event_time.late: table `out` is a window join" in rendered, rendered
    assert "use `late: drop` or `late: topic`" in rendered.split("fix: ", 1)[1]


@pytest.mark.parametrize(("settings", "path", "message", "fix"), [
    ({"semantics": {"output": "at_least_once"}}, "processors.app.semantics",
     "table `out` is windowed, and its windows are state; this processor is stateless", "add `state: exactly_once`"),
    ({"event_time": {"field": "ts"}}, "processors.app.event_time.field",
     "a SQL app's event time is its tables' time column", "remove `field` here"),
    ({"inputs": ["events"]}, "processors.app", "a SQL app's inputs, outputs and configuration come from its SQL",
     "remove inputs"),
    ({"class": "tests.apps.counting:WordCount"}, "processors.app", "not both (this one has `class` and `sql`)",
     "keep one of `class: module:Class`, `command: [./program, arg]` and `sql: app.sql`"),
    ({"sql": "missing.sql"}, "processors.app.sql", "cannot read", "relative to the pipeline file"),
], ids=["stateless-window", "event-time-field", "inputs", "class-and-sql", "missing-file"])
def test_yaml_settings_a_sql_app_cannot_take(settings: dict, path: str, message: str, fix: str,
                                             tmp_path: Path) -> None:
    app = HEAD + "SELECT category, COUNT(*) AS n FROM events_score [1 minute];\n"
    yaml_path = write_app(tmp_path, app, topics={"events": 1, "out": 1}, processor=settings)
    with pytest.raises(PipelineError) as info:
        load_pipeline(yaml_path)
    rendered = str(info.value)
    assert rendered.startswith(f"{yaml_path}:"), rendered  # a YAML problem: the YAML file and its line
    assert f": {path}: " in rendered and message in rendered, rendered
    assert fix in rendered.split("fix: ", 1)[1], rendered


def test_validate_and_run_refuse_bad_sql_before_starting_anything(tmp_path: Path) -> None:
    """Through the CLI: exit 2 with the SQL file's line, column and fix; `run` never reaches the broker."""
    text = HEAD + "SELECT category, event, topk(scroe) AS score FROM events_score [5 minutes];\n"
    path = write_app(tmp_path, text, topics={"events": 1, "out": 1})
    line, column = position(text, "scroe", False)
    for command in (["validate", str(path)], ["run", str(path), "--exit-when-idle", "1"]):
        done = run_stylus(*command, bootstrap="127.0.0.1:1", timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"{tmp_path / 'app.sql'}:{line}:{column}: processors.app.sql: unknown column `scroe`" in done.stderr
        assert "fix: did you mean `score`?" in done.stderr
        assert "bootstrap servers" not in done.stderr and "processed" not in done.stdout  # nothing started
