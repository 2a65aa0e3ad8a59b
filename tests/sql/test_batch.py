"""SQL apps compiled to batch processors (`batch: always`, stylus/sql/batch.py) and per record (`batch: never`) give
the same tables, the same dead letters and the same open windows' state on the same input, fed in large consumed
batches (`TestDriver.send_many`): on clean rows (the columnar path) and on rows whose values do not fit columns
(mixed ints and floats, strings where numbers are compared, non-objects, missing fields: those batches run row by
row, and failing rows are bisected to the dead-letter topic). Also the Nexmark apps on generated bids, and what
`batch:` in the YAML accepts and refuses."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from stylus.config import PipelineError, load_pipeline
from stylus.nexmark import GeneratorConfig, generate
from stylus.sql.batching import BATCH_STAGE, BATCH_WINDOW_STAGE
from stylus.testing import TestDriver
from tests.sql.helpers import FAR, INPUT, events, write_app

ROOT = Path(__file__).resolve().parents[2]
MODES = ("never", "always")

#: app id -> (SQL after the input table, input partitions); the output table is `out`
APPS: dict[str, tuple[str, int]] = {
    "select-star": ("CREATE TABLE out AS SELECT * FROM events_score;", 1),
    "projection": ("""CREATE TABLE out AS
        SELECT event, 0.908 * score AS s, user_id % 5 AS shard, score / user_id AS ratio, -score AS neg,
               ABS(user_id - 12) AS distance, score > 5 AS high, category IN ('tech', 'music') AS picked,
               user_id BETWEEN 3 AND 9 AS middle, event IS NULL AS missing, NULL AS nothing, 'x' AS tag,
               user_id * 2 + 1 AS odd, user_id AS key, category AS "offset"
        FROM events_score
        WHERE (score > 2 AND category <> 'music') OR NOT user_id < 20;""", 2),
    "selection": ("CREATE TABLE out AS SELECT event, user_id FROM events_score WHERE MOD(user_id, 7) = 0;", 2),
    "tumble": ("""CREATE TABLE out AS
        SELECT category, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS lo, MAX(event) AS last_event,
               AVG(score) AS mean, COUNT(event) AS events, SUM(user_id) AS users
        FROM events_score WHERE score > 1
        GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE);""", 1),
    "hop-two-groups": ("""CREATE TABLE out AS
        SELECT category, user_id % 3 AS bucket, COUNT(*) AS n, MAX(score) AS best
        FROM events_score
        GROUP BY category, user_id % 3, HOP(event_time, INTERVAL '30' SECOND, INTERVAL '2' MINUTE)
        HAVING COUNT(*) > 1;""", 1),
    "group-only": ("""CREATE TABLE out AS SELECT category, event FROM events_score
        GROUP BY category, event, TUMBLE(event_time, INTERVAL '2' MINUTE);""", 1),
    "qualify-on-count": ("""CREATE TABLE out AS
        SELECT category, COUNT(*) AS n FROM events_score
        GROUP BY category, HOP(event_time, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)
        QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY n DESC) = 1;""", 3),
    "qualify-rank-1": ("""CREATE TABLE out AS
        SELECT category, event, score FROM events_score
        GROUP BY category, event, score, TUMBLE(event_time, INTERVAL '1' MINUTE)
        QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY score DESC) = 1;""", 3),
    "qualify-dense-per-category": ("""CREATE TABLE out AS
        SELECT category, event, user_id FROM events_score
        GROUP BY category, event, user_id, TUMBLE(event_time, INTERVAL '1' MINUTE)
        QUALIFY DENSE_RANK() OVER (PARTITION BY window_start, category ORDER BY user_id ASC) <= 2;""", 1),
}


def messy(rows: list[dict[str, Any]], seed: int = 5) -> list[Any]:
    """The rows with some values that do not fit a column: integral scores as ints among floats, a score as text
    (a comparison with a number fails the row), a missing field, a value that is not an object, a huge integer."""
    rng = random.Random(seed)
    out: list[Any] = []
    for i, row in enumerate(rows):
        row = dict(row)
        if i % 11 == 0:
            row["score"] = int(row["score"])
        if i % 97 == 5:
            row["score"] = "high"
        if i % 53 == 7:
            del row["event"]
        if i % 89 == 3:
            row["user_id"] = 2**64 - 1  # an int to orjson, past int64 to Arrow; sent as JSON text (orjson refuses it)
            out.append(json.dumps(row).encode())
            continue
        out.append(row)
        if rng.random() < 0.01:
            out.append([1, 2, 3])
    return out


Item = tuple[str | None, bytes, int]


def run(tmp_path: Path, sql: str, partitions: int, mode: str, chunks: list[list[Any]]) -> dict[str, Any]:
    directory = tmp_path / mode
    directory.mkdir()
    path = write_app(directory, INPUT.format(events="events") + sql, topics={"events": partitions, "out": 2},
                     processor={"batch": mode})
    pipeline = load_pipeline(path)
    classes = {spec.class_ for spec in pipeline.processors.values()}
    assert (classes & {BATCH_STAGE, BATCH_WINDOW_STAGE}) if mode == "always" else not (
        classes & {BATCH_STAGE, BATCH_WINDOW_STAGE})
    with TestDriver(pipeline) as driver:
        for chunk in chunks:
            driver.send_many("events", chunk)
        state = {(name, p): driver.state(name, p) for name in driver.stages for p in range(partitions)}
        ran = Counter({way: getattr(driver.processor(name), way) for name in driver.stages
                       for way in ("columnar", "row_by_row") if hasattr(driver.processor(name), way)})
        driver.advance_watermark(FAR)
        return {"out": Counter(_item(r) for r in driver.outputs("out")),
                "dead": Counter((name, orjson.dumps(r.value)) for name in driver.stages
                                for r in driver.outputs(f"sqltest.{name}.dlq")),
                "state": state, "ran": ran}


def _item(record: Any) -> Item:
    return record.key, orjson.dumps(record.value), record.timestamp


@pytest.mark.parametrize("data", ["clean", "messy"])
@pytest.mark.parametrize("app", sorted(APPS))
def test_batch_and_per_record_compilations_give_the_same_tables(app: str, data: str, tmp_path: Path) -> None:
    sql, partitions = APPS[app]
    rows: list[Any] = events(900, seed=13)
    if data == "messy":
        rows = messy(rows)
    chunks = [rows[:400], rows[400:420], rows[420:]]  # two big consumed batches and a small one
    per_record, batch = (run(tmp_path, sql, partitions, mode, chunks) for mode in MODES)
    assert sum(per_record["out"].values()) > 5
    assert batch["out"] == per_record["out"], (list((batch["out"] - per_record["out"]).items())[:3],
                                               list((per_record["out"] - batch["out"]).items())[:3])
    assert batch["dead"] == per_record["dead"]
    assert (sum(per_record["dead"].values()) > 0) == (data == "messy")
    assert batch["state"] == per_record["state"]
    # the columns were used on clean rows (but for `SELECT *`: the rows' times mix ms and ISO text), the row path
    # on messy ones (but behind a shuffle, which dead-letters the non-objects itself: the counted column fits)
    if data == "clean":
        assert (batch["ran"]["row_by_row"] > 0, batch["ran"]["columnar"] > 0) == (
            (True, False) if app == "select-star" else (False, True)), batch["ran"]
    else:
        assert (batch["ran"]["row_by_row"] > 0) == (app != "qualify-on-count"), batch["ran"]


def nexmark_pipeline(tmp_path: Path, mode: str, queries: list[str]) -> Path:
    doc = yaml.safe_load((ROOT / "pipelines" / "nexmark" / "sql.yaml").read_text())
    doc["processors"] = {q: {**doc["processors"][q], "sql": str(ROOT / "pipelines" / "nexmark" / f"{q}.sql"),
                             "batch": mode} for q in queries}
    for spec in doc["processors"].values():
        if "state" in spec:
            spec["state"] = {"dir": str(tmp_path / mode)}
    path = tmp_path / f"nexmark-{mode}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q5", "q7"])
def test_the_nexmark_apps_give_the_same_rows_either_way(query: str, tmp_path: Path) -> None:
    bids = [e.value for e in generate(6000, GeneratorConfig(seed=4, rate=100)) if e.kind == "bid"]
    table = f"nexmark_{query}"
    got = {}
    for mode in MODES:
        with TestDriver(nexmark_pipeline(tmp_path, mode, [query])) as driver:
            for start in range(0, len(bids), 1500):
                chunk = bids[start:start + 1500]
                driver.send_many("nexmark-bid", chunk, keys=[str(b["auction"]) for b in chunk])
            driver.advance_watermark(FAR)
            got[mode] = Counter(_item(r) for r in driver.outputs(table))
    assert sum(got["never"].values()) > 3
    assert got["always"] == got["never"]


def test_batch_always_refuses_a_table_without_a_batch_form(tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE out AS SELECT UPPER(event) AS e "
                     "FROM events_score;", topics={"events": 1, "out": 1}, processor={"batch": "always"})
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert "processors.app.batch" in text and "the function UPPER has no columnar form" in text
    assert "batch: never" in text


def test_batch_applies_to_sql_processors_only(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "pipeline": "p", "topics": {"a": {"partitions": 1}, "b": {"partitions": 1}},
        "processors": {"x": {"class": "processors.wordcount:Splitter", "inputs": ["a"], "outputs": ["b"],
                             "batch": "always"}}}))
    with pytest.raises(PipelineError, match="no `sql:` one"):
        load_pipeline(tmp_path / "p.yaml")


def test_auto_takes_the_batch_path_where_it_was_measured_faster(tmp_path: Path) -> None:
    """Windowed tables and projections of every row on the batch path; projections with WHERE per record."""
    if os.environ.get("STYLUS_TEST_SQL_BATCH") == "1":
        pytest.skip("STYLUS_TEST_SQL_BATCH=1 makes `auto` take the batch path everywhere")
    pipeline = load_pipeline(ROOT / "pipelines" / "nexmark" / "sql.yaml")
    classes = {name: pipeline.processors[name].class_ for name in ("q0", "q1", "q2", "q5.partial", "q5",
                                                                    "q7.partial", "q7")}
    assert classes == {"q0": BATCH_STAGE, "q1": BATCH_STAGE, "q2": "stylus.sql.stage:SqlStage",
                       "q5.partial": BATCH_WINDOW_STAGE, "q5": "stylus.sql.final:SqlRankStage",
                       "q7.partial": BATCH_WINDOW_STAGE, "q7": "stylus.sql.final:SqlRankStage"}
    assert all(spec.batch == "auto" for spec in pipeline.processors.values())  # the stages carry the default
    ranked = load_pipeline(ROOT / "pipelines" / "top_events.yaml").processors["top_events"]
    assert ranked.class_ == "stylus.sql.stage:SqlWindowStage"  # Puma's ranking topk has no batch form
