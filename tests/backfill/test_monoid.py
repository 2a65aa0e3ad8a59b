"""The monoid path of a backfill (docs/backfill.md): a pure MonoidProcessor runs per chunk, and its per-chunk
states are merged by key with its own `combine` after a shuffle. The result must equal what the stream
built record by record; `--seed-state` with `state.backend: postgres` writes it into the processor's
table with the offsets, and the stream continues from there without counting anything twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.runner import backfill
from stylus.backfill.seed import StateExists
from stylus.kafka.admin import create_topics
from tests.backfill.test_trending_equivalence import stream_kv
from tests.monoid.conftest import pg_dsn  # noqa: F401 - the fixture: a fresh database per test
from tests.monoid.helpers import stored_offsets, table_contents
from tests.support.cli import run_stylus
from tests.support.kafka import produce

EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
PARTITIONS = 3
RECORDS = 1500
SEMANTICS = {"state": "exactly_once", "output": "at_least_once"}


def doc(dsn: str) -> dict[str, Any]:
    def proc(cls: str, config: dict[str, Any] | None = None, **state: Any) -> dict[str, Any]:
        return {"class": cls, "inputs": ["events"], "config": config or {}, "semantics": SEMANTICS,
                "checkpoint": {"interval": "500ms"}, "state": state}

    return {
        "topics": {"events": {"partitions": PARTITIONS}},
        "processors": {
            "count": proc("processors.counters:EventCounter", {"window": "10s", "key_field": "k"}),  # SQL count
            "pysum": proc("tests.apps.monoids:PySum"),  # Python combine
            "pgsum": proc("tests.apps.monoids:PySum", backend="postgres", dsn=dsn),
        },
    }


def test_monoid_backfill_equals_stream_and_seeds_postgres(bootstrap: str, pipeline_factory: Any, spark: Any,
                                                          pg_dsn: str, tmp_path: Path) -> None:  # noqa: F811
    path, pipeline = pipeline_factory(doc(pg_dsn))
    (events,) = pipeline.topics
    create_topics(bootstrap, dict(pipeline.topics))
    values: list[dict[str, Any]] = [{"k": f"k{i % 17}", "n": i % 7 - 2, "ts": 1_700_000_000_000 + i * 97}
                                    for i in range(RECORDS)]
    produce(bootstrap, events, [(f"r{i}", v) for i, v in enumerate(values)])
    expected: Counter[str] = Counter()
    for v in values:
        expected[v["k"]] += v["n"]
    done = run_stylus("run", str(path), "--processor", "count", "--processor", "pysum", "--exit-when-idle", "1",
                      bootstrap=bootstrap, timeout=180)
    assert done.returncode == 0, done.stderr

    for name in ("count", "pysum"):
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST, chunk_size=128)
        assert len(plan.units) > 3 * PARTITIONS  # per chunk, not per partition: the states must be merged
        result = run_plan(spark, pipeline, name, plan, return_state=True)
        assert result.mode == "monoid" and result.records == RECORDS
        for p in range(PARTITIONS):
            mine = {k: v for k, v in result.states[(events, p)].items() if k.startswith(b"s")}
            assert mine == stream_kv(pipeline, name, events, p), (name, p)
        if name == "pysum":
            total: Counter[str] = Counter()
            for state in result.user_state().values():
                total.update(state)
            assert total == expected

    # Seed the PostgreSQL table from the first part of the input, then let the stream do the rest.
    half = backfill(spark, pipeline, "pgsum", bootstrap, EARLIEST, parse_bound("offset:200", default="latest"),
                    seed=True, chunk_size=64)
    assert half.records == 200 * PARTITIONS
    assert stored_offsets(pg_dsn) == {(events, p): 200 for p in range(PARTITIONS)}
    seeded = table_contents(pg_dsn, pipeline, "pgsum")
    merged: Counter[str] = Counter()
    for state in half.user_state().values():
        merged.update(state)
    assert seeded == {k: v for k, v in merged.items()}  # partitions merged into one table, zero sums kept
    with pytest.raises(StateExists):
        backfill(spark, pipeline, "pgsum", bootstrap, EARLIEST, LATEST, seed=True)
    done = run_stylus("run", str(path), "--processor", "pgsum", "--exit-when-idle", "1", bootstrap=bootstrap,
                      timeout=180)
    assert done.returncode == 0, done.stderr
    final = table_contents(pg_dsn, pipeline, "pgsum")
    assert final == {k: v for k, v in expected.items()}
    assert sum(o or 0 for o in stored_offsets(pg_dsn).values()) == RECORDS
