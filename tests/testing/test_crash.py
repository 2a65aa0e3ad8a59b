"""`checkpoint` and `crash` follow each semantics pair's checkpoint ordering (docs/semantics.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stylus.testing import TestDriver
from tests.testing.pipelines import word_count, write

Factory = Callable[..., TestDriver]

# (state, output), where the crash interrupts the checkpoint (None: between checkpoints),
# then: the counts emitted (in order, as a consumer reads them), the committed ones, the state after the restart
CASES = [
    # between checkpoints every pair replays the two records from the saved state; output differs
    ("at_least_once", "at_least_once", None, [1, 2, 3, 2, 3], [1, 2, 3, 2, 3], 3),  # duplicates
    ("exactly_once", "at_least_once", None, [1, 2, 3, 2, 3], [1, 2, 3, 2, 3], 3),
    ("at_most_once", "at_most_once", None, [1, 2, 3], [1], 3),  # held output dropped, emitted again held
    ("exactly_once", "at_most_once", None, [1, 2, 3], [1], 3),
    ("exactly_once", "exactly_once", None, [1, 2, 3], [1], 3),  # the open transaction aborted
    # inside a checkpoint: the crash points that tell the pairs apart
    ("at_least_once", "at_least_once", "state", [1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 5),  # state counts twice
    ("exactly_once", "at_least_once", "emit", [1, 2, 3, 2, 3], [1, 2, 3, 2, 3], 3),
    ("at_most_once", "at_most_once", "offsets", [1], [1], 1),  # offsets moved, state did not: lost
    ("at_most_once", "at_most_once", "state", [1], [1], 3),  # state saved, held output lost
    ("exactly_once", "at_most_once", "state+offsets", [1], [1], 3),
]


@pytest.mark.parametrize(("state", "output", "after", "emitted", "committed", "final"), CASES)
def test_a_crash_keeps_what_the_ordering_saved(tmp_path: Path, stylus_driver: Factory, state: str, output: str,
                                               after: str | None, emitted: list[int], committed: list[int],
                                               final: int) -> None:
    driver = stylus_driver(write(tmp_path, word_count({"state": state, "output": output})))
    driver.send("words", "w", key="a")
    driver.checkpoint()
    driver.send("words", "w", key="a")
    driver.send("words", "w", key="a")
    driver.crash(after=after)
    assert [r.value["count"] for r in driver.outputs("counts")] == emitted
    assert [r.value["count"] for r in driver.outputs("counts", committed=True)] == committed
    assert driver.state("wc") == {"a": final}
    driver.checkpoint()  # whatever the restart emitted is released or committed now
    assert driver.outputs("counts", committed=True) == driver.outputs("counts")


def test_exactly_once_output_is_committed_by_the_checkpoint(tmp_path: Path, stylus_driver: Factory) -> None:
    driver = stylus_driver(write(tmp_path, word_count({"state": "exactly_once", "output": "exactly_once"})))
    driver.send("words", "w", key="a")
    assert driver.outputs("counts", committed=True) == []
    driver.checkpoint()
    assert [r.value["count"] for r in driver.outputs("counts", committed=True)] == [1]
    driver.crash()  # nothing since the checkpoint: nothing replayed, nothing lost
    assert [r.value["count"] for r in driver.outputs("counts")] == [1]
    assert driver.state("wc") == {"a": 1}
