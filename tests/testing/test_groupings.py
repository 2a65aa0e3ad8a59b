"""The TestDriver honours groupings as the runtime does: `all` copies into every partition, `global` goes to
partition 0, `ctx.emit(partition=n)` wins, an impossible partition dead-letters the record; a downstream
processor reading an `all` topic gets every record once per partition (docs/groupings.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stylus.testing import TestDriver
from tests.runtime.test_partitioning import java_partition
from tests.testing.pipelines import write

Factory = Callable[..., TestDriver]


def doc(output: dict[str, str]) -> dict[str, Any]:
    return {
        "pipeline": "grp",
        "topics": {"src": {"partitions": 1}, "control": {"partitions": 3}, "words": {"partitions": 3},
                   "single": {"partitions": 2}, "counts": {"partitions": 1}},
        "processors": {
            "router": {"class": "tests.apps.grouping:Router", "inputs": ["src"], "semantics": output,
                       "outputs": [{"topic": "control", "grouping": "all"}, "words",
                                   {"topic": "single", "grouping": "global"}]},
            "reader": {"class": "tests.apps.counting:WordCount", "inputs": ["control"], "outputs": ["counts"]},
        },
    }


@pytest.mark.parametrize("output", [{"output": "at_least_once"},
                                    {"state": "at_most_once", "output": "at_most_once"},
                                    {"state": "exactly_once", "output": "exactly_once"}])
def test_the_driver_honours_every_grouping(tmp_path: Path, stylus_driver: Factory, output: dict[str, str]) -> None:
    driver = stylus_driver(write(tmp_path, doc(output)), processors=["router"])
    driver.send("src", {"id": 1}, key="a")  # default output: all
    driver.send("src", {"id": 2, "topic": "words"}, key="b")  # by key
    driver.send("src", {"id": 3, "topic": "single"}, key="c")  # global
    driver.send("src", {"id": 4, "topic": "words", "partition": 0}, key="b")  # direct
    driver.send("src", {"id": 5, "topic": "control", "partition": 2}, key="d")  # direct wins over all
    driver.send("src", {"id": 6, "topic": "single", "partition": 1}, key="e")  # and over global
    driver.send("src", {"id": 7, "topic": "words", "partition": 3}, key="x")  # no partition 3
    driver.checkpoint()

    def where(topic: str) -> list[tuple[int, int]]:
        return [(r.partition, r.value["id"]) for r in driver.outputs(topic, committed=True)]

    assert where("control") == [(0, 1), (1, 1), (2, 1), (2, 5)]
    assert where("words") == [(java_partition(b"b", 3), 2), (0, 4)]
    assert where("single") == [(0, 3), (1, 6)]
    [dead] = driver.outputs("grp.router.dlq")
    assert dead.value["id"] == 7
    assert "`words`, which has 3 partitions (0-2)" in dead.headers["stylus.error"].decode()


def test_a_reader_of_an_all_topic_sees_each_record_once_per_partition(tmp_path: Path,
                                                                      stylus_driver: Factory) -> None:
    driver = stylus_driver(write(tmp_path, doc({"output": "at_least_once"})))
    driver.send("src", {"id": 1, "word": "stop"}, key="stop")
    assert [r.value for r in driver.outputs("counts")] == [{"word": "stop", "count": n} for n in (1, 1, 1)]
    assert [driver.state("reader", p) for p in range(3)] == [{"stop": 1}] * 3  # every reader instance has it
