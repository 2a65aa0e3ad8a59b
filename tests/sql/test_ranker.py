"""The trending pipeline's Ranker as a Puma app (pipelines/apps/ranker.sql in pipelines/trending_events_sql.yaml)
beside the Python one (processors/trending.py: Ranker): over the same scores, from the real Filterer, Joiner and
Scorer on generated events with a burst, both give the same final ranking of every topic and bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from processors.generator import Burst, GeneratorConfig, generate, pick_event
from stylus.testing import TestDriver

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = ROOT / "pipelines" / "trending_events.yaml"
VARIANT = ROOT / "pipelines" / "trending_events_sql.yaml"
START = 1_700_000_010_000  # a multiple of 30 s: buckets start here


def test_the_variant_is_the_trending_pipeline_plus_the_sql_ranker() -> None:
    original, variant = (yaml.safe_load(p.read_text()) for p in (ORIGINAL, VARIANT))
    assert variant.pop("pipeline") == original.pop("pipeline") + "-sql"
    assert variant["topics"].pop("ranked_sql") == {"partitions": 4}
    sql_ranker = variant["processors"].pop("ranker_sql")
    assert variant == original  # a change to one file belongs in the other
    assert sql_ranker["event_time"] == {k: v for k, v in original["processors"]["ranker"]["event_time"].items()
                                        if k != "field"}  # the same lateness; the app sets the field (TIME ts)
    assert original["processors"]["ranker"]["config"] == {"window": {"type": "tumbling", "size": "30s"}, "top_k": 5,
                                                          "min_score": 0}  # what ranker.sql says: [30 seconds], 5, > 0


def final_rankings(rows: list[dict[str, Any]]) -> dict[tuple[str, int, int], list[tuple[str, float]]]:
    """The Python Ranker's final results: (topic, bucket start, end) -> [(event, score), ...] best first."""
    return {(r["topic"], r["bucket_start"], r["bucket_end"]): [(e["event_id"], e["score"]) for e in r["top"]]
            for r in rows if r["final"] and not r.get("late")}


def sql_rankings(rows: list[dict[str, Any]]) -> dict[tuple[str, int, int], list[tuple[str, float]]]:
    """The SQL Ranker's rows grouped the same way, ordered as topk orders them (score, then the event's text)."""
    out: dict[tuple[str, int, int], list[tuple[str, float]]] = {}
    for r in rows:
        out.setdefault((r["topic"], r["window_start"], r["window_end"]), []).append((r["event_id"], r["score"]))
    return {k: sorted(v, key=lambda e: (-e[1], e[0])) for k, v in out.items()}


def test_the_sql_ranker_ranks_as_the_python_one() -> None:
    burst = Burst(pick_event("movies", 100), START + 120_000, 30_000, 200.0)
    events = generate(20_000, GeneratorConfig(rate=100, start_ms=START, bursts=(burst,)))  # 200 s of event time
    with TestDriver(VARIANT, watermarks="auto",
                    processors=["filterer", "joiner", "scorer", "ranker", "ranker_sql"]) as driver:
        # the SQL Ranker runs as one processor: `scored` is keyed by topic (KEY topic), so no shuffle
        assert sorted(driver.stages) == ["filterer", "joiner", "ranker", "ranker_sql", "scorer"]
        for i, event in enumerate(events):
            driver.send("events", event, key=event["event_id"], timestamp=event["ts"])
            if i % 2000 == 1999:
                driver.advance_clock(1000)
        driver.advance_watermark(2**62)
        scored = driver.outputs("scored")
        python = final_rankings([r.value for r in driver.outputs("ranked")])
        sql = sql_rankings([r.value for r in driver.outputs("ranked_sql")])
        assert driver.late("ranker") == driver.late("ranker_sql")
    assert len(scored) > 10_000 and len(python) > 20
    assert sql == python
    movies = python[("movies", START + 120_000, START + 150_000)]
    assert movies[0][0] == burst.event  # the burst leads its bucket, in both
