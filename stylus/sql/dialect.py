"""Read a Puma app: its statements, with the Puma-only clauses taken out before sqlglot parses the SELECTs.

    CREATE APPLICATION top_events;                                        -- optional, at most once, first
    CREATE INPUT TABLE events_score(event_time, event, category, score)
      FROM KAFKA('events_stream') [KEY category] TIME event_time;         -- SCRIBE("...") is a synonym
    CREATE FUNCTION norm AS 'mypkg.udfs:norm';                            -- a Python UDF or UDAF
    CREATE TABLE top_events_5min AS
      SELECT category, event, topk(score) AS score
      FROM events_score [5 minutes];                                      -- Puma's tumbling window

sqlglot parses standard SQL only, so the statements it cannot read (`CREATE APPLICATION`, `CREATE INPUT
TABLE ... FROM KAFKA(...) TIME col`, `CREATE FUNCTION ... AS '...'`) are read here from sqlglot's own tokens,
and a `[N unit]` window after a table in FROM is blanked out of the query (`SqlSource.blanked`): sqlglot
then sees the SELECT at its original offsets, so its nodes and errors point into the file as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, Tokenizer, TokenType

from stylus.sql.errors import SqlError, fail
from stylus.sql.source import SqlSource

#: interval units (singular, lower case) -> milliseconds; plurals and short forms are accepted too
UNITS = {"millisecond": 1, "ms": 1, "second": 1000, "sec": 1000, "s": 1000, "minute": 60_000, "min": 60_000,
         "m": 60_000, "hour": 3_600_000, "h": 3_600_000, "day": 86_400_000, "d": 86_400_000}
#: `[N unit]` (tumbling) or `[N unit ADVANCE BY M unit]` (hopping: size N unit, a new window every M unit)
_WINDOW = re.compile(r"^\s*(\d+)\s*([A-Za-z]+)(?:\s+ADVANCE\s+BY\s+(\d+)\s*([A-Za-z]+))?\s*$", re.IGNORECASE)


def unit_ms(unit: str) -> int | None:
    """Milliseconds in one `unit` (`minute`, `minutes`, `MINUTE`, `ms`, ...), or None."""
    unit = unit.lower()
    return UNITS.get(unit, UNITS.get(unit[:-1]) if unit.endswith("s") and len(unit) > 2 else None)


@dataclass(frozen=True)
class InputTable:
    """`CREATE INPUT TABLE name(columns) FROM KAFKA('topic') [KEY col] [TIME col]`: a topic read as rows. KEY
    says the producer keyed each record by that column's value, so all rows of one value are in one partition:
    a windowed table grouping by it needs no shuffle (stylus/sql/expand.py)."""

    name: str
    offset: int
    columns: tuple[str, ...]
    topic: str
    topic_offset: int
    time: str | None = None
    time_offset: int | None = None
    key: str | None = None  # `KEY col`: the records' Kafka key is this column's value
    key_offset: int | None = None


@dataclass(frozen=True)
class FunctionDef:
    """`CREATE FUNCTION name AS 'module:callable'`."""

    name: str
    path: str
    offset: int
    path_offset: int


@dataclass(frozen=True)
class PumaWindow:
    """`FROM table [5 minutes]`: a tumbling window of `size` ms over the table's time column;
    `[10 seconds ADVANCE BY 5 seconds]` a hopping one (a window of `size` every `slide` ms)."""

    size: int
    offset: int  # of the `[`
    slide: int | None = None  # hopping: the advance; None: tumbling
    table_offset: int | None = None  # of the name of the table it follows (a join has one per table)


@dataclass(frozen=True)
class TableDef:
    """`CREATE TABLE name AS SELECT ...`: a table computed from another, written to the topic `name`."""

    name: str
    offset: int
    query: exp.Select
    window: PumaWindow | None = None
    windows: tuple[PumaWindow, ...] = ()  # every `[...]` window, one per table of a JOIN (stylus/sql/join.py)


@dataclass
class AppText:
    """The statements of one app, in file order."""

    source: SqlSource
    name: str | None = None
    inputs: dict[str, InputTable] = field(default_factory=dict)
    functions: dict[str, FunctionDef] = field(default_factory=dict)
    tables: list[TableDef] = field(default_factory=list)


STATEMENTS = ("CREATE APPLICATION name; CREATE INPUT TABLE name(col, ...) FROM KAFKA('topic') TIME col; "
              "CREATE FUNCTION name AS 'module:callable'; CREATE TABLE name AS SELECT ...")


def read_app(source: SqlSource) -> AppText:
    """The app's statements, checked for form (names and columns are checked by `stylus.sql.plan`)."""
    tokens = _tokens(source)
    app = AppText(source)
    statements = _split(tokens)
    if not statements:
        raise fail("the SQL file has no statements", f"write the app's statements: {STATEMENTS}", 0)
    for index, statement in enumerate(statements):
        _statement(app, statement, index, source)
    if not app.tables:
        raise fail("the app creates no table, so it would compute nothing",
                   "add `CREATE TABLE name AS SELECT ... FROM input_table;` (the table's name is its output topic)",
                   statements[-1][0].start)
    return app


def _tokens(source: SqlSource) -> list[Token]:
    try:
        return list(Tokenizer().tokenize(source.text))
    except TokenError as exc:
        offset, what = _unterminated(source.text)
        raise fail(f"syntax error: {what} is never closed", f"close the {what}",
                   offset if offset is not None else exc.start) from exc


def _unterminated(text: str) -> tuple[int | None, str]:
    """Where a quote or comment opens that never closes (what the tokenizer choked on)."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"`":
            end = text.find(ch, i + 1)
            while end != -1 and end + 1 < len(text) and text[end + 1] == ch:  # '' escapes a quote
                end = text.find(ch, end + 2)
            if end == -1:
                return i, {"'": "string", '"': "quoted name", "`": "quoted name"}[ch]
            i = end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end == -1 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                return i, "comment"
            i = end + 2
        else:
            i += 1
    return None, "a quote or comment"


def _split(tokens: list[Token]) -> list[list[Token]]:
    statements: list[list[Token]] = []
    current: list[Token] = []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if current:
                statements.append(current)
            current = []
        else:
            current.append(token)
    if current:
        statements.append(current)
    return statements


def _word(token: Token | None) -> str:
    return token.text.upper() if token is not None and token.token_type != TokenType.STRING else ""


def _name(token: Token | None, what: str, after: Token) -> str:
    """An identifier token's text, or the error naming what was expected there."""
    if token is None or token.token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.L_PAREN,
                                             TokenType.R_PAREN, TokenType.COMMA):
        where = token.start if token is not None else after.end + 1
        raise fail(f"syntax error: expected {what}" + (f", found `{token.text}`" if token is not None else ""),
                   f"write {what} here", where)
    return token.text


def _statement(app: AppText, tokens: list[Token], index: int, source: SqlSource) -> None:
    first = tokens[0]
    words = [_word(t) for t in tokens[:3]]
    if words[:2] == ["CREATE", "APPLICATION"]:
        if index != 0:
            raise fail("`CREATE APPLICATION` must be the first statement", "move it to the top of the file",
                       first.start)
        app.name = _name(tokens[2] if len(tokens) > 2 else None, "the application's name", tokens[1])
        if len(tokens) > 3:
            raise fail(f"syntax error: unexpected `{tokens[3].text}` after the application's name",
                       "end the statement with `;`", tokens[3].start)
    elif words == ["CREATE", "INPUT", "TABLE"]:
        table = _input_table(tokens)
        if table.name in app.inputs or any(t.name == table.name for t in app.tables):
            raise fail(f"table `{table.name}` is defined twice", "give each table its own name", table.offset)
        app.inputs[table.name] = table
    elif words[:2] == ["CREATE", "FUNCTION"]:
        function = _function(tokens)
        if function.name.lower() in {f.lower() for f in app.functions}:
            raise fail(f"function `{function.name}` is defined twice", "define it once", function.offset)
        app.functions[function.name] = function
    elif words[:2] == ["CREATE", "TABLE"]:
        table_def = _table(tokens, source)
        if table_def.name in app.inputs or any(t.name == table_def.name for t in app.tables):
            raise fail(f"table `{table_def.name}` is defined twice", "give each table its own name", table_def.offset)
        app.tables.append(table_def)
    else:
        raise fail(f"syntax error: a statement of a SQL app starts with CREATE, not `{first.text}`",
                   f"write one of: {STATEMENTS}", first.start)


def _expect(tokens: list[Token], i: int, word: str, fix: str) -> int:
    token = tokens[i] if i < len(tokens) else None
    if token is None or (_word(token) != word and token.text != word):
        where = token.start if token is not None else tokens[-1].end + 1
        found = f", found `{token.text}`" if token is not None else ""
        raise fail(f"syntax error: expected `{word}`{found}", fix, where)
    return i + 1


def _input_table(tokens: list[Token]) -> InputTable:
    form = "CREATE INPUT TABLE name(col, ...) FROM KAFKA('topic') TIME col"
    name_token = tokens[3] if len(tokens) > 3 else None
    name = _name(name_token, "the table's name", tokens[2])
    i = _expect(tokens, 4, "(", f"list the table's columns: {form}")
    columns: list[str] = []
    while True:
        token = tokens[i] if i < len(tokens) else None
        columns.append(_name(token, "a column name", tokens[i - 1]))
        if columns[-1] in columns[:-1]:
            raise fail(f"column `{columns[-1]}` is listed twice", "list each column once", tokens[i].start)
        i += 1
        nxt = tokens[i] if i < len(tokens) else None
        if nxt is not None and nxt.token_type == TokenType.COMMA:
            i += 1
            continue
        if nxt is not None and nxt.token_type == TokenType.R_PAREN:
            i += 1
            break
        where = nxt.start if nxt is not None else tokens[-1].end + 1
        raise fail("syntax error: expected `,` or `)` in the column list" + (f", found `{nxt.text}`" if nxt else ""),
                   "list column names only, separated by commas (values are JSON: columns have no declared type)",
                   where)
    i = _expect(tokens, i, "FROM", f"say where the rows come from: {form}")
    source_token = tokens[i] if i < len(tokens) else None
    if _word(source_token) not in ("KAFKA", "SCRIBE"):
        where = source_token.start if source_token is not None else tokens[-1].end + 1
        raise fail("syntax error: an input table is read FROM KAFKA('topic')" +
                   (f", not `{source_token.text}`" if source_token is not None else ""),
                   f"write {form}", where)
    i = _expect(tokens, i + 1, "(", "write the topic in parentheses: KAFKA('topic')")
    topic_token = tokens[i] if i < len(tokens) else None
    if topic_token is None or topic_token.token_type not in (TokenType.STRING, TokenType.IDENTIFIER):
        where = topic_token.start if topic_token is not None else tokens[-1].end + 1
        raise fail("syntax error: expected the topic's name as a string", "write KAFKA('topic')", where)
    i = _expect(tokens, i + 1, ")", "close KAFKA('topic') with `)`")
    found: dict[str, tuple[str, int]] = {}  # KEY / TIME -> (column, offset), in either order
    while i < len(tokens):
        clause = _word(tokens[i])
        if clause in found:
            raise fail(f"syntax error: {clause} is given twice", "give it once", tokens[i].start)
        if clause not in ("KEY", "TIME"):
            if found:
                raise fail(f"syntax error: unexpected `{tokens[i].text}`", "end the statement with `;`",
                           tokens[i].start)
            _expect(tokens, i, "TIME", "end the statement with `;`, or name its time column: TIME col (and its "
                    "key column: KEY col)")
        column_token = tokens[i + 1] if i + 1 < len(tokens) else None
        column = _name(column_token, f"the {'time' if clause == 'TIME' else 'key'} column", tokens[i])
        offset = tokens[i + 1].start
        if column not in columns:
            raise fail(f"the {clause.lower()} column `{column}` is not among the columns of `{name}` "
                       f"({', '.join(columns)})", f"add `{column}` to the column list, or name one of them after "
                       f"{clause}", offset)
        found[clause] = (column, offset)
        i += 2
    time, time_offset = found.get("TIME", (None, None))
    key, key_offset = found.get("KEY", (None, None))
    return InputTable(name, tokens[3].start, tuple(columns), topic_token.text, topic_token.start, time, time_offset,
                      key, key_offset)


def _function(tokens: list[Token]) -> FunctionDef:
    form = "CREATE FUNCTION name AS 'module:callable'"
    name = _name(tokens[2] if len(tokens) > 2 else None, "the function's name", tokens[1])
    i = _expect(tokens, 3, "AS", f"write {form}")
    path_token = tokens[i] if i < len(tokens) else None
    if path_token is None or path_token.token_type != TokenType.STRING or ":" not in path_token.text:
        where = path_token.start if path_token is not None else tokens[-1].end + 1
        raise fail("syntax error: expected the function's import path as a string 'module:callable'",
                   f"write {form}", where)
    if i + 1 < len(tokens):
        raise fail(f"syntax error: unexpected `{tokens[i + 1].text}`", "end the statement with `;`",
                   tokens[i + 1].start)
    return FunctionDef(name, path_token.text, tokens[2].start, path_token.start)


def _table(tokens: list[Token], source: SqlSource) -> TableDef:
    form = "CREATE TABLE name AS SELECT ... FROM table"
    name = _name(tokens[2] if len(tokens) > 2 else None, "the table's name", tokens[1])
    i = _expect(tokens, 3, "AS", f"write {form}")
    if i >= len(tokens):
        raise fail("syntax error: expected a SELECT after AS", f"write {form}", tokens[-1].end + 1)
    body = tokens[i:]
    windows, drop = _puma_window(body, source)
    start, end = body[0].start, body[-1].end + 1
    text = source.blanked((start, end), drop)
    try:
        parsed = sqlglot.parse_one(text)
    except ParseError as exc:
        raise _parse_error(exc, source, start) from exc
    while isinstance(parsed, exp.Subquery):
        parsed = parsed.this
    if not isinstance(parsed, exp.Select):
        raise fail(f"a table is defined by one SELECT, not a {type(parsed).__name__.upper()}",
                   f"write {form} (UNION and the like are not supported)", start)
    return TableDef(name, tokens[2].start, parsed, windows[0] if windows else None, tuple(windows))


def _puma_window(body: list[Token], source: SqlSource) -> tuple[list[PumaWindow], list[tuple[int, int]]]:
    """Find `[N unit]` right after the table (and its alias) in FROM, and after each JOINed table; return them
    and the spans to blank."""
    windows: list[PumaWindow] = []
    drop: list[tuple[int, int]] = []
    joined = any(_word(t) == "JOIN" for t in body)
    for i, token in enumerate(body):
        if token.token_type != TokenType.L_BRACKET:
            continue
        back = i - 1
        if back >= 0 and back - 1 >= 0 and _word(body[back - 1]) == "AS":
            back -= 2  # FROM t AS x [5 minutes]
        elif back >= 1 and _word(body[back - 1]) not in ("FROM", "JOIN"):
            back -= 1  # FROM t x [5 minutes]
        if back < 1 or _word(body[back - 1]) not in ("FROM", "JOIN"):
            continue  # not after a table: left to sqlglot (an array subscript, refused later)
        close = next((j for j in range(i + 1, len(body)) if body[j].token_type == TokenType.R_BRACKET), None)
        if close is None:
            raise fail("syntax error: `[` is never closed", "write the window as [5 minutes]", token.start)
        inside = source.text[token.end + 1:body[close].start]
        match = _WINDOW.match(inside)
        size = unit_ms(match.group(2)) if match else None
        step = unit_ms(match.group(4)) if match and match.group(4) else None
        if (match is None or size is None or int(match.group(1)) <= 0
                or (match.group(4) and (step is None or int(match.group(3)) <= 0))):
            raise fail(f"`[{inside.strip()}]` is not a window", "write a positive size and a unit, as in "
                       "[5 minutes], [30 seconds], [1 hour] or [500 milliseconds] (hopping: [10 seconds ADVANCE BY "
                       "5 seconds])", token.start)
        if windows and not joined:
            raise fail("a query has one window", "keep one `[N unit]`", token.start)
        slide = int(match.group(3)) * step if step is not None else None
        if slide is not None and slide > int(match.group(1)) * size:
            raise fail(f"`[{inside.strip()}]` advances by more than its size: rows between windows would belong "
                       "to none", "write [size ADVANCE BY slide] with slide <= size", token.start)
        windows.append(PumaWindow(int(match.group(1)) * size, token.start, slide, body[back].start))
        drop.append((token.start, body[close].end + 1))
    return windows, drop


def _parse_error(exc: ParseError, source: SqlSource, start: int) -> SqlError:
    first = exc.errors[0] if exc.errors else {}
    line, col = first.get("line"), first.get("col")
    highlight = first.get("highlight") or ""
    # sqlglot's column is the highlighted token's last character
    offset = source.offset(int(line), int(col)) - max(len(highlight) - 1, 0) if line and col else start
    description = str(first.get("description") or exc).split("\n")[0]
    fix = "fix the SELECT's syntax (docs/sql.md lists what a query may use)"
    missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>", description)
    if missing:  # sqlglot names its own class: say which clause lacks its body
        description = f"{missing.group(1).upper()} is incomplete"
        fix = f"complete the {missing.group(1).upper()} clause, or remove it"
    elif description.startswith("Expecting "):
        description = f"expected `{description.removeprefix('Expecting ').strip()}`"
        fix = f"add the missing `{description[10:-1]}`"
    elif description == "Invalid expression / Unexpected token":
        description = "unexpected token"
    near = f" at `{highlight}`" if highlight else ""
    return fail(f"syntax error{near}: {description}", fix, offset)
