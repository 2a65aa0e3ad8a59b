"""Late records under each policy, and the rule that windows decide lateness by their windows."""

from __future__ import annotations

import logging

import pytest

from tests.eventtime.engine_setup import Rig, pipeline_doc


def _rig(policy: str, cls: str = "tests.apps.timed:Collect", **config: object) -> Rig:
    return Rig(pipeline_doc(cls, event_time={"field": "ts", "late": policy}, config=config))


def test_drop_skips_counts_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    rig = _rig("drop")
    rig.feed([{"id": 1, "ts": 10_000}])
    rig.advance()
    with caplog.at_level(logging.WARNING, logger="stylus.eventtime.late"):
        out = rig.feed([{"id": 2, "ts": 9_000}, {"id": 3, "ts": 10_000}, {"id": 4, "ts": 11_000}])
        rig.feed([{"id": 5, "ts": 8_000}])
    assert [o.value["id"] for o in out] == [3, 4]
    assert rig.engine.late.counters.as_dict() == {"dropped": 2, "redirected": 0, "updated": 0}
    # dropped data is never silent, and the log is not flooded: the first one at once, then a summary
    # at most every 30 s
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 1 and "in[0]@1, event time 9000 is 1000 ms behind watermark 10000" in reports[0]


def test_topic_sends_the_record_to_the_late_topic() -> None:
    rig = _rig("topic")
    rig.feed([{"id": 1, "ts": 10_000}])
    rig.advance()
    out = rig.feed([{"id": 2, "ts": 9_000}, {"id": 3, "ts": 12_000}])
    assert [(o.topic, o.value["id"]) for o in out] == [("et.p.late", 2), ("out", 3)]
    assert out[0].headers is not None and out[0].headers["stylus.late.watermark"] == b"10000"
    assert rig.engine.late.counters.redirected == 1


def test_update_hands_the_record_to_the_processor() -> None:
    rig = _rig("update")
    rig.feed([{"id": 1, "ts": 10_000}])
    rig.advance()
    out = rig.feed([{"id": 2, "ts": 9_000}])
    assert [o.value["id"] for o in out] == [2]
    assert rig.engine.late.counters.updated == 1


def test_update_policy_re_emits_a_corrected_window() -> None:
    rig = _rig("update", "tests.apps.timed:CategorySum")
    rig.feed([{"category": "a", "amount": 1, "ts": 1_000}, {"category": "a", "amount": 2, "ts": 9_999}])
    rig.feed([{"category": "a", "amount": 5, "ts": 12_000}])
    first = rig.advance()  # watermark 12000 closes [0, 10000)
    assert [(o.value["start"], o.value["value"], o.value["final"]) for o in first] == [(0, 3, True)]
    corrected = rig.feed([{"category": "a", "amount": 4, "ts": 5_000}])
    assert [(o.value["value"], o.value.get("late")) for o in corrected] == [(7, True)]
    assert rig.engine.late.counters.updated == 1
    # after the retention (one window, by default) the window is gone: a late record changes nothing
    rig.feed([{"category": "a", "amount": 1, "ts": 25_000}])
    rig.advance()
    assert rig.feed([{"category": "a", "amount": 9, "ts": 5_000}]) == []


def test_windows_count_a_record_late_only_when_its_windows_closed() -> None:
    rig = _rig("drop", "tests.apps.timed:CategorySum")
    rig.feed([{"category": "a", "amount": 1, "ts": 15_000}])
    rig.advance()  # watermark 15000: [10000, 20000) is still open
    rig.feed([{"category": "a", "amount": 2, "ts": 11_000}, {"category": "a", "amount": 100, "ts": 9_000}])
    rig.feed([{"category": "a", "amount": 0, "ts": 30_000}])
    out = rig.advance()
    assert [(o.value["start"], o.value["value"]) for o in out] == [(10_000, 3)]
    assert rig.engine.late.counters.dropped == 1  # only the record of the closed window [0, 10000)
