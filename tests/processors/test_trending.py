"""The four trending processors, each run one at a time on `stylus.testing.TestDriver`: the real Engine over
in-memory topics and state (no broker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import murmur2

from processors.dimensions import DEFAULT_PATH, DimensionTable
from processors.generator import Burst, GeneratorConfig, generate, pick_event
from processors.trending import CLOCK_KEY, classify
from stylus.config import Pipeline, load_pipeline
from stylus.testing import Record, TestDriver

ROOT = Path(__file__).resolve().parents[2]
START = 1_700_000_010_000  # a multiple of 10 s and 30 s: buckets start here
DIMENSIONS = [json.loads(line) for line in DEFAULT_PATH.read_text().splitlines()]


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return load_pipeline(ROOT / "pipelines" / "trending_events.yaml")


def values(outputs: list[Any]) -> list[Any]:
    return [o.value for o in outputs]


def stage(pipeline: Pipeline, name: str, config: dict[str, Any] | None = None) -> TestDriver:
    """One processor on a driver, with `on_error: stop`: a failing record raises out of `send` instead of
    going to the dead-letter topic, so no failure passes unnoticed."""
    strict = pipeline.processors[name].model_copy(update={"on_error": "stop"})
    pipeline = pipeline.model_copy(update={"processors": {**pipeline.processors, name: strict}})
    return TestDriver(pipeline, processors=[name], config={name: config} if config is not None else None)


def send(driver: TestDriver, name: str, records: list[dict[str, Any]], key: str) -> None:
    """Send `records` to the processor's input, all on partition 0 (one partition task, one warm-up), keyed by
    their `key` field and stamped with their `ts`."""
    topic = driver.pipeline.processors[name].inputs[0]
    for record in records:
        driver.send(topic, record, key=str(record[key]), timestamp=int(record.get("ts", 0)), partition=0)


def feed(driver: TestDriver, name: str, records: list[dict[str, Any]], key: str) -> list[Record]:
    """`send`, and return the outputs those records produced."""
    output = driver.pipeline.processors[name].outputs[0]
    before = len(driver.outputs(output))
    send(driver, name, records, key)
    return driver.outputs(output)[before:]


def fire(driver: TestDriver, name: str, watermark: int) -> list[Record]:
    """Move the watermark; return the outputs the timers it passed produced."""
    output = driver.pipeline.processors[name].outputs[0]
    before = len(driver.outputs(output))
    driver.advance_watermark(watermark)
    return driver.outputs(output)[before:]


# ------------------------------------------------------------------------------------ Filterer
def test_filterer_keeps_configured_types_and_rekeys_by_dimension(pipeline: Pipeline) -> None:
    with TestDriver(pipeline, processors=["filterer"], config={"filterer": {"types": ["post", "share"]}}) as driver:
        records = generate(2000)
        for record in records:
            driver.send("events", record, key=record["event_id"], timestamp=record["ts"])
        out = driver.outputs("filtered")
    assert [o.value for o in out] == [r for r in records if r["type"] in ("post", "share")]
    assert all(o.key == str(o.value["dim_id"]) for o in out)
    assert all(o.partition == murmur2(o.key.encode(), 4) for o in out)  # resharded as the runtime's producer does
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


def load_dimensions(driver: TestDriver) -> None:
    """The shipped rows into the `dims` table's topic, as `stylus table load` does."""
    for row in DIMENSIONS:
        driver.send("dimensions", row, key=str(row["dim_id"]))


def test_joiner_enriches_with_dimension_row_and_topic(pipeline: Pipeline) -> None:
    with stage(pipeline, "joiner") as driver:
        load_dimensions(driver)
        records = generate(3000)
        out = feed(driver, "joiner", records, "dim_id")
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


def test_joiner_sees_the_table_as_updated_and_deleted_before_each_record(pipeline: Pipeline) -> None:
    """A new row replaces the old one for records after it; a tombstone leaves the dimension's fields null."""
    with stage(pipeline, "joiner") as driver:
        load_dimensions(driver)
        record = {**generate(1)[0], "dim_id": 7}
        first = feed(driver, "joiner", [record], "dim_id")
        driver.send("dimensions", {"dim_id": 7, "country": "NZ", "language": "mi", "segment": "new"}, key="7")
        second = feed(driver, "joiner", [record], "dim_id")
        driver.send("dimensions", None, key="7")  # a tombstone
        third = feed(driver, "joiner", [record], "dim_id")
    assert first[0].value["country"] == {r["dim_id"]: r for r in DIMENSIONS}[7]["country"]
    assert (second[0].value["country"], second[0].value["segment"]) == ("NZ", "new")
    assert (third[0].value["country"], third[0].value["language"], third[0].value["segment"]) == (None, None, None)


# ------------------------------------------------------------------------------------ Scorer
LAG = 5_000  # how far the watermark trails the newest event time, as the scorer's `allowed_lateness`


def _joined(n: int, bursts: tuple[Burst, ...] = (), rate: float = 200.0) -> list[dict[str, Any]]:
    return [{"event_id": r["event_id"], "topic": classify(r["text"]), "ts": r["ts"]}
            for r in generate(n, GeneratorConfig(rate=rate, start_ms=START, bursts=bursts))]


def run_stage(driver: TestDriver, name: str, records: list[Any], key: str, *, chunk: int = 500,
              lag: int | None = LAG, progress: Any = None) -> list[Any]:
    """Send in chunks, moving the watermark to `lag` behind what was sent (`progress(fed)` overrides) after
    each, as the upstream control records would; `lag=None` never moves it. Then close everything (the
    watermark to the end of time). Returns the values of every output, in the order written."""
    for i in range(0, len(records), chunk):
        send(driver, name, records[i:i + chunk], key)
        if lag is not None:
            fed = records[:i + chunk]
            mark = progress(fed) if progress is not None else max(r["ts"] for r in records[i:i + chunk]) - lag
            driver.advance_watermark(mark)
    driver.advance_watermark(2**62)
    return values(driver.outputs(driver.pipeline.processors[name].outputs[0]))


def test_scorer_scores_a_burst_far_above_steady_events(pipeline: Pipeline) -> None:
    event = pick_event("tech", 150)
    burst = Burst(event, START + 60_000, 20_000, 300.0)
    joined = _joined(20_000, (burst,))  # 100 s of event time
    with stage(pipeline, "scorer") as driver:
        out = run_stage(driver, "scorer", joined, "event_id")
        assert all(o.key == o.value["topic"] and o.topic == "scored" for o in driver.outputs("scored"))
        state = driver.state("scorer", partition=0)
    in_burst = [v for v in out if v["event_id"] == event and burst.active(v["ts"])]
    others = [v for v in out if v["event_id"] != event and v["ts"] >= START + 40_000]
    assert len(in_burst) > 300
    assert max(v["score"] for v in in_burst) > 50
    assert max(v["score"] for v in others) < 15  # steady events stay near their own expectation
    hot = [v for v in out if v["event_id"] == "e0001" and v["ts"] >= START + 40_000]
    assert max(v["score"] for v in hot) < 6 and min(v["count"] for v in hot) > 100
    assert {"event_id", "topic", "score", "count", "ts"} == set(out[-1])
    # records of the partition's first (partial) slide only warm up; all others are scored
    origin = joined[0]["ts"] - joined[0]["ts"] % 2000 + 2000
    assert len(out) == sum(1 for r in joined if r["ts"] >= origin)
    assert state[CLOCK_KEY] == [origin, joined[-1]["ts"]]
    # closed windows went into the keys' histories: no window entry is left, one history per key
    keys = {f"{r['event_id']}|{r['topic']}" for r in joined if r["ts"] >= origin}
    assert sorted(state) == sorted([CLOCK_KEY, *keys])


def test_scorer_does_not_depend_on_when_the_watermark_moves(pipeline: Pipeline) -> None:
    """The same input, windows closing early, late or never (until the end): the same scores."""
    joined = _joined(5000, (Burst(pick_event("food", 120), START + 10_000, 5_000, 200.0),))

    def run(chunk: int, lag: int | None) -> list[Any]:
        with stage(pipeline, "scorer") as driver:
            return run_stage(driver, "scorer", joined, "event_id", chunk=chunk, lag=lag)

    runs = [run(chunk, lag)  # 25 s
            for chunk, lag in ((5000, None), (333, 0), (333, LAG), (1000, 12_000), (97, 2_000))]
    assert len(runs[0]) == 4600 and any(v["score"] > 20 for v in runs[0])
    for other in runs[1:]:
        assert other == runs[0]


def test_scorer_still_finds_the_burst_in_out_of_order_input(pipeline: Pipeline) -> None:
    """After a reshard a backlog arrives partition by partition: event time jumps back and forth, and the
    watermark follows the slowest shard."""
    event = pick_event("tech", 150)
    burst = Burst(event, START + 60_000, 20_000, 300.0)
    joined = _joined(20_000, (burst,))
    shards = [[r for i, r in enumerate(joined) if i % 4 == s] for s in range(4)]
    chunks = [shard[i:i + 700] for i in range(0, 5000, 700) for shard in shards]  # 700 records = 14 s
    disordered = [r for chunk in chunks for r in chunk]
    assert sorted(disordered, key=lambda r: r["ts"]) != disordered

    shard_of = {id(r): s for s, shard in enumerate(shards) for r in shard}

    def slowest(fed: list[dict[str, Any]]) -> int:
        newest: dict[int, int] = {}
        for r in fed:
            newest[shard_of[id(r)]] = max(newest.get(shard_of[id(r)], 0), r["ts"])
        return min(newest.values()) if len(newest) == 4 else 0

    with stage(pipeline, "scorer") as driver:
        out = run_stage(driver, "scorer", disordered, "event_id", chunk=700, progress=slowest)
        assert driver.late("scorer") == {"dropped": 0, "redirected": 0, "updated": 0}
    assert len(out) > 0.97 * len(joined)  # only the warm-up is left out
    burst_scores = [v["score"] for v in out if v["event_id"] == event and burst.active(v["ts"])]
    other_scores = [v["score"] for v in out if v["event_id"] != event and v["ts"] >= START + 40_000]
    assert max(burst_scores) > 50 and max(other_scores) < 15


def test_scorer_forgets_keys_idle_for_ttl(pipeline: Pipeline) -> None:
    with stage(pipeline, "scorer", {"ttl": "1m"}) as driver, stage(pipeline, "scorer", {"ttl": "1m"}) as kept:
        joined = [{"event_id": "e0001", "topic": "sports", "ts": START + i * 100} for i in range(100)]
        send(driver, "scorer", joined, "event_id")
        send(kept, "scorer", joined, "event_id")
        # its last window is [START + 8 s, START + 18 s): closed at START + 18 s, forgotten a ttl and a window later
        assert fire(driver, "scorer", START + 18_000) == [] and "e0001|sports" in driver.state("scorer")
        fire(kept, "scorer", START + 18_000)
        assert not [k for k in driver.state("scorer") if k.startswith("\x00")]  # the windows themselves are gone
        assert fire(driver, "scorer", START + 18_000 + 70_000 - 1) == [] and "e0001|sports" in driver.state("scorer")
        fire(driver, "scorer", START + 18_000 + 70_000)
        assert "e0001|sports" not in driver.state("scorer")
        # back after its ttl: scored as new (no history), exactly as if it had never been forgotten
        again = [{"event_id": "e0001", "topic": "sports", "ts": START + 200_000 + i * 100} for i in range(5)]
        scores = [v["score"] for v in values(feed(driver, "scorer", again, "event_id"))]
        assert scores == [1, 2, 3, 4, 5]  # nothing expected of a forgotten key: its count is its score
        assert [v["score"] for v in values(feed(kept, "scorer", again, "event_id"))] == scores


# ------------------------------------------------------------------------------------ Ranker
def _scored(event: str, topic: str, score: float, ts: int) -> dict[str, Any]:
    return {"event_id": event, "topic": topic, "score": score, "count": 1, "ts": ts}


def test_ranker_emits_changes_then_a_final_result_per_bucket(pipeline: Pipeline) -> None:
    with stage(pipeline, "ranker", {"window": {"type": "tumbling", "size": "30s"}, "top_k": 2}) as driver:
        records = [
            _scored("a", "music", 1.0, START + 1000),
            _scored("b", "music", 2.0, START + 2000),  # order changes: b, a
            _scored("b", "music", 2.5, START + 3000),  # same order: no output
            _scored("a", "music", 0.5, START + 3500),  # a lower score changes nothing
            _scored("x", "sports", 5.0, START + 4000),
            _scored("c", "music", 0.0, START + 5000),  # not above min_score: ignored
            _scored("d", "music", 1.5, START + 6000),  # d replaces a at rank 2
            _scored("e", "music", 1.5, START + 7000),  # a tie with d: by event id, e stays out
            _scored("c", "music", 3.0, START + 31_000),  # next bucket
        ]
        out = feed(driver, "ranker", records, "topic")
        got = [(o.key, o.value["bucket_start"], [t["event_id"] for t in o.value["top"]], o.value["final"]) for o in out]
        assert got == [
            ("music", START, ["a"], False),
            ("music", START, ["b", "a"], False),
            ("sports", START, ["x"], False),
            ("music", START, ["b", "d"], False),
            ("music", START + 30_000, ["c"], False),
        ]
        assert fire(driver, "ranker", START + 29_999) == []
        # the watermark reached the bucket's end: nothing earlier can come
        finals = fire(driver, "ranker", START + 30_000)
        got = [(o.key, o.value["top"], o.value["final"], o.value["bucket_end"], o.timestamp) for o in finals]
        assert sorted(got) == [
            ("music", [{"event_id": "b", "score": 2.5}, {"event_id": "d", "score": 1.5}], True, START + 30_000,
             START + 29_999),
            ("sports", [{"event_id": "x", "score": 5.0}], True, START + 30_000, START + 29_999),
        ]
        assert [k[-5:] for k in driver.state("ranker")] == ["music"]  # only the open bucket is left
        # a late record for the closed bucket is dropped (and counted), not re-opened
        assert feed(driver, "ranker", [_scored("z", "music", 9.0, START + 2000)], "topic") == []
        assert driver.late("ranker") == {"dropped": 1, "redirected": 0, "updated": 0}
        assert len(driver.state("ranker")) == 1


def test_ranker_and_scorer_refuse_an_aggregate_of_their_own(pipeline: Pipeline) -> None:
    for name in ("ranker", "scorer"):
        with pytest.raises(ValueError, match="not `aggregate`"):
            stage(pipeline, name, {"aggregate": {"type": "count"}})
    with pytest.raises(ValueError, match="sliding"):
        stage(pipeline, "scorer", {"window": {"type": "tumbling", "size": "10s"}})


def test_pipeline_in_memory_puts_the_burst_first_in_its_topic(pipeline: Pipeline) -> None:
    """All four processors chained through the Engine: the burst wins its topic's bucket."""
    event = pick_event("movies", 100)
    burst = Burst(event, START + 120_000, 30_000, 200.0)
    records = generate(20_000, GeneratorConfig(rate=100, start_ms=START, bursts=(burst,)))
    stream: list[Any] = records
    for name, key in (("filterer", "event_id"), ("joiner", "dim_id"), ("scorer", "event_id"),
                      ("ranker", "topic")):
        with stage(pipeline, name) as driver:
            stream = run_stage(driver, name, stream, key, chunk=2000)
    finals = {(r["topic"], r["bucket_start"]): r for r in stream if r["final"]}
    assert finals[("movies", START + 120_000)]["top"][0]["event_id"] == event
    leaders = [r["top"][0]["event_id"] for (t, s), r in finals.items() if t == "movies" and s != START + 120_000
               and s != START + 150_000]
    assert len(leaders) >= 4 and event not in leaders
