"""The four trending processors, each run through the real Engine with in-memory state (no broker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from processors.dimensions import DEFAULT_PATH, DimensionTable
from processors.generator import Burst, GeneratorConfig, generate, pick_event
from processors.trending import (
    ORIGIN_KEY,
    advance,
    classify,
    history,
    new_window,
    trend_score,
    update_top,
)
from stylus.config import Pipeline, load_pipeline
from tests.support.engine import EngineHarness

ROOT = Path(__file__).resolve().parents[2]
START = 1_700_000_010_000  # a multiple of 10 s and 30 s: buckets start here
DIMENSIONS = [json.loads(line) for line in DEFAULT_PATH.read_text().splitlines()]


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return load_pipeline(ROOT / "pipelines" / "trending_events.yaml")


def values(outputs: list[Any]) -> list[Any]:
    return [o.value for o in outputs]


# ------------------------------------------------------------------------------------ Filterer
def test_filterer_keeps_configured_types_and_rekeys_by_dimension(pipeline: Pipeline) -> None:
    harness = EngineHarness(pipeline, "filterer", {"types": ["post", "share"]})
    records = generate(2000)
    out = harness.feed(records, key_field="event_id")
    assert [o.value for o in out] == [r for r in records if r["type"] in ("post", "share")]
    assert all(o.key == str(o.value["dim_id"]) for o in out)
    assert all(o.topic == "filtered" for o in out)
    assert all(o.timestamp == o.value["ts"] for o in out)


# ------------------------------------------------------------------------------------ Joiner
def test_classify_votes_by_keyword() -> None:
    assert classify("wow goal match album") == "sports"
    assert classify("album chorus goal") == "music"
    assert classify("goal album") == "sports"  # a tie goes to the earlier topic
    assert classify("nothing to see") == "other"
    assert classify("QUANTUM Galaxy") == "science"


def test_dimension_table_reads_rows_by_offset_through_an_lru(tmp_path: Path) -> None:
    path = tmp_path / "dims.jsonl"
    path.write_text("".join(json.dumps({"dim_id": i, "country": f"C{i}"}) + "\n" for i in range(1, 6)))
    table = DimensionTable(path, cache_size=2)
    assert len(table) == 5 and not table.cache  # only offsets are held after opening
    assert table.get(3) == {"dim_id": 3, "country": "C3"}
    assert table.get("3")["country"] == "C3"  # type: ignore[index]
    table.get(4)
    table.get(5)  # evicts 3 (least recently used)
    table.get(4)  # hit
    table.get(3)  # miss again: read from the file
    assert (table.hits, table.misses, table.reads) == (2, 4, 4)
    assert list(table.cache) == ["4", "3"]
    assert table.get(99) is None
    table.close()


def test_joiner_enriches_with_dimension_row_and_topic(pipeline: Pipeline) -> None:
    harness = EngineHarness(pipeline, "joiner", {"cache_size": 10})
    records = generate(3000)
    out = harness.feed(records, key_field="dim_id")
    assert len(out) == len(records)
    by_id = {row["dim_id"]: row for row in DIMENSIONS}
    for record, output in zip(records, out, strict=True):
        row = by_id[record["dim_id"]]
        assert output.key == record["event_id"]
        assert output.value == {
            "event_id": record["event_id"], "type": record["type"], "dim_id": record["dim_id"],
            "country": row["country"], "language": row["language"], "segment": row["segment"],
            "topic": classify(record["text"]), "ts": record["ts"],
        }
    table = harness.processor.table  # type: ignore[attr-defined]
    assert table.hits + table.misses == len(records)
    assert len(table.cache) == 10 and table.reads == table.misses > 10


# ------------------------------------------------------------------------------------ Scorer windows
def test_window_folds_only_what_leaves_retention() -> None:
    win = new_window(10, origin=9)
    win["c"] = {"10": 4}
    advance(win, 11, 0.5, retain=3)  # retained 9..11; 9 is the origin: nothing leaves
    assert win["k"] == 0 and win["c"] == {"10": 4}
    advance(win, 13, 0.5, retain=3)  # 10 (count 4) leaves; retained 11..13
    assert win["k"] == 1 and win["avg"] == pytest.approx(2.0) and win["c"] == {}
    win["c"] = {"12": 1, "13": 2}
    advance(win, 30, 0.5, retain=3)  # 11..27 leave: 12 and 13 carry counts, the rest are empty
    assert win["k"] == 18 and win["c"] == {}
    expected = 2.0
    for count in [0, 1, 2] + [0] * 14:
        expected = 0.5 * expected + 0.5 * count
    assert win["avg"] == pytest.approx(expected)
    assert history(win, 30, 0.5, retain=3) == pytest.approx((expected * 0.125, 21))


def test_trend_score_is_zero_at_expectation_and_grows_with_excess() -> None:
    win = {"cur": 100, "c": {}, "avg": 10.0, "k": 1000, "o": 0}
    win["c"] = {str(i): 10 for i in range(81, 100)} | {"100": 5}
    # window 98..100 (3 sub-buckets), the newest half seen: expected 10 * 2.5
    assert trend_score(win, 100, 3, 0.1, 20, elapsed=0.5) == pytest.approx(0.0)
    win["c"]["100"] = 60
    assert trend_score(win, 100, 3, 0.1, 20, elapsed=0.5) == pytest.approx(55 / 26**0.5)
    # scored at its own (older) sub-bucket: the window ending at 99 is exactly as expected
    assert trend_score(win, 99, 3, 0.1, 20, elapsed=1.0) == pytest.approx(0.0)
    assert trend_score({**win, "k": 0, "o": 97}, 99, 3, 0.1, 20, elapsed=1.0) == 0.0  # no history yet


# ------------------------------------------------------------------------------------ Scorer
def _joined(n: int, bursts: tuple[Burst, ...] = (), rate: float = 200.0) -> list[dict[str, Any]]:
    from processors.trending import classify as topic_for

    return [{"event_id": r["event_id"], "topic": topic_for(r["text"]), "ts": r["ts"]}
            for r in generate(n, GeneratorConfig(rate=rate, start_ms=START, bursts=bursts))]


def test_scorer_scores_a_burst_far_above_steady_events(pipeline: Pipeline) -> None:
    event = pick_event("tech", 150)
    burst = Burst(event, START + 60_000, 20_000, 300.0)
    joined = _joined(20_000, (burst,))  # 100 s of event time
    harness = EngineHarness(pipeline, "scorer")
    out = harness.feed(joined, key_field="event_id")
    assert all(o.key == o.value["topic"] and o.topic == "scored" for o in out)
    in_burst = [o.value for o in out if o.value["event_id"] == event and burst.active(o.value["ts"])]
    others = [o.value for o in out if o.value["event_id"] != event and o.value["ts"] >= START + 40_000]
    assert len(in_burst) > 300
    assert max(v["score"] for v in in_burst) > 50
    assert max(v["score"] for v in others) < 15  # steady events stay near their own expectation
    hot = [o.value for o in out if o.value["event_id"] == "e0001" and o.value["ts"] >= START + 40_000]
    assert max(v["score"] for v in hot) < 6 and min(v["count"] for v in hot) > 100
    assert {"event_id", "topic", "score", "count", "ts"} == set(out[-1].value)
    # records of the partition's first (partial) sub-bucket only warm up
    first_sub = joined[0]["ts"] // 2000
    assert all(o.value["ts"] // 2000 > first_sub for o in out)
    assert harness.tasks[("joined", 0)].state[ORIGIN_KEY] == first_sub  # type: ignore[index]


def test_scorer_is_deterministic_across_replays_and_batchings(pipeline: Pipeline) -> None:
    joined = _joined(5000, (Burst(pick_event("food", 120), START + 10_000, 5_000, 200.0),))
    one = EngineHarness(pipeline, "scorer")
    out_one = values(one.feed(joined, key_field="event_id"))
    two = EngineHarness(pipeline, "scorer")
    out_two = []
    for i in range(0, len(joined), 333):
        out_two += values(two.feed(joined[i:i + 333], key_field="event_id"))
    assert out_one == out_two


def test_scorer_still_finds_the_burst_in_out_of_order_input(pipeline: Pipeline) -> None:
    """After a reshard a backlog arrives partition by partition: event time jumps back and forth."""
    event = pick_event("tech", 150)
    burst = Burst(event, START + 60_000, 20_000, 300.0)
    joined = _joined(20_000, (burst,))
    shards = [[r for i, r in enumerate(joined) if i % 4 == s] for s in range(4)]
    chunks = [shard[i:i + 700] for i in range(0, 5000, 700) for shard in shards]  # 700 records = 14 s
    disordered = [r for chunk in chunks for r in chunk]
    assert sorted(disordered, key=lambda r: r["ts"]) != disordered
    out = values(EngineHarness(pipeline, "scorer", {"lateness": "1m"}).feed(disordered, key_field="event_id"))
    assert len(out) > 0.97 * len(joined)  # only the warm-up and records later than a minute are left out
    burst_scores = [v["score"] for v in out if v["event_id"] == event and burst.active(v["ts"])]
    other_scores = [v["score"] for v in out if v["event_id"] != event and v["ts"] >= START + 40_000]
    assert max(burst_scores) > 50 and max(other_scores) < 15


def test_scorer_forgets_keys_idle_for_ttl(pipeline: Pipeline) -> None:
    harness = EngineHarness(pipeline, "scorer", {"ttl": "1m"})
    joined = [{"event_id": "e0001", "topic": "sports", "ts": START + i * 100} for i in range(100)]
    harness.feed(joined, key_field="event_id")
    state = harness.tasks[("joined", 0)].state
    assert state is not None and "e0001|sports" in state
    assert harness.fire(START + 9_900 + 59_000) == [] and "e0001|sports" in state
    harness.fire(START + 10_000 + 60_000)
    assert "e0001|sports" not in state


# ------------------------------------------------------------------------------------ Ranker
def test_update_top_keeps_best_score_per_event() -> None:
    top = update_top([], "a", 1.0, 2)
    top = update_top(top, "b", 3.0, 2)
    assert top == [["b", 3.0], ["a", 1.0]]
    assert update_top(top, "a", 0.5, 2) is top  # a lower score changes nothing
    top = update_top(top, "c", 2.0, 2)
    assert top == [["b", 3.0], ["c", 2.0]]
    assert update_top(top, "d", 2.0, 2) == [["b", 3.0], ["c", 2.0]]  # ties: by event id


def _scored(event: str, topic: str, score: float, ts: int) -> dict[str, Any]:
    return {"event_id": event, "topic": topic, "score": score, "count": 1, "ts": ts}


def test_ranker_emits_changes_then_a_final_result_per_bucket(pipeline: Pipeline) -> None:
    harness = EngineHarness(pipeline, "ranker", {"bucket": "30s", "top_k": 2})
    feed = [
        _scored("a", "music", 1.0, START + 1000),
        _scored("b", "music", 2.0, START + 2000),  # order changes: b, a
        _scored("b", "music", 2.5, START + 3000),  # same order: no output
        _scored("x", "sports", 5.0, START + 4000),
        _scored("c", "music", 0.0, START + 5000),  # not above min_score: ignored
        _scored("c", "music", 3.0, START + 31_000),  # next bucket
    ]
    out = harness.feed(feed, key_field="topic")
    got = [(o.key, o.value["bucket_start"], [t["event_id"] for t in o.value["top"]], o.value["final"]) for o in out]
    assert got == [
        ("music", START, ["a"], False),
        ("music", START, ["b", "a"], False),
        ("sports", START, ["x"], False),
        ("music", START + 30_000, ["c"], False),
    ]
    assert harness.fire(START + 29_998) == []
    finals = harness.fire(START + 29_999)  # the watermark passed the bucket's last millisecond
    assert sorted((o.key, o.value["top"], o.value["final"], o.value["bucket_end"]) for o in finals) == [
        ("music", [{"event_id": "b", "score": 2.5}, {"event_id": "a", "score": 1.0}], True, START + 30_000),
        ("sports", [{"event_id": "x", "score": 5.0}], True, START + 30_000),
    ]
    state = harness.tasks[("scored", 0)].state
    assert state is not None and f"music|{START}" not in state and f"music|{START + 30_000}" in state
    # a late record for the closed bucket is dropped, not re-opened
    assert harness.feed([_scored("z", "music", 9.0, START + 2000)], key_field="topic") == []
    assert f"music|{START}" not in state


def test_pipeline_in_memory_puts_the_burst_first_in_its_topic(pipeline: Pipeline) -> None:
    """All four processors chained through the Engine: the burst wins its topic's bucket."""
    event = pick_event("movies", 100)
    burst = Burst(event, START + 120_000, 30_000, 200.0)
    records = generate(20_000, GeneratorConfig(rate=100, start_ms=START, bursts=(burst,)))
    stream: list[Any] = records
    for name, key in (("filterer", "event_id"), ("joiner", "dim_id"), ("scorer", "event_id"),
                      ("ranker", "topic")):
        harness = EngineHarness(pipeline, name)
        stream = values(harness.feed(stream, key_field=key) + harness.fire(2**62))
    finals = {(r["topic"], r["bucket_start"]): r for r in stream if r["final"]}
    assert finals[("movies", START + 120_000)]["top"][0]["event_id"] == event
    leaders = [r["top"][0]["event_id"] for (t, s), r in finals.items() if t == "movies" and s != START + 120_000
               and s != START + 150_000]
    assert event not in leaders
