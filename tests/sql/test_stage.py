"""SQL apps run through the public test driver (the production engine, no broker): every table's rows equal a
plain-Python computation over the same input. One parametrized test per kind of query, then what the core
gives every processor (late data, dead letters, crashes) shown on SQL stages."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stylus.config import load_pipeline
from stylus.testing import TestDriver
from tests.sql.helpers import (
    BASE,
    FAR,
    INPUT,
    MINUTE,
    canonical,
    events,
    grouped,
    hopping,
    ms,
    top_events,
    tumbling,
    write_app,
)
from tests.sql.udfs import bucket

ROOT = Path(__file__).resolve().parents[2]
Rows = list[dict[str, Any]]


def per_window(size: int) -> Callable[[Callable[[int, Rows], Rows]], Callable[[Rows], Rows]]:
    """A reference over tumbling windows: `body(start, rows of the window)` gives that window's rows."""
    def wrap(body: Callable[[int, Rows], Rows]) -> Callable[[Rows], Rows]:
        return lambda rows: [out for start, in_window in tumbling(rows, size).items() for out in body(start, in_window)]
    return wrap


def bounds(start: int, size: int) -> dict[str, int]:
    return {"window_start": start, "window_end": start + size}


@per_window(MINUTE)
def tumble_reference(start: int, rows: Rows) -> Rows:
    return [{"category": c, "n": len(rs), "total": sum_in_order(r["score"] for r in rs),
             "lo": min(r["score"] for r in rs), "hi": max(r["score"] for r in rs), "ws": start, "we": start + MINUTE,
             **bounds(start, MINUTE)} for c, rs in grouped(rows, lambda r: r["category"]).items()]


def sum_in_order(values: Any) -> float:
    total = 0
    for v in values:  # the order rows arrive in: the same float rounding as the stream's running sum
        total += v
    return total


def hop_reference(rows: Rows) -> Rows:
    size, slide = 2 * MINUTE, 30_000
    tech = [r for r in rows if r["category"] == "tech"]
    return [{"event": e, "n": len(rs), "we": start + size, **bounds(start, size)}
            for start, in_window in hopping(tech, size, slide).items()
            for e, rs in grouped(in_window, lambda r: r["event"]).items()]


def projection_reference(rows: Rows) -> Rows:
    return [{"cat": r["category"].upper(), "e": r["event"] + "!", "level": "high" if r["score"] >= 5 else "low",
             "s10": int(r["score"] * 10), "initial": r["event"][:1], "len": len(r["category"]),
             "trimmed": r["category"].lower(), "shard": r["user_id"] % 5, "half": r["score"] / 2,
             "event_time": r["event_time"]}
            for r in rows if r["score"] > 2 and r["category"] != "music" and "1" in r["event"]]


@per_window(MINUTE)
def having_reference(start: int, rows: Rows) -> Rows:
    return [{"category": c, "n": len(rs), **bounds(start, MINUTE)}
            for c, rs in grouped(rows, lambda r: r["category"]).items() if len(rs) >= 8]


@per_window(2 * MINUTE)
def distinct_reference(start: int, rows: Rows) -> Rows:
    return [{"category": c, "events": len({r["event"] for r in rs}), "users": len({r["user_id"] for r in rs}),
             **bounds(start, 2 * MINUTE)} for c, rs in grouped(rows, lambda r: r["category"]).items()]


@per_window(5 * MINUTE)
def avg_reference(start: int, rows: Rows) -> Rows:
    return [{"category": c, "mean": sum_in_order(r["score"] for r in rs) / len(rs), "n": len(rs),
             **bounds(start, 5 * MINUTE)} for c, rs in grouped(rows, lambda r: r["category"]).items()]


@per_window(5 * MINUTE)
def udf_reference(start: int, rows: Rows) -> Rows:
    return [{"band": b, "spread": round(max(r["score"] for r in rs) - min(r["score"] for r in rs), 6), "n": len(rs),
             **bounds(start, 5 * MINUTE)} for b, rs in grouped(rows, lambda r: bucket(r["score"])).items()]


def multi_stage_reference(rows: Rows) -> Rows:
    hot = [{**r, "doubled": r["score"] * 2} for r in rows if r["score"] > 3]
    return [{"category": c, "n": len(rs), "total": sum_in_order(r["doubled"] for r in rs), **bounds(start, MINUTE)}
            for start, in_window in tumbling(hot, MINUTE).items()
            for c, rs in grouped(in_window, lambda r: r["category"]).items()]


def nested_reference(rows: Rows) -> Rows:
    per_minute = {(start, c): len(rs) for start, in_window in tumbling(rows, MINUTE).items()
                  for c, rs in grouped(in_window, lambda r: r["category"]).items()}
    out: dict[tuple[int, str], list[int]] = {}
    for (start, c), n in per_minute.items():
        out.setdefault((start - start % (5 * MINUTE), c), []).append(n)
    return [{"category": c, "n": sum(ns), "busiest": max(ns), **bounds(start, 5 * MINUTE)}
            for (start, c), ns in out.items()]


@dataclass(frozen=True)
class Case:
    id: str
    sql: str  # after the INPUT statement; the output table is `out`
    reference: Callable[[Rows], Rows]
    partitions: int = 1  # of the input topic: more than one shuffles a windowed table's rows by group
    topics: tuple[str, ...] = ()  # intermediate tables


CASES = [
    Case("figure2", "CREATE TABLE out AS SELECT category, event, topk(score) AS score FROM events_score [5 minutes];",
         top_events),
    Case("figure2-3-partitions", "CREATE TABLE out AS SELECT category, event, topk(score, 3) AS score "
         "FROM events_score [5 minutes];", lambda rows: top_events(rows, k=3), partitions=3),
    Case("tumble", """CREATE TABLE out AS
           SELECT category, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS lo, MAX(score) AS hi,
                  TUMBLE_START(event_time, INTERVAL '1' MINUTE) AS ws, TUMBLE_END(event_time, INTERVAL '1' MINUTE) AS we
           FROM events_score GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE);""", tumble_reference),
    Case("hop", """CREATE TABLE out AS
           SELECT event, COUNT(*) AS n, HOP_END(event_time, INTERVAL '30' SECOND, INTERVAL '2' MINUTE) AS we
           FROM events_score WHERE category = 'tech'
           GROUP BY event, HOP(event_time, INTERVAL '30' SECOND, INTERVAL '2' MINUTE);""", hop_reference,
         partitions=2),
    Case("projection", """CREATE TABLE out AS
           SELECT UPPER(category) AS cat, event || '!' AS e, CASE WHEN score >= 5 THEN 'high' ELSE 'low' END AS level,
                  CAST(score * 10 AS BIGINT) AS s10, SUBSTRING(event, 1, 1) AS initial, LENGTH(category) AS len,
                  TRIM(CONCAT('  ', LOWER(category), '  ')) AS trimmed, user_id % 5 AS shard, score / 2 AS half,
                  event_time
           FROM events_score WHERE score > 2 AND category <> 'music' AND event LIKE '%1%';""",
         projection_reference, partitions=2),
    Case("having", """CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score
           GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE) HAVING COUNT(*) >= 8;""", having_reference),
    Case("having-alias", """CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score
           GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE) HAVING n >= 8;""", having_reference),
    Case("count-distinct", """CREATE TABLE out AS
           SELECT category, COUNT(DISTINCT event) AS events, COUNT(DISTINCT user_id) AS users
           FROM events_score [2 minutes];""", distinct_reference),
    Case("avg", """CREATE TABLE out AS SELECT category, AVG(score) AS mean, COUNT(user_id) AS n FROM events_score
           GROUP BY category, TUMBLE(event_time, INTERVAL '5' MINUTE);""", avg_reference),
    Case("udf", """CREATE FUNCTION bucket AS 'tests.sql.udfs:bucket';
           CREATE FUNCTION spread AS 'tests.sql.udfs:Spread';
           CREATE TABLE out AS SELECT bucket(score) AS band, spread(score) AS spread, COUNT(*) AS n
           FROM events_score GROUP BY bucket(score), TUMBLE(event_time, INTERVAL '5' MINUTE);""", udf_reference),
    Case("multi-stage", """CREATE TABLE hot AS
           SELECT event_time, category, event, score * 2 AS doubled FROM events_score WHERE score > 3;
           CREATE TABLE out AS SELECT category, COUNT(*) AS n, SUM(doubled) AS total FROM hot [1 minute];""",
         multi_stage_reference, topics=("hot",)),
    Case("nested-windows", """CREATE TABLE per_minute AS SELECT category, COUNT(*) AS n FROM events_score
           GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE);
           CREATE TABLE out AS SELECT category, SUM(n) AS n, MAX(n) AS busiest FROM per_minute
           GROUP BY category, TUMBLE(window_end, INTERVAL '5' MINUTE);""", nested_reference, partitions=2,
         topics=("per_minute",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_table_holds_what_plain_python_computes(case: Case, tmp_path: Path) -> None:
    rows = events()
    path = write_app(tmp_path, INPUT.format(events="events") + case.sql,
                     topics={"events": case.partitions, "out": 2, **dict.fromkeys(case.topics, 2)})
    with TestDriver(path) as driver:
        for row in rows:
            driver.send("events", row)
        driver.advance_watermark(FAR)
        got = [r.value for r in driver.outputs("out")]
    expected = case.reference(rows)
    assert expected and len(got) == len(expected)
    assert canonical(got) == canonical(expected)


def test_the_shipped_figure2_app_closes_windows_by_the_watermark() -> None:
    """`pipelines/top_events.yaml` on its sample input, watermarks as in production: a window is emitted once the
    largest event time less `allowed_lateness` (30 s) passes its end, and holds the top events of its rows."""
    rows = [json.loads(line) for line in (ROOT / "pipelines" / "apps" / "top_events.jsonl").read_text().splitlines()]
    with TestDriver(ROOT / "pipelines" / "top_events.yaml", watermarks="auto") as driver:
        for row in rows:
            driver.send("events_stream", row)
        got = [r.value for r in driver.outputs("top_events_5min")]
        keys = {r.key for r in driver.outputs("top_events_5min")}
    watermark = max(ms(r["event_time"]) for r in rows) - 30_000
    expected = [r for r in top_events(rows) if r["window_end"] <= watermark]
    assert len({r["window_start"] for r in expected}) >= 3
    assert canonical(got) == canonical(expected)
    assert keys == {r["category"] for r in expected}  # keyed by the group


def test_the_sql_processor_is_one_windowed_processor_on_the_core() -> None:
    pipeline = load_pipeline(ROOT / "pipelines" / "top_events.yaml")
    assert list(pipeline.processors) == ["top_events"]
    spec = pipeline.processors["top_events"]
    assert spec.class_ == "stylus.sql.stage:SqlWindowStage" and spec.sql is None
    assert (spec.inputs, spec.outputs) == (("events_stream",), ("top_events_5min",))
    assert spec.event_time is not None and spec.event_time.field == "event_time"
    assert spec.event_time.allowed_lateness == 30.0
    assert pipeline.group_id("top_events") == "top-events.top_events"


LATE_APP = INPUT.format(events="events") + ("CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score "
                                            "[1 minute];")


def test_late_rows_follow_the_processors_late_policy(tmp_path: Path) -> None:
    """`event_time.late: topic`: a row whose every window has closed goes to `<pipeline>.<processor>.late`; one
    behind the watermark whose window is still open is counted (the window machinery's `is_late`)."""
    path = write_app(tmp_path, LATE_APP, topics={"events": 1, "out": 1},
                     processor={"event_time": {"allowed_lateness": "10s", "late": "topic"}})
    with TestDriver(path) as driver:
        driver.send("events", {"event_time": BASE + 1_000, "category": "a", "event": "x", "score": 1, "user_id": 1})
        driver.advance_watermark(BASE + MINUTE)  # closes [BASE, BASE + 1m)
        driver.send("events", {"event_time": BASE + 2_000, "category": "a", "event": "x", "score": 1, "user_id": 1})
        driver.send("events", {"event_time": BASE + MINUTE + 1, "category": "a", "event": "x", "score": 1,
                               "user_id": 1})
        driver.advance_watermark(BASE + 2 * MINUTE)
        out = [r.value for r in driver.outputs("out")]
        late = driver.outputs("sqltest.app.late")
    assert out == [{"category": "a", "n": 1, "window_start": BASE, "window_end": BASE + MINUTE},
                   {"category": "a", "n": 1, "window_start": BASE + MINUTE, "window_end": BASE + 2 * MINUTE}]
    assert [r.value["event_time"] for r in late] == [BASE + 2_000]


def test_late_update_re_emits_the_corrected_row(tmp_path: Path) -> None:
    path = write_app(tmp_path, LATE_APP, topics={"events": 1, "out": 1},
                     processor={"event_time": {"late": "update"}})
    with TestDriver(path) as driver:
        row = {"event_time": BASE + 1_000, "category": "a", "event": "x", "score": 1, "user_id": 1}
        driver.send("events", row)
        driver.advance_watermark(BASE + MINUTE)
        driver.send("events", row)  # late; the window is retained one window long
        out = [r.value["n"] for r in driver.outputs("out")]
    assert out == [1, 2]


def test_a_row_that_is_not_an_object_is_a_dead_letter(tmp_path: Path) -> None:
    path = write_app(tmp_path, LATE_APP, topics={"events": 1, "out": 1})
    with TestDriver(path) as driver:
        driver.send("events", [1, 2, 3])
        driver.send("events", {"event_time": BASE, "category": "a", "event": "x", "score": 1, "user_id": 1})
        driver.advance_watermark(FAR)
        dead = driver.outputs("sqltest.app.dlq")
        out = driver.outputs("out")
    assert [d.value for d in dead] == [[1, 2, 3]]
    assert b"not a JSON object" in dead[0].headers["stylus.error"]
    assert [r.value["n"] for r in out] == [1]


def test_the_driver_runs_every_processor_of_an_app_by_its_yaml_name(tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + CASES[0].sql, topics={"events": 2, "out": 1})
    rows = events(100)
    with TestDriver(path, processors="app") as driver:
        assert sorted(driver.stages) == ["app", "app.shuffle"]
        for row in rows:
            driver.send("events", row)
        driver.advance_watermark(FAR)
        assert canonical(r.value for r in driver.outputs("out")) == canonical(top_events(rows))


def test_a_crash_replays_from_the_last_checkpoint_into_the_same_rows(tmp_path: Path) -> None:
    """Exactly-once state: the windows' accumulators restart from the checkpoint, the replayed rows are
    counted once, and the closed windows equal the reference."""
    rows = events(200, seed=9)
    path = write_app(tmp_path, INPUT.format(events="events") + CASES[2].sql, topics={"events": 2, "out": 1})
    with TestDriver(path) as driver:
        for row in rows[:120]:
            driver.send("events", row)
        driver.checkpoint()
        for row in rows[120:]:
            driver.send("events", row)
        driver.crash()
        driver.advance_watermark(FAR)
        got = [r.value for r in driver.outputs("out")]
    assert canonical(got) == canonical(tumble_reference(rows))
