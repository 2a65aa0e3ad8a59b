"""The Nexmark joins q3, q4 and q8 on `stylus.testing.TestDriver`, both implementations: the hand-written processors
(processors/nexmark.py, pipelines/nexmark/python.yaml) and the SQL apps (pipelines/nexmark/q3.sql, q4.sql, q8.sql).
Their rows equal the plain-Python reference over generated persons, auctions and bids; windows close with the
watermark; a crash loses no window; q3's lookup sees the person table as loaded."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import pytest
from confluent_kafka import murmur2

from stylus.nexmark import Event, GeneratorConfig, generate, key_of, reference
from stylus.testing import TestDriver
from tests.nexmark.helpers import NEXMARK, Implementations, nexmark_driver

TOPICS = {"person": "nexmark-person", "auction": "nexmark-auction", "bid": "nexmark-bid"}
READS = {"q3": ("person", "auction"), "q4": ("auction", "bid"), "q8": ("person", "auction")}

IMPLEMENTATIONS: Implementations = {
    "python": (NEXMARK / "python.yaml", {
        "q3": (["q3"], "nexmark-q3-py"),
        "q4": (["q4-keyed", "q4-winning", "q4"], "nexmark-q4-py"),
        "q8": (["q8-keyed", "q8"], "nexmark-q8-py"),
    }),
    "sql": (NEXMARK / "sql.yaml", {query: ([query], f"nexmark_{query}") for query in ("q3", "q4", "q8")}),
}
CASES = [(impl, query) for impl in sorted(IMPLEMENTATIONS) for query in sorted(READS)]
WINDOWED = [(impl, query) for impl, query in CASES if query in reference.WINDOWED_JOINS]


driver_for = partial(nexmark_driver, IMPLEMENTATIONS)


@pytest.fixture(scope="module")
def events() -> list[Event]:
    """20,000 events at 200 per second: 100 s of event time, 400 persons, 1,200 auctions, 18,400 bids."""
    return generate(20_000, GeneratorConfig(seed=3, rate=200))


def send(driver: TestDriver, query: str, events: list[Event]) -> int:
    """Send what `query` reads as `stylus nexmark` writes it (keyed, stamped with `dateTime`), in event order; for
    q3 the persons first, as a table loaded before its stream (a seller may be created a few ids after its
    auction: a lookup made before would miss it). Returns the newest event time."""
    kinds = READS[query]
    ordered = sorted(events, key=lambda e: e.kind != "person") if query == "q3" else events
    for event in ordered:
        if event.kind in kinds:
            driver.send(TOPICS[event.kind], event.value, key=key_of(event), timestamp=event.value["dateTime"])
    return max(e.value["dateTime"] for e in events)


def closing(driver: TestDriver, query: str, at: int) -> None:
    """One event at `at` on every partition of each topic `query` reads (keys chosen for it, ids no generated
    event has, pairing with nothing): with `watermarks="auto"`, every source partition's watermark passes every
    window of the data, as a stream's does when newer events arrive, and the windows of these never close."""
    for kind in READS[query]:
        partitions = driver.pipeline.topics[TOPICS[kind]].partitions
        ids: dict[int, int] = {}
        candidate = 10**9
        while len(ids) < partitions:
            ids.setdefault(murmur2(str(candidate).encode(), partitions), candidate)
            candidate += 1
        for n in ids.values():
            value = {"person": {"id": n, "name": "z", "emailAddress": "z", "creditCard": "z", "city": "z",
                                "state": "z", "dateTime": at, "extra": ""},
                     "auction": {"id": n, "itemName": "z", "description": "z", "initialBid": 1, "reserve": 1,
                                 "dateTime": at, "expires": at, "seller": 1, "category": -1, "extra": ""},
                     "bid": {"auction": n + 1, "bidder": 1, "price": 1, "channel": "z", "url": "z", "dateTime": at,
                             "extra": ""}}[kind]
            driver.send(TOPICS[kind], value, key=str(n), timestamp=at)


def finish(driver: TestDriver, query: str, end: int, watermarks: str) -> int:
    """Close the windows of the data and let every stage's output through; returns the watermark the windows
    closed by. Manual watermarks are set to `end` (the newest event time); automatic ones follow closing events
    100 s later, which close every window of the data. Checkpoints release the exactly-once output between
    stages (and, with it, the watermark marks of the stages that write it)."""
    if watermarks == "manual":
        driver.advance_watermark(end)
    else:
        end += 100_000
        closing(driver, query, end)
    for _ in range(4):  # one per exactly-once hop
        driver.checkpoint()
    return end


def expected(query: str, events: list[Event], watermark: int | None) -> list[dict[str, Any]]:
    parts = reference.split(events)
    return reference.run(query, parts["bid"], watermark=watermark, persons=parts["person"],
                         auctions=parts["auction"])


@pytest.mark.parametrize("watermarks", ["manual", "auto"])
@pytest.mark.parametrize(("impl", "query"), CASES)
def test_rows_equal_the_reference(impl: str, query: str, watermarks: Literal["manual", "auto"],
                                  events: list[Event]) -> None:
    driver, output = driver_for(impl, query, watermarks=watermarks)
    with driver:
        end = finish(driver, query, send(driver, query, events), watermarks)
        rows = [r.value for r in driver.outputs(output)]
        for p in driver.stages:
            assert driver.outputs(f"{driver.pipeline.pipeline}.{p}.dlq") == []
            if driver.pipeline.processors[p].event_time is not None:
                assert driver.late(p) == {"dropped": 0, "redirected": 0, "updated": 0}
    want = expected(query, events, end)
    assert len(want) >= {"q3": 100, "q4": 40, "q8": 40}[query]
    assert reference.diff(query, rows, want) == ""


@pytest.mark.parametrize(("impl", "query"), WINDOWED)
def test_windows_close_only_when_the_watermark_passes_their_end(impl: str, query: str,
                                                                 events: list[Event]) -> None:
    driver, output = driver_for(impl, query)
    with driver:
        end = send(driver, query, events)
        assert driver.outputs(output) == []  # manual watermarks: nothing has closed
        first_end = expected(query, events, None)[0]["window_end"]
        driver.advance_watermark(first_end - 1)
        assert driver.outputs(output) == []
        driver.advance_watermark(first_end)
        assert {r.value["window_end"] for r in driver.outputs(output)} == {first_end}
        driver.advance_watermark(end)
        rows = [r.value for r in driver.outputs(output)]
    assert reference.diff(query, rows, expected(query, events, end)) == ""


@pytest.mark.parametrize(("impl", "query"), WINDOWED)
def test_a_crash_after_a_checkpoint_loses_no_window(impl: str, query: str, events: list[Event]) -> None:
    """Exactly-once state (and exactly-once between the stages), at-least-once output: a crash replays the
    records after the checkpoint; a window may come out twice, none is missing or wrong."""
    half = len(events) // 2
    driver, output = driver_for(impl, query, watermarks="auto")
    with driver:
        send(driver, query, events[:half])
        driver.checkpoint()
        send(driver, query, events[half:half + 3_000])
        driver.crash()
        end = finish(driver, query, send(driver, query, events[half + 3_000:]), "auto")
        rows = [r.value for r in driver.outputs(output)]
    distinct = list({reference.canonical(query, [r])[0]: r for r in rows}.values())
    assert reference.diff(query, distinct, expected(query, events, end)) == ""


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_q3_joins_the_person_table_as_it_is_when_the_auction_is_processed(impl: str) -> None:
    """A seller created after the auction is not found (the lookup reads the table as applied so far); a person
    who moves to another state joins the auctions after the move with the new state."""
    person = {"id": 1000, "name": "Ann", "emailAddress": "a", "creditCard": "1", "city": "Boise", "state": "ID",
              "dateTime": 1_000, "extra": ""}

    def auction(id_: int, seller: int, t: int) -> dict[str, Any]:
        return {"id": id_, "itemName": "i", "description": "d", "initialBid": 1, "reserve": 2, "dateTime": t,
                "expires": t + 10, "seller": seller, "category": 10, "extra": ""}

    driver, output = driver_for(impl, "q3")
    with driver:
        driver.send("nexmark-auction", auction(2000, 1000, 500), key="2000", timestamp=500)  # before its seller
        driver.send("nexmark-person", person, key="1000", timestamp=1_000)
        driver.send("nexmark-auction", auction(2001, 1000, 1_500), key="2001", timestamp=1_500)
        driver.send("nexmark-person", {**person, "city": "Kent", "state": "WA", "dateTime": 2_000}, key="1000",
                    timestamp=2_000)
        driver.send("nexmark-auction", auction(2002, 1000, 2_500), key="2002", timestamp=2_500)  # WA: not kept
        driver.send("nexmark-person", {**person, "city": "Bend", "state": "OR", "dateTime": 3_000}, key="1000",
                    timestamp=3_000)
        driver.send("nexmark-auction", auction(2003, 1000, 3_500), key="2003", timestamp=3_500)
        rows = [r.value for r in driver.outputs(output)]
    assert rows == [{"name": "Ann", "city": "Boise", "state": "ID", "id": 2001},
                    {"name": "Ann", "city": "Bend", "state": "OR", "id": 2003}]
