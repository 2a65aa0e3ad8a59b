"""Range planning and exact range reads against the real embedded broker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from stylus.backfill.bounds import parse_bound
from stylus.backfill.plan import plan_ranges
from stylus.backfill.read import read_unit
from stylus.backfill.search import TimestampProbe

BASE_TS = 1_714_564_800_000  # 2024-05-01T12:00:00Z


def produce_to(bootstrap: str, topic: str, counts: dict[int, int], ts_step: int = 1000) -> None:
    """counts[partition] records per partition, value = offset, timestamps BASE_TS + i*ts_step."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, str(i).encode(), f"k{i}".encode(), partition=partition,
                             timestamp=BASE_TS + i * ts_step)
    assert producer.flush(30) == 0


def offsets_read(plan_units: tuple, bootstrap: str) -> Counter[tuple[str, int, int]]:
    seen: Counter[tuple[str, int, int]] = Counter()
    for unit in plan_units:
        for msg in read_unit(unit, bootstrap, None):
            seen[(msg.topic(), msg.partition(), msg.offset())] += 1
    return seen


def test_bounds_syntax() -> None:
    assert parse_bound(None, default="earliest").kind == "earliest"
    assert parse_bound("latest", default="earliest").kind == "latest"
    assert parse_bound("offset:42", default="earliest").offset_for(3) == 42
    per = parse_bound("offset:0=5,2=7", default="earliest")
    assert (per.offset_for(0), per.offset_for(1), per.offset_for(2)) == (5, None, 7)
    assert parse_bound("2024-05-01T12:00:00Z", default="earliest").time_ms == BASE_TS
    assert parse_bound("2024-05-01T12:00:00", default="earliest").time_ms == BASE_TS
    assert parse_bound(str(BASE_TS), default="earliest").time_ms == BASE_TS
    assert parse_bound("2024-05-01", default="earliest").time_ms == BASE_TS - 12 * 3600 * 1000
    with pytest.raises(ValueError, match="not a range bound"):
        parse_bound("yesterday", default="earliest")


def test_offset_range_split_into_chunks_reads_every_record_once(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("bf-split", partitions=3)
    counts = {0: 1000, 1: 333, 2: 97}
    produce_to(bootstrap, topic, counts)
    earliest, latest = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
    plan = plan_ranges(bootstrap, [topic], earliest, latest, chunk_size=97, per_partition=False)
    sizes = {(u.partition, c.start, c.end) for u in plan.units for c in u.chunks}
    assert len(plan.units) == 11 + 4 + 1  # chunk boundaries at multiples of 97
    assert (0, 970, 1000) in sizes and (2, 0, 97) in sizes
    seen = offsets_read(plan.units, bootstrap)
    assert set(seen.values()) == {1}
    assert seen.keys() == {(topic, p, o) for p, n in counts.items() for o in range(n)}
    # stateful processors: one unit per partition, same chunks, still exact and in offset order
    plan = plan_ranges(bootstrap, [topic], earliest, latest, chunk_size=97, per_partition=True)
    assert [len(u.chunks) for u in plan.units] == [11, 4, 1]
    for unit in plan.units:
        offsets = [m.offset() for m in read_unit(unit, bootstrap, None)]
        assert offsets == list(range(counts[unit.partition]))
        assert unit.next_offset == counts[unit.partition]


def test_offset_bounds_empty_partitions_and_past_the_end(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("bf-off", partitions=4)
    produce_to(bootstrap, topic, {0: 200, 1: 50})  # partitions 2 and 3 stay empty
    plan = plan_ranges(bootstrap, [topic], parse_bound("offset:0=10,1=60", default="earliest"),
                       parse_bound("offset:150", default="latest"), chunk_size=64)
    by_part = {u.partition: u for u in plan.units}
    assert sorted(by_part) == [0, 1, 2, 3]
    assert [(c.start, c.end) for c in by_part[0].chunks] == [(10, 74), (74, 138), (138, 150)]
    assert by_part[1].chunks == ()  # starts past the end (50): empty, and no stalled read
    assert by_part[2].chunks == () and by_part[3].chunks == ()
    assert (by_part[0].next_offset, by_part[1].next_offset, by_part[2].next_offset) == (150, 50, 0)
    seen = offsets_read(plan.units, bootstrap)
    assert sorted(o for (_, p, o) in seen if p == 0) == list(range(10, 150))
    assert not [k for k in seen if k[1] != 0]
    # an end past the end is clipped to the true end (not the broker's wrong latest offset)
    plan = plan_ranges(bootstrap, [topic], parse_bound(None, default="earliest"),
                       parse_bound("offset:10000", default="latest"))
    assert {u.partition: u.next_offset for u in plan.units} == {0: 200, 1: 50, 2: 0, 3: 0}
    assert sum(offsets_read(plan.units, bootstrap).values()) == 250


def test_time_range_found_by_reading_timestamps(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("bf-time", partitions=2)
    produce_to(bootstrap, topic, {0: 500, 1: 300})  # record i has timestamp BASE_TS + i s
    start = parse_bound(str(BASE_TS + 120_000), default="earliest")
    stop = parse_bound("2024-05-01T12:04:10Z", default="latest")  # BASE_TS + 250 s
    plan = plan_ranges(bootstrap, [topic], start, stop, chunk_size=50)
    for unit in plan.units:
        assert unit.chunks[0].start == 120 and unit.chunks[-1].end == 250
        assert unit.next_offset == 250
        msgs = list(read_unit(unit, bootstrap, None))
        assert [m.offset() for m in msgs] == list(range(120, 250))
        assert all(BASE_TS + 120_000 <= m.timestamp()[1] < BASE_TS + 250_000 for m in msgs)
    # bounds outside the data: before everything / after everything
    before = plan_ranges(bootstrap, [topic], parse_bound("2020-01-01", default="earliest"),
                         parse_bound("2030-01-01", default="latest"))
    assert sum(offsets_read(before.units, bootstrap).values()) == 800
    after = plan_ranges(bootstrap, [topic], parse_bound("2030-01-01", default="earliest"),
                        parse_bound(None, default="latest"))
    assert all(u.chunks == () for u in after.units)


def test_offsets_for_times_finds_records_by_timestamp(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("bf-probe")
    produce_to(bootstrap, topic, {0: 4096}, ts_step=10)
    with TimestampProbe(bootstrap) as probe:
        for i in (0, 1, 2047, 4095):
            assert probe.offset_for_time(topic, 0, 0, 4096, BASE_TS + i * 10) == i
        assert probe.offset_for_time(topic, 0, 0, 4096, BASE_TS + 5) == 1  # between records
        assert probe.offset_for_time(topic, 0, 0, 4096, BASE_TS + 10**9) == 4096
        assert probe.probes == 6  # one ListOffsets request each: Kafka's time index, no search
