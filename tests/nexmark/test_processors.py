"""Every implementation of the Nexmark queries on `stylus.testing.TestDriver`: the hand-written processors
(processors/nexmark.py, pipelines/nexmark/python.yaml) and the SQL apps (pipelines/nexmark/q*.sql,
pipelines/nexmark/sql.yaml). Each test runs for both: their rows equal the plain-Python reference over generated
bids, windows close with the watermark, ties across partitions give one row each, a crash loses no window."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import pytest

from stylus.nexmark import Event, GeneratorConfig, generate, key_of, reference
from stylus.nexmark import bids as bids_of
from stylus.testing import TestDriver
from tests.nexmark.helpers import NEXMARK, Implementations, nexmark_driver

IMPLEMENTATIONS: Implementations = {
    "python": (NEXMARK / "python.yaml", {
        "q0": (["q0"], "nexmark-q0-py"),
        "q1": (["q1"], "nexmark-q1-py"),
        "q2": (["q2"], "nexmark-q2-py"),
        "q5": (["q5-counts", "q5"], "nexmark-q5-py"),
        "q7": (["q7-partial", "q7"], "nexmark-q7-py"),
    }),
    "sql": (NEXMARK / "sql.yaml", {query: ([query], f"nexmark_{query}") for query in ("q0", "q1", "q2", "q5", "q7")}),
}
IMPLS = sorted(IMPLEMENTATIONS)
QUERIES = sorted(IMPLEMENTATIONS["python"][1])


driver_for = partial(nexmark_driver, IMPLEMENTATIONS)


@pytest.fixture(scope="module")
def events() -> list[Event]:
    """20,000 events at 200 per second: 100 s of event time, 18,400 bids, 9 closed 10-second windows."""
    return generate(20_000, GeneratorConfig(seed=3, rate=200))


def send_bids(driver: TestDriver, events: list[Event]) -> int:
    """Send the bids as `stylus nexmark` writes them (keyed by auction, stamped with `dateTime`); returns the
    newest event time: the watermark a finite stream ends at."""
    for event in events:
        if event.kind == "bid":
            driver.send("nexmark-bid", event.value, key=key_of(event), timestamp=event.value["dateTime"])
    return max(e.value["dateTime"] for e in events)


@pytest.mark.parametrize("watermarks", ["manual", "auto"])
@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("impl", IMPLS)
def test_rows_equal_the_reference(impl: str, query: str, watermarks: Literal["manual", "auto"],
                                  events: list[Event]) -> None:
    driver, output = driver_for(impl, query, watermarks=watermarks)
    with driver:
        end = send_bids(driver, events)
        driver.advance_watermark(end)
        rows = [r.value for r in driver.outputs(output)]
        assert all(driver.late(p) == {"dropped": 0, "redirected": 0, "updated": 0} for p in driver.stages)
        for p in driver.stages:
            assert driver.outputs(f"{driver.pipeline.pipeline}.{p}.dlq") == []
    expected = reference.run(query, bids_of(events), watermark=end)
    assert len(expected) >= (9 if query in reference.WINDOWED else 50)
    assert reference.diff(query, rows, expected) == ""
    if query in reference.WINDOWED:  # each window once, in order of window end
        ends = [r["window_end"] for r in rows]
        assert ends == sorted(ends)


@pytest.mark.parametrize("query", ["q5", "q7"])
@pytest.mark.parametrize("impl", IMPLS)
def test_windows_close_only_when_the_watermark_passes_their_end(impl: str, query: str, events: list[Event]) -> None:
    driver, output = driver_for(impl, query)
    with driver:
        end = send_bids(driver, events)
        assert driver.outputs(output) == []  # manual watermarks: nothing has closed
        first_end = reference.run(query, bids_of(events))[0]["window_end"]
        driver.advance_watermark(first_end - 1)
        assert driver.outputs(output) == []
        driver.advance_watermark(first_end)
        assert {r.value["window_end"] for r in driver.outputs(output)} == {first_end}
        driver.advance_watermark(end)
        rows = [r.value for r in driver.outputs(output)]
    assert reference.diff(query, rows, reference.run(query, bids_of(events), watermark=end)) == ""


def _bid(auction: int, price: int, t: int, bidder: int = 1001) -> dict[str, Any]:
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google", "url": "u", "dateTime": t,
            "extra": ""}


@pytest.mark.parametrize("query", ["q5", "q7"])
@pytest.mark.parametrize("impl", IMPLS)
def test_ties_across_partitions_give_one_row_each(impl: str, query: str) -> None:
    """Auctions 1000 and 1001 bid on 3 times each in partitions 0 and 1, auction 1002 once in partition 2; the
    highest price, 500, bid twice in different partitions."""
    bids = [(0, _bid(1000, 500, 1_000)), (1, _bid(1001, 500, 2_000)), (0, _bid(1000, 20, 3_000)),
            (1, _bid(1001, 30, 4_000)), (2, _bid(1002, 40, 4_500)), (0, _bid(1000, 20, 5_000)),
            (1, _bid(1001, 30, 6_000))]
    driver, output = driver_for(impl, query)
    with driver:
        for partition, bid in bids:
            driver.send("nexmark-bid", bid, key=str(bid["auction"]), timestamp=bid["dateTime"], partition=partition)
        driver.advance_watermark(20_000)
        rows = [r.value for r in driver.outputs(output)]
    expected = reference.run(query, [b for _, b in bids], watermark=20_000)
    assert reference.diff(query, rows, expected) == ""
    if query == "q7":
        assert sorted((r["auction"], r["price"]) for r in rows) == [(1000, 500), (1001, 500)]
    else:  # windows [-5 s, 5 s): 2 each (and 1002 once); [0 s, 10 s): 3 each; [5 s, 15 s): 1 each
        assert sorted((r["window_start"], r["auction"], r["num"]) for r in rows) == [
            (-5_000, 1000, 2), (-5_000, 1001, 2), (0, 1000, 3), (0, 1001, 3), (5_000, 1000, 1), (5_000, 1001, 1)]


@pytest.mark.parametrize("query", ["q5", "q7"])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_crash_after_a_checkpoint_loses_no_window(impl: str, query: str, events: list[Event]) -> None:
    """Exactly-once state, at-least-once output: a crash replays the records after the checkpoint; a window
    may come out twice, none is missing or wrong."""
    half = len(events) // 2
    driver, output = driver_for(impl, query, watermarks="auto")
    with driver:
        send_bids(driver, events[:half])
        driver.checkpoint()
        send_bids(driver, events[half:half + 3_000])
        driver.crash()
        end = send_bids(driver, events[half + 3_000:])
        driver.advance_watermark(end)
        rows = [r.value for r in driver.outputs(output)]
    distinct = list({reference.canonical(query, [r])[0]: r for r in rows}.values())
    assert reference.diff(query, distinct, reference.run(query, bids_of(events), watermark=end)) == ""
