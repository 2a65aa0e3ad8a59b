"""A lookup join under exactly-once state and output, across a SIGKILL and restart and across a rebalance to a
second instance: every input's joined output appears exactly once, equal to a plain-Python join."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.conftest import PipelineFactory
from tests.support.chaos import Feeder, Instance, wait_until
from tests.support.kafka import read_json
from tests.tables.helpers import by_i, events, lookup_doc, other_machine, produce_rows, python_join, rows

EXACT = {"state": "exactly_once", "output": "exactly_once"}
RECORDS = 6000
KEYS = 40


def _check_exact(outputs: list[dict[str, Any]], records: list[Any], table: dict[str, Any]) -> None:
    repeated = [i for i, n in Counter(o["i"] for o in outputs).items() if n > 1]
    assert not repeated, f"{len(repeated)} inputs joined more than once: {repeated[:10]}"
    assert by_i(outputs) == python_join(records, table)
    counts: dict[str, list[int]] = {}
    for out in outputs:
        counts.setdefault(out["key"], []).append(out["count"])
    truth = Counter(r.key for r in records)
    assert all(sorted(counts[k]) == list(range(1, n + 1)) for k, n in truth.items())  # state exact too


def test_exactly_once_lookup_join_across_a_sigkill_and_restart(bootstrap: str, pipeline_factory: PipelineFactory,
                                                               tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(lookup_doc("global", partitions=2, table_partitions=2, semantics=EXACT))
    dims, source, joined = (pipeline.tables["dims"].topic, *pipeline.processors["enricher"].inputs,
                            *pipeline.processors["enricher"].outputs)
    table = rows(KEYS - 5)  # the last five keys have no row
    produce_rows(bootstrap, dims, table)
    records = events(RECORDS, KEYS)
    feeder = Feeder(bootstrap, source, records, rate=600)  # input keeps coming: checkpoints with progress
    # killed between the commit of its third transaction and applying it (T3-T4), with the copy of `dims`
    # and the partitions' state on disk
    killed = Instance(path, tmp_path / "a.log", bootstrap, name="a", env={"STYLUS_FAULT_KILL_AFTER": "txn.commit:3"})
    killed.start()
    try:
        wait_until(lambda: killed.says("enricher: assigned"), 60, "A's assignment", explain=killed.tail)
        feeder.start()  # from here on, 10 s of input: its third checkpoint with progress comes well before the end
        assert killed.wait(120) not in (None, 0), killed.tail()
        partial = read_json(bootstrap, joined)
        assert 0 < len(partial) < RECORDS, len(partial)
        feeder.join_checked(60)
        again = Instance(path, tmp_path / "a.log", bootstrap, name="a2").start(exit_when_idle=2)
        assert again.wait(180) == 0, again.tail()
    finally:
        killed.kill()
    _check_exact(read_json(bootstrap, joined), records, table)


def test_exactly_once_lookup_join_across_a_rebalance_to_a_second_instance(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """A partitioned table: B, another machine, takes over half of the input partitions while input flows;
    their table partitions move with them (B's copy is caught up before B processes their records)."""
    path_a, pipeline = pipeline_factory(lookup_doc("partitioned", partitions=4, semantics=EXACT))
    path_b = other_machine(path_a, tmp_path / "state-b")
    dims, source, joined = (pipeline.tables["dims"].topic, *pipeline.processors["enricher"].inputs,
                            *pipeline.processors["enricher"].outputs)
    table = rows(KEYS - 5)
    produce_rows(bootstrap, dims, table)
    records = events(RECORDS, KEYS)
    feeder = Feeder(bootstrap, source, records, rate=800)
    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    try:
        a.start()
        feeder.start()
        wait_until(lambda: len(read_json(bootstrap, joined)) > RECORDS // 5, 60, "A's first outputs",
                   explain=a.tail)
        b.start()
        wait_until(lambda: b.says("tables caught up") and b.says("enricher: assigned"), 60, "B's assignment",
                   explain=b.tail)
        feeder.join_checked(60)
        wait_until(lambda: len(read_json(bootstrap, joined)) >= RECORDS, 120, "every input joined",
                   explain=lambda: a.tail() + b.tail())
        # looked at while both run: once one of them leaves, the other takes (and copies) every partition
        held_b = sorted(p.name for p in (tmp_path / "state-b" / pipeline.pipeline / "enricher" / "tables").iterdir())
        assert b.terminate() == 0 and a.terminate() == 0
    finally:
        a.kill()
        b.kill()
    _check_exact(read_json(bootstrap, joined), records, table)
    assert held_b and len(held_b) < 4, held_b  # B holds the copies of the partitions it took, not all of them
