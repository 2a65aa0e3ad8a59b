"""Lookup joins on the real broker: `stylus run` processes looking tables up, against a plain-Python join."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import PipelineFactory
from tests.support.chaos import Rec, produce_now
from tests.support.cli import run_stylus
from tests.support.kafka import read_json
from tests.tables.helpers import START, by_i, events, lookup_doc, produce_rows, python_join, rows


def _run(path: Path, bootstrap: str) -> str:
    result = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


@pytest.mark.parametrize("placement", ["global", "partitioned"])
def test_a_lookup_join_equals_a_plain_python_join(bootstrap: str, pipeline_factory: PipelineFactory,
                                                  placement: str) -> None:
    path, pipeline = pipeline_factory(lookup_doc(placement))
    dims, events_topic, joined = (pipeline.tables["dims"].topic, *pipeline.processors["enricher"].inputs,
                                  *pipeline.processors["enricher"].outputs)
    table = rows(50)
    produce_rows(bootstrap, dims, {k: v for k, v in table.items() if k != "k7"})  # k7: no row
    table.pop("k7")
    records = events(2000, 60)  # keys k50..k59 have no row either
    produce_now(bootstrap, events_topic, records)
    _run(path, bootstrap)
    out = read_json(bootstrap, joined)
    assert len(out) == len(records)
    assert by_i(out) == python_join(records, table)
    state = Path(pipeline.processors["enricher"].state.dir) / pipeline.pipeline / "enricher" / "tables"
    expected = ["dims"] if placement == "global" else [f"dims-{p}" for p in range(4)]
    assert sorted(p.name for p in state.iterdir()) == expected  # one copy, or one per held partition


def test_no_record_is_processed_before_its_table_is_caught_up(bootstrap: str,
                                                              pipeline_factory: PipelineFactory) -> None:
    """A large table and a small input whose keys are the table's *last* rows: a lookup made while the table
    was still loading would miss them. And after a restart, rows changed while the processor was down are
    applied before the input that follows them (the copy resumes from its offsets, then reads to the end)."""
    path, pipeline = pipeline_factory(lookup_doc("global", partitions=2, table_partitions=1))
    dims, events_topic, joined = (pipeline.tables["dims"].topic, *pipeline.processors["enricher"].inputs,
                                  *pipeline.processors["enricher"].outputs)
    table = rows(30_000)
    produce_rows(bootstrap, dims, table)
    last = [f"k{n}" for n in range(29_990, 30_000)]
    first = [Rec(last[i % 10], {"i": i}, START + i) for i in range(200)]
    produce_now(bootstrap, events_topic, first)
    _run(path, bootstrap)
    out = read_json(bootstrap, joined)
    assert by_i(out) == python_join(first, table)

    changed = {k: {"name": "changed", "v": 1} for k in last}
    produce_rows(bootstrap, dims, changed)  # while no processor runs
    second = [Rec(last[i % 10], {"i": 1000 + i}, START + 1000 + i) for i in range(200)]
    produce_now(bootstrap, events_topic, second)
    log = _run(path, bootstrap)
    out = read_json(bootstrap, joined)
    assert by_i(out) == python_join(first, table) | python_join(second, {**table, **changed})
    applied = [int(n) for n in re.findall(r"caught up \(\d+ partitions, (\d+) records applied\)", log)]
    assert applied and max(applied) == len(changed), log[-2000:]  # the restart read only what changed


def test_a_tombstone_deletes_and_the_ttl_expires(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    """A tombstone removes its key (from the RocksDB copy too, across a restart); an entry older than the TTL,
    against the looking-up record's timestamp, reads as absent."""
    path, pipeline = pipeline_factory(lookup_doc("partitioned", partitions=2, table={"ttl": "1m"}))
    dims, events_topic, joined = (pipeline.tables["dims"].topic, *pipeline.processors["enricher"].inputs,
                                  *pipeline.processors["enricher"].outputs)
    table = rows(10)
    produce_rows(bootstrap, dims, table, timestamp=START)
    fresh = [Rec(f"k{n}", {"i": n}, START + 59_000) for n in range(10)]  # within the minute
    produce_now(bootstrap, events_topic, fresh)
    _run(path, bootstrap)
    assert by_i(read_json(bootstrap, joined)) == python_join(fresh, table)

    produce_rows(bootstrap, dims, {"k3": None, "k4": None}, timestamp=START + 1)
    later = [Rec(f"k{n}", {"i": 100 + n}, START + 59_000) for n in range(10)]
    stale = [Rec(f"k{n}", {"i": 200 + n}, START + 61_000) for n in range(10)]  # past the TTL of every row
    produce_now(bootstrap, events_topic, later + stale)
    _run(path, bootstrap)
    kept = {k: v for k, v in table.items() if k not in ("k3", "k4")}
    expected = python_join(fresh, table) | python_join(later, kept) | python_join(stale, {})
    assert by_i(read_json(bootstrap, joined)) == expected
