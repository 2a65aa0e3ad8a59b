"""The event generator: reproducible, skewed like real traffic, with bursts that really burst."""

from __future__ import annotations

import itertools
from collections import Counter

from processors.generator import (
    DEFAULT_START_MS,
    EVENT_TYPES,
    TOPICS,
    Burst,
    EventGenerator,
    GeneratorConfig,
    generate,
    pick_event,
    topic_of,
)
from processors.trending import classify


def test_same_seed_same_records_and_chunking_does_not_matter() -> None:
    config = GeneratorConfig(seed=3, rate=500)
    whole = generate(5000, config)
    gen = EventGenerator(config)
    pieces = gen.take(1234) + gen.take(3766)
    assert whole == pieces
    assert generate(5000, GeneratorConfig(seed=4, rate=500)) != whole


def test_records_are_complete_and_timestamps_advance_at_the_rate() -> None:
    records = generate(2001, GeneratorConfig(rate=1000, start_ms=DEFAULT_START_MS))
    assert records[0]["ts"] == DEFAULT_START_MS
    assert records[1000]["ts"] == DEFAULT_START_MS + 1000
    assert records[2000]["ts"] == DEFAULT_START_MS + 2000
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(records))
    for record in records:
        assert record["type"] in EVENT_TYPES
        assert 1 <= record["dim_id"] <= 300
        assert classify(record["text"]) == topic_of(record["event_id"])  # the text carries the topic
    assert set(Counter(r["type"] for r in records)) == set(EVENT_TYPES)


def test_events_and_dimensions_are_zipf_skewed() -> None:
    records = generate(50_000)
    events = Counter(r["event_id"] for r in records)
    ranked = [e for e, _ in events.most_common()]
    assert ranked[:3] == ["e0001", "e0002", "e0003"]
    # Zipf(1.1): rank 1 about 2.1x rank 2 and about 12x rank 10; a long tail of rare events
    assert 1.7 < events["e0001"] / events["e0002"] < 2.6
    assert events["e0001"] > 8 * events["e0010"]
    assert sum(events[e] for e in ranked[:20]) > 0.5 * len(records)
    assert len(events) > 1500
    dims = Counter(r["dim_id"] for r in records)
    assert dims.most_common(1)[0][0] == 1
    assert dims[1] > 10 * dims[100]


def test_topics_are_deterministic_and_all_used() -> None:
    assert topic_of("e0042") == topic_of("e0042")
    assert {topic_of(f"e{i:04d}") for i in range(1, 2001)} == set(TOPICS)
    chosen = pick_event("music", 100)
    assert topic_of(chosen) == "music" and int(chosen[1:]) >= 100


def test_a_burst_multiplies_its_event_only_while_active() -> None:
    event = pick_event("science", 200)
    start = DEFAULT_START_MS + 20_000
    burst = Burst(event, start, 10_000, 100.0)
    assert burst.topic == "science"
    with_burst = generate(40_000, GeneratorConfig(rate=1000, bursts=(burst,)))
    plain = generate(40_000, GeneratorConfig(rate=1000))
    inside = [r for r in with_burst if burst.active(r["ts"])]
    outside = [r for r in with_burst if not burst.active(r["ts"])]
    share_in = sum(r["event_id"] == event for r in inside) / len(inside)
    share_out = sum(r["event_id"] == event for r in outside) / len(outside)
    share_plain = sum(r["event_id"] == event for r in plain) / len(plain)
    assert share_in > 40 * max(share_out, 1 / len(outside))
    assert abs(share_out - share_plain) < 0.002
    assert len(inside) == 10_000
