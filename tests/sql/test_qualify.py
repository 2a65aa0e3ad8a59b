"""QUALIFY RANK()/DENSE_RANK() on windowed tables, and `KEY col` on input tables, through the public test driver:
the rows equal a plain-Python ranking of each window (every tie kept), on one input partition (the window
stage ranks and writes the table) and on three (it ranks per partition, `<name>.partial`, and `SqlRankStage`
merges); the merge of per-partition top rows equals the ranking of all of them."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stylus.config import PipelineError, load_pipeline
from stylus.sql.ranking import TiedTop, comparator
from stylus.testing import TestDriver
from tests.sql.helpers import BASE, FAR, INPUT, MINUTE, canonical, grouped, hopping, tumbling, write_app

Rows = list[dict[str, Any]]


def scored_rows(n: int = 600, seed: int = 7) -> Rows:
    """Rows of `events_score` over ~10 minutes with small integer scores, so ranks tie often."""
    rng = random.Random(seed)
    t = BASE
    rows = []
    for _ in range(n):
        t += rng.randint(0, 2000)
        category = rng.choice(["music", "sports", "tech"])
        rows.append({"event_time": t, "event": f"{category[0]}{rng.randint(0, 7)}", "category": category,
                     "score": rng.randint(0, 5), "user_id": rng.randint(1, 9)})
    return rows


def top(items: list[Any], key: Callable[[Any], Any], limit: int, dense: bool = False) -> list[Any]:
    """The items of RANK() (DENSE_RANK()) <= limit by `key` ascending: every tie kept."""
    ordered = sorted(items, key=key)
    kept: list[Any] = []
    rank = 0
    for i, item in enumerate(ordered):
        if i == 0 or key(item) != key(ordered[i - 1]):
            rank = rank + 1 if dense else i + 1
        if rank > limit:
            break
        kept.append(item)
    return kept


def bounded_reference(rows: Rows) -> Rows:
    """Per minute, the distinct (category, event, score) groups whose score ranks in the top 3."""
    out = []
    for start, in_window in tumbling(rows, MINUTE).items():
        groups = {(r["category"], r["event"], r["score"]) for r in in_window}
        for c, e, s in top(sorted(groups), lambda g: -g[2], 3):
            out.append({"category": c, "event": e, "score": s, "ws": start, "window_start": start,
                        "window_end": start + MINUTE})
    return out


def aggregate_reference(rows: Rows) -> Rows:
    """Per minute and category, the events whose row count is among the 2 highest counts (DENSE_RANK)."""
    out = []
    for start, in_window in tumbling(rows, MINUTE).items():
        for category, of_category in grouped(in_window, lambda r: r["category"]).items():
            counts = {e: len(rs) for e, rs in grouped(of_category, lambda r: r["event"]).items()}
            for event, n in top(sorted(counts.items()), lambda kv: -kv[1], 2, dense=True):
                out.append({"category": category, "event": event, "n": n, "window_start": start,
                            "window_end": start + MINUTE})
    return out


def having_reference(rows: Rows) -> Rows:
    """Per 2-minute window every minute, among the categories with more than 2 rows, the one(s) with the highest
    score, then the lowest."""
    out = []
    for start, in_window in hopping(rows, 2 * MINUTE, MINUTE).items():
        stats = [(c, max(r["score"] for r in rs), min(r["score"] for r in rs))
                 for c, rs in grouped(in_window, lambda r: r["category"]).items() if len(rs) > 2]
        for c, hi, lo in top(stats, lambda s: (-s[1], s[2]), 1):
            out.append({"category": c, "hi": hi, "lo": lo, "window_start": start, "window_end": start + 2 * MINUTE})
    return out


@dataclass(frozen=True)
class Case:
    id: str
    query: str
    reference: Callable[[Rows], Rows]
    shuffles: bool  # on several partitions: whether groups must be shuffled first (not a bounded ranking)


CASES = [
    Case("bounded-rank", "SELECT category, event, score, TUMBLE_START(event_time, INTERVAL '1' MINUTE) AS ws\n"
         "FROM events_score GROUP BY category, event, score, TUMBLE(event_time, INTERVAL '1' MINUTE)\n"
         "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY score DESC) <= 3;", bounded_reference, False),
    Case("aggregate-dense-rank", "SELECT category, event, COUNT(*) AS n FROM events_score\n"
         "GROUP BY category, event, TUMBLE(event_time, INTERVAL '1' MINUTE)\n"
         "QUALIFY DENSE_RANK() OVER (PARTITION BY window_end, category ORDER BY n DESC) < 3;",
         aggregate_reference, True),
    Case("hop-having-two-keys", "SELECT category, MAX(score) AS hi, MIN(score) AS lo,\n"
         "  HOP_START(event_time, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE) AS window_start FROM events_score\n"
         "GROUP BY category, HOP(event_time, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE) HAVING COUNT(*) > 2\n"
         "QUALIFY (RANK() OVER (PARTITION BY window_start ORDER BY hi DESC, lo ASC) = 1);", having_reference, True),
]


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_qualify_keeps_the_rows_of_each_window_up_to_the_rank_ties_included(case: Case, partitions: int,
                                                                            tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE out AS\n" + case.query + "\n",
                     topics={"events": partitions, "out": 1})
    rows = scored_rows()
    with TestDriver(path, processors=["app"]) as driver:
        expected_stages = {"app"} if partitions == 1 else {"app", "app.partial"} | (
            {"app.shuffle"} if case.shuffles else set())
        assert set(driver.stages) == expected_stages
        for i, row in enumerate(rows):
            driver.send("events", row, partition=i % partitions)
        driver.send("events", {**rows[0], "event_time": FAR}, partition=0)
        driver.advance_watermark(FAR)
        got = [r.value for r in driver.outputs("out")]
        assert all(r.timestamp == r.value["window_end"] - 1 for r in driver.outputs("out"))
    expected = case.reference(rows)
    assert len(expected) > 20
    assert canonical(got) == canonical(expected)


def test_nulls_rank_last_when_descending_unless_asked_first(tmp_path: Path) -> None:
    query = ("SELECT event, score FROM events_score GROUP BY event, score, TUMBLE(event_time, INTERVAL '1' MINUTE)\n"
             "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY score DESC{nulls}) = 1;\n")
    rows = [{"event_time": BASE + i, "event": e, "category": "c", "score": s, "user_id": 1}
            for i, (e, s) in enumerate([("a", None), ("b", 4), ("c", 4), ("d", 2), ("e", None)])]
    for nulls, winners in (("", {("b", 4), ("c", 4)}), (" NULLS FIRST", {("a", None), ("e", None)})):
        path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE out AS\n" + query.format(nulls=nulls),
                         topics={"events": 1, "out": 1})
        with TestDriver(path, processors=["app"]) as driver:
            for row in rows:
                driver.send("events", row)
            driver.advance_watermark(BASE + MINUTE)
            assert {(r.value["event"], r.value["score"]) for r in driver.outputs("out")} == winners


def test_key_column_spares_the_shuffle_when_the_table_groups_by_it(tmp_path: Path) -> None:
    keyed = INPUT.format(events="events").replace("TIME event_time", "KEY category TIME event_time")
    per_category = ("CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score\n"
                    "GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE);\n")
    path = write_app(tmp_path, keyed + per_category, topics={"events": 3, "out": 1})
    rows = scored_rows(300)
    with TestDriver(path, processors=["app"]) as driver:
        assert list(driver.stages) == ["app"]  # rows are keyed by category: each category is in one partition
        for row in rows:
            driver.send("events", row, key=row["category"])
        driver.advance_watermark(FAR)
        got = [r.value for r in driver.outputs("out")]
    expected = [{"category": c, "n": len(rs), "window_start": s, "window_end": s + MINUTE}
                for s, in_window in tumbling(rows, MINUTE).items() for c, rs in grouped(in_window,
                                                                                       lambda r: r["category"]).items()]
    assert canonical(got) == canonical(expected)

    per_event = per_category.replace("category, COUNT", "event, COUNT").replace("BY category", "BY event")
    assert "app.shuffle" in load_pipeline(write_app(tmp_path, keyed + per_event, topics={"events": 3, "out": 1})
                                          ).processors  # grouped by another column: shuffled as before


def test_qualify_refuses_late_updates(tmp_path: Path) -> None:
    query = ("CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score\n"
             "GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE)\n"
             "QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY n DESC) = 1;\n")
    path = write_app(tmp_path, INPUT.format(events="events") + query, topics={"events": 1, "out": 1},
                     processor={"event_time": {"late": "update"}})
    with pytest.raises(PipelineError) as info:
        load_pipeline(path)
    assert "processors.app.event_time.late: table `out` ranks its windows with QUALIFY" in str(info.value)
    assert "use `late: drop` or `late: topic`" in str(info.value)


@pytest.mark.parametrize("dense", [False, True])
def test_merging_each_partitions_top_rows_gives_the_top_rows_of_all(dense: bool) -> None:
    """Why a window stage may rank per partition: for random rows split at random, the merge of the parts' top
    rows equals the top rows of the whole, in order."""
    rng = random.Random(11)
    order = [["x", True, False], ["y", False, True]]  # x DESC NULLS LAST, y ASC NULLS FIRST
    for _ in range(300):
        limit = rng.randint(1, 4)
        ranking = TiedTop(limit, dense, comparator(order))
        entries = [[[rng.choice([None, 1, 2, 3]), rng.choice([None, "a", "b"])], [i], []]
                   for i in range(rng.randint(0, 25))]
        whole = ranking.rank(entries)
        parts: list[list[Any]] = [[] for _ in range(3)]
        for entry in entries:
            parts[rng.randrange(3)].append(entry)
        merged: list[Any] = []
        for part in parts:
            merged = ranking.merge(merged, ranking.rank(part))
        assert sorted(map(str, merged)) == sorted(map(str, whole))
        assert [e[0] for e in merged] == [e[0] for e in whole]  # in rank order (tied rows in any order)
        assert ranking.merge(merged, whole) == merged  # a group already kept is not kept twice
