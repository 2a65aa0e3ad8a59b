"""A windowed processor under the driver: timers close windows, late data follows its policy, and a crash
restarts from the checkpoint with each window's result still exactly once (or at least once)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stylus.testing import TestDriver
from tests.testing.pipelines import windowed, write

Factory = Callable[..., TestDriver]


def pay(driver: TestDriver, user: str, ts: int, amount: int) -> None:
    driver.send("payments", {"user": user, "ts": ts, "amount": amount}, key=user, timestamp=ts)


def results(driver: TestDriver) -> list[tuple[Any, ...]]:
    return [(r.value["key"], r.value["start"], r.value["value"], r.value.get("late", False), r.timestamp)
            for r in driver.outputs("sums")]


@pytest.mark.parametrize(("output", "window_two"), [
    ("exactly_once", [("a", 10_000, 14, False, 19_999)]),  # the aborted result replaced by the replay's
    ("at_least_once", [("a", 10_000, 14, False, 19_999)] * 2),  # emitted before the crash and again after
])
def test_windows_close_late_data_goes_aside_and_a_crash_replays(tmp_path: Path, stylus_driver: Factory,
                                                                output: str, window_two: list[Any]) -> None:
    driver = stylus_driver(write(tmp_path, windowed({"state": "exactly_once", "output": output})))
    pay(driver, "a", 1_000, 1)
    pay(driver, "a", 2_000, 2)
    pay(driver, "b", 3_000, 5)
    pay(driver, "a", 12_000, 10)
    assert results(driver) == []  # nothing closed yet
    driver.advance_watermark(10_000)  # the timer at 10 s closes [0, 10 s)
    window_one = [("a", 0, 3, False, 9_999), ("b", 0, 5, False, 9_999)]
    assert sorted(results(driver)) == window_one
    pay(driver, "a", 4_000, 100)  # behind the watermark, its window closed: to the late topic
    late = driver.outputs("win.sum.late")
    assert [r.value["amount"] for r in late] == [100]
    assert late[0].headers["stylus.late.watermark"] == b"10000"
    assert driver.late("sum") == {"dropped": 0, "redirected": 1, "updated": 0}
    driver.checkpoint()

    pay(driver, "a", 15_000, 4)
    driver.advance_watermark(20_000)
    assert sorted(results(driver)) == sorted([*window_one, ("a", 10_000, 14, False, 19_999)])
    driver.crash()  # back to the checkpoint: the 15 s record is read again, the 20 s timer fires again
    assert sorted(results(driver)) == sorted([*window_one, *window_two])
    assert driver.watermark("sum") == 20_000
    assert driver.state("sum", 0) == driver.state("sum", 1) == {}  # closed windows are deleted
    assert len(driver.outputs("win.sum.late")) == 1  # before the checkpoint: not replayed


def test_late_records_update_a_retained_window(tmp_path: Path, stylus_driver: Factory) -> None:
    driver = stylus_driver(write(tmp_path, windowed({"state": "exactly_once", "output": "at_least_once"},
                                                    late="update")))
    pay(driver, "a", 1_000, 1)
    driver.advance_watermark(10_000)
    pay(driver, "a", 9_000, 2)  # late, its window retained one window long: corrected
    driver.advance_watermark(20_000)  # retention over
    pay(driver, "a", 9_500, 4)  # too late to correct: nothing
    assert results(driver) == [("a", 0, 1, False, 9_999), ("a", 0, 3, True, 9_999)]


def test_the_same_input_gives_the_same_outputs(tmp_path: Path, stylus_driver: Factory) -> None:
    def run() -> tuple[list[Any], ...]:
        driver = stylus_driver(write(tmp_path, windowed({"state": "exactly_once", "output": "exactly_once"})))
        for i in range(200):
            pay(driver, f"u{i % 7}", (i * 397) % 30_000, i)
            if i % 50 == 49:
                driver.advance_watermark(i * 100)
                driver.checkpoint()
        driver.send("payments", b"\xff not json", key="u1")  # a dead letter (decode)
        driver.crash()
        driver.advance_watermark(40_000)
        return (driver.outputs("sums"), driver.outputs("win.sum.late"), driver.outputs("win.sum.dlq"),
                [driver.state("sum", p) for p in range(2)])

    first, second = run(), run()
    assert first == second
    assert len(first[0]) > 20 and len(first[1]) > 0 and len(first[2]) == 1


def test_an_idle_partition_stops_holding_the_watermark_once_the_clock_passes_its_timeout(
        tmp_path: Path, stylus_driver: Factory) -> None:
    doc = windowed({"state": "exactly_once", "output": "at_least_once"})
    doc["processors"]["sum"]["event_time"].update({"allowed_lateness": "1s", "idle_timeout": "30s"})
    driver = stylus_driver(write(tmp_path, doc), watermarks="auto")
    for ts in (1_000, 5_000, 12_000):  # all on one partition: the other has nothing
        driver.send("payments", {"user": "a", "ts": ts, "amount": 1}, key="a", timestamp=ts, partition=0)
    assert results(driver) == []  # partition 1 holds the watermark back
    driver.advance_clock(29_000)
    assert results(driver) == []
    driver.advance_clock(1_000)  # idle for its timeout: the watermark follows partition 0, 1 s behind it
    assert driver.watermark("sum") == 11_000
    assert results(driver) == [("a", 0, 2, False, 9_999)]


@pytest.mark.parametrize("crash_at", [None, 30, 55, 99])
def test_exactly_once_windows_read_committed_are_the_same_whatever_the_crash(
        tmp_path: Path, stylus_driver: Factory, crash_at: int | None) -> None:
    doc = windowed({"state": "exactly_once", "output": "exactly_once"})
    doc["processors"]["sum"]["event_time"]["allowed_lateness"] = "2s"
    driver = stylus_driver(write(tmp_path, doc), watermarks="auto")  # windows close as the data moves on
    for i in range(100):
        pay(driver, USERS[i % 5], i * 300 + (i % 3) * 700, 1)  # 30 s of event time, a little out of order
        if i % 20 == 19:
            driver.checkpoint()
        if i == crash_at:
            driver.crash()
    driver.checkpoint()
    committed = [(r.value["key"], r.value["start"], r.value["value"]) for r in driver.outputs("sums", committed=True)]
    assert sorted(committed) == sorted(EXPECTED_SUMS)


USERS = ["alice", "bob", "carol", "dave", "frank"]  # on both partitions of `payments`


def _expected_sums() -> list[tuple[str, int, int]]:
    sums: dict[tuple[str, int], int] = {}
    for i in range(100):
        ts = i * 300 + (i % 3) * 700
        if ts < 20_000:  # windows up to 20 s close: the watermark ends near 29.7 s - 2 s
            window = (USERS[i % 5], ts - ts % 10_000)
            sums[window] = sums.get(window, 0) + 1
    return [(user, start, n) for (user, start), n in sums.items()]


EXPECTED_SUMS = _expected_sums()
