"""GROUP BY without a window: a changelog table (stylus/sql/grouped.py, stylus/sql/changelog.py). Every input row
updates its group, and the group's new row is emitted when it changed, keyed by the group: through the test
driver against plain Python, and on the broker on both monoid state backends (local RocksDB; PostgreSQL, where a
second run continues from the groups the database holds). Plus what the planner refuses."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from stylus.config import PipelineError, load_pipeline
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.monoid.pg import default_table
from stylus.runtime.runner import PipelineRunner
from stylus.testing import TestDriver
from tests.sql.helpers import INPUT, events, write_app
from tests.support.kafka import read_raw
from tests.support.pg import fresh_database
from tests.support.threads import join_runner

QUERY = ("CREATE TABLE totals AS\n"
         "  SELECT category, COUNT(*) AS n, SUM(user_id) AS users, MAX(score) AS best, COUNT(DISTINCT event) AS kinds\n"
         "  FROM events_score WHERE score > 1\n"
         "  GROUP BY category;\n")
Row = dict[str, Any]


def changelog(rows: list[Row]) -> list[tuple[str, Row]]:
    """Plain Python: per input row kept, the group's row after it, when it changed; (key, row) in input order."""
    groups: dict[str, dict[str, Any]] = {}
    out = []
    for r in rows:
        if not r["score"] > 1:
            continue
        g = groups.setdefault(r["category"], {"n": 0, "users": 0, "best": None, "kinds": set()})
        before = (g["n"], g["users"], g["best"], len(g["kinds"]))
        g["n"] += 1
        g["users"] += r["user_id"]
        g["best"] = r["score"] if g["best"] is None or r["score"] > g["best"] else g["best"]
        g["kinds"].add(r["event"])
        after = (g["n"], g["users"], g["best"], len(g["kinds"]))
        if after != before:
            out.append((r["category"], {"category": r["category"], "n": after[0], "users": after[1],
                                        "best": after[2], "kinds": after[3]}))
    return out


def per_key(items: list[tuple[str | None, Row]]) -> dict[str | None, list[Row]]:
    out: dict[str | None, list[Row]] = {}
    for key, row in items:
        out.setdefault(key, []).append(row)
    return out


@pytest.mark.parametrize("partitions", [1, 3])
def test_each_row_updates_its_group_and_the_changed_row_is_emitted(partitions: int, tmp_path: Path) -> None:
    rows = events(500, seed=17)
    path = write_app(tmp_path, INPUT.format(events="events") + QUERY, topics={"events": partitions, "totals": 2})
    pipeline = load_pipeline(path)
    names = ["app"] if partitions == 1 else ["app.shuffle", "app"]  # rows of a group meet in one partition
    assert list(pipeline.processors) == names
    assert pipeline.processors["app"].class_ == "stylus.sql.changelog:SqlChangelogStage"
    with TestDriver(path) as driver:
        for row in rows:
            driver.send("events", row, partition=0)  # one input partition's order: the reference's
        got = [(r.key, r.value) for r in driver.outputs("totals")]
    expected = changelog(rows)
    assert len(expected) > 100 and per_key(got) == per_key(expected)


def test_group_by_alone_emits_each_group_once(tmp_path: Path) -> None:
    rows = events(300, seed=2)
    path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE pairs AS SELECT category, event "
                     "FROM events_score GROUP BY category, event;", topics={"events": 1, "pairs": 1})
    with TestDriver(path) as driver:
        for row in rows:
            driver.send("events", row)
        got = [(r.key, r.value) for r in driver.outputs("pairs")]
    firsts = list(dict.fromkeys((r["category"], r["event"]) for r in rows))
    assert got == [(json.dumps([c, e], separators=(",", ":")), {"category": c, "event": e}) for c, e in firsts]


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT category, COUNT(*) AS n FROM events_score GROUP BY category HAVING COUNT(*) > 2;",
     "HAVING on a GROUP BY without a window"),
    ("SELECT category, TUMBLE_START(event_time, INTERVAL '1' MINUTE) AS ws FROM events_score GROUP BY category;",
     "TUMBLE_START needs a windowed query; this GROUP BY has no window"),
    ("SELECT COUNT(*) AS n FROM events_score;", "an aggregate needs a window"),
])
def test_what_a_changelog_table_refuses(sql: str, message: str, tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE out AS " + sql,
                     topics={"events": 1, "out": 1})
    with pytest.raises(PipelineError, match=message):
        load_pipeline(path)


def test_a_changelog_table_needs_state(tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + QUERY, topics={"events": 1, "totals": 1},
                     processor={"semantics": {"output": "at_least_once"}, "state": {}})
    with pytest.raises(PipelineError, match="groups without a window: its groups' aggregates are state"):
        load_pipeline(path)


# ---------------------------------------------------------------------------------------------- on the broker
@pytest.fixture(params=["rocksdb", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "rocksdb":
        yield {}
        return
    with fresh_database() as dsn:
        yield {"backend": "postgres", "dsn": dsn}


def run_app(path: Path, bootstrap: str) -> None:
    pipeline = load_pipeline(path)
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.5)
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
    thread.start()
    join_runner(runner, thread, timeout=180)


def produce_rows(bootstrap: str, topic: str, rows: list[Row]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, row in enumerate(rows):
        producer.produce(topic, json.dumps(row).encode(), partition=i % 2)
    assert producer.flush(30) == 0


def test_a_changelog_table_runs_on_either_monoid_backend_and_resumes(backend: dict[str, Any], bootstrap: str,
                                                                     tmp_path: Path) -> None:
    """Two input partitions (a shuffle by group first), two runs: the second continues each group from the state
    the first left (RocksDB; or the PostgreSQL table, read back once per group), and each group's last row is
    plain Python's over all the rows. On PostgreSQL the table holds every group's accumulators."""
    suffix = uuid.uuid4().hex[:6]
    source, table = f"events-{suffix}", f"totals_{suffix}"
    sql = INPUT.format(events=source) + QUERY.replace("TABLE totals", f"TABLE {table}")
    path = write_app(tmp_path, sql, topics={source: 2, table: 2}, pipeline=f"sql-changelog-{suffix}",
                     processor={"state": {"dir": str(tmp_path / "state"), **backend},
                                "checkpoint": {"interval": "300ms"}})
    pipeline = load_pipeline(path)
    assert pipeline.processors["app"].state.backend == (backend.get("backend") or "rocksdb")
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        rows = events(400, seed=23)
        for part in (rows[:250], rows[250:]):
            produce_rows(bootstrap, source, part)
            run_app(path, bootstrap)
        written = [(m.key().decode(), json.loads(m.value())) for m in read_raw(bootstrap, table)]
        last = {key: got[-1] for key, got in per_key(written).items()}
        expected = {key: want[-1] for key, want in per_key(changelog(rows)).items()}
        assert last == expected
        for got in per_key(written).values():  # rows of a group only grow (at least once: repeats allowed)
            assert [r["n"] for r in got] == sorted(r["n"] for r in got)
        if backend:
            with psycopg.connect(backend["dsn"]) as conn:
                stored = dict(conn.execute(f'SELECT key, value FROM "{default_table(pipeline.pipeline, "app")}"')
                              .fetchall())
            assert {key: value[0] for key, value in stored.items()} == {
                "=" + c: row["n"] for c, row in expected.items()}
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))
