"""Reading which timers the old owner fired, and where, from the ids of its exactly-once outputs."""

from __future__ import annotations

from stylus.runtime.timeline import NEVER, FiredTimer, parse_id, timeline

P = "in:3:"


def test_parse_id_tells_records_from_timers() -> None:
    assert parse_id("in:3:120:0", P) == (120, None)
    assert parse_id("in:3:T5000:user:7:1", P) == (None, (5000, "user:7"))  # keys may contain ':'
    assert parse_id("in:30:120:0", P) is None  # another partition
    assert parse_id("in:3:?:0", P) is None
    assert parse_id("in:3:Tx:k:0", P) is None


def test_timeline_anchors_each_timer_after_the_records_before_it() -> None:
    part0 = ["in:3:10:0", "in:3:T100:a:0", "in:3:T100:a:1", "in:3:11:0", "in:3:T200:b:0"]
    part1 = ["in:3:9:0", "in:3:T100:a:2", "other:0:99:0", "in:3:T300:c:0", "in:3:13:0"]
    assert timeline([part0, part1], P) == [
        FiredTimer(9, 300, "c", 13),
        FiredTimer(10, 100, "a", 11),  # the latest record before it in any partition; the earliest after
        FiredTimer(11, 200, "b", NEVER),
    ]


def test_timeline_without_record_outputs_has_no_bounds() -> None:
    assert timeline([["in:3:T1:x:0", "in:3:T2:y:0"]], P) == [FiredTimer(-1, 1, "x"), FiredTimer(-1, 2, "y")]


def test_a_timer_with_its_input_position_is_placed_exactly_there() -> None:
    ids = [["in:3:T100:a:0", "in:3:10:0", "in:3:T200:b:0"]]
    assert timeline(ids, P, {(100, "a"): 7}) == [
        FiredTimer(6, 100, "a", 7, exact=True),  # not -1: its output said it fired before record 7
        FiredTimer(10, 200, "b"),
    ]
