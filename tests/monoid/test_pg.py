"""The merge of monoid deltas into PostgreSQL: combine logic, SQL combiners, atomicity with the offsets,
fencing, concurrent partitions, and agreement with the RocksDB backend. Each test has its own database."""

from __future__ import annotations

import functools
import random
import threading
from functools import reduce
from typing import Any

import psycopg
import pytest

from processors.counters import merge_top
from stylus.core import PartitionTask
from stylus.monoid import DeltaState
from stylus.monoid.backend import RemotePartitionStore
from stylus.monoid.pg import StaleOwner
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.monoid.helpers import (
    engine_for,
    make_backend,
    make_pipeline,
    messages,
    run_checkpointed,
    stored_offsets,
    table_contents,
)
from tests.support.threads import run_concurrently


def _remote(store: Any) -> RemotePartitionStore:
    assert isinstance(store, RemotePartitionStore)
    return store


def test_python_merge_combines_with_stored_values_and_reads_only_touched_keys(pg_dsn: str) -> None:
    pipeline, backend = make_backend(pg_dsn, "processors.counters:TopK", {"top_k": 2})
    store = _remote(backend.open("events", 0))
    for i in range(500):
        store.deltas.add(f"t{i}|0", [[f"e{i}", float(i)]])
    store.save(100)
    assert store.table.rows_read == 0  # all new keys: nothing to read

    store.deltas.add("t1|0", [["x", 5.0]])
    store.deltas.add("t1|0", [["y", 0.5]])
    store.deltas.add("t2|0", [["e2", 1.0]])  # lower than its stored best: stays 2.0
    store.deltas.add("new|0", [["z", 3.0]])
    assert store.deltas.pending["t1|0"] == [["x", 5.0], ["y", 0.5]]
    store.save(104)

    assert store.table.rows_read == 2  # t1 and t2 were locked and read; not the other 498 rows
    table = table_contents(pg_dsn, pipeline)
    assert len(table) == 501
    assert table["t1|0"] == [["x", 5.0], ["e1", 1.0]]
    assert table["t2|0"] == [["e2", 2.0]]
    assert table["new|0"] == [["z", 3.0]]
    assert table["t7|0"] == [["e7", 7.0]]
    assert stored_offsets(pg_dsn) == {("events", 0): 104}
    store.close()
    assert backend.db is None  # the last store closed the connection


@pytest.mark.parametrize("cls", ["ValueSum", "ValueCount", "ValueMax", "ValueMin", "PySum"])
def test_sql_and_python_merges_equal_the_fold_of_combine(pg_dsn: str, cls: str) -> None:
    rng = random.Random(cls)
    pipeline = make_pipeline(f"tests.apps.monoids:{cls}", backend="postgres", dsn=pg_dsn)
    rocks_pipeline = make_pipeline(f"tests.apps.monoids:{cls}")
    records: list[tuple[int, str | None, dict[str, Any]]] = [
        (rng.randrange(2), None, {"k": f"k{rng.randrange(40)}", "n": rng.randint(-1000, 1000)}) for _ in range(3000)
    ]
    msgs = messages("events", records)

    _, backend = make_backend(pg_dsn, f"tests.apps.monoids:{cls}")
    remote = {("events", p): PartitionTask("events", p, backend.open("events", p)) for p in range(2)}
    run_checkpointed(engine_for(pipeline), remote, msgs, every=250)

    local = {("events", p): PartitionTask("events", p, PartitionStore(MemoryKV())) for p in range(2)}
    run_checkpointed(engine_for(rocks_pipeline), local, msgs, every=250)
    local_values: dict[str, Any] = {}
    for task in local.values():  # the RocksDB backend keeps state per partition: fold the partitions
        assert task.state is not None
        processor: Any = engine_for(rocks_pipeline).processor
        for key, value in task.state.items():
            local_values[key] = processor.combine(local_values[key], value) if key in local_values else value

    monoid: Any = engine_for(pipeline).processor
    expected: dict[str, Any] = {}
    for _, _, value in records:
        expected[value["k"]] = monoid.combine(expected.get(value["k"], monoid.zero()),
                                              1 if cls == "ValueCount" else value["n"])
    assert table_contents(pg_dsn, pipeline) == expected
    assert local_values == expected
    offsets = stored_offsets(pg_dsn)
    assert offsets == {("events", p): sum(1 for r in records if r[0] == p) for p in range(2)}


def test_a_failing_merge_leaves_state_and_offsets_untouched(pg_dsn: str) -> None:
    pipeline, backend = make_backend(pg_dsn, "tests.apps.monoids:PySum")
    store = _remote(backend.open("events", 0))
    store.deltas.add("a", 1)
    store.deltas.add("x", 1)
    store.save(2)
    # A trigger makes the final UPDATE fail, after the offsets upsert and the INSERT of the new key ran.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"""
            CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
              $$ BEGIN IF NEW.key = 'x' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse BEFORE UPDATE ON "{store.table.name}" FOR EACH ROW EXECUTE FUNCTION refuse();
        """)
    store.deltas.add("b", 5)
    store.deltas.add("x", 5)
    with pytest.raises(psycopg.errors.RaiseException):
        store.save(4)
    assert table_contents(pg_dsn, pipeline) == {"a": 1, "x": 1}  # "b" was inserted, then rolled back
    assert stored_offsets(pg_dsn) == {("events", 0): 2}
    assert store.stored_offset() == 2 and store.deltas.pending == {"b": 5, "x": 5}  # kept for a retry

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP TRIGGER refuse ON "{store.table.name}"')
    store.save(4)
    assert table_contents(pg_dsn, pipeline) == {"a": 1, "x": 6, "b": 5}
    assert stored_offsets(pg_dsn) == {("events", 0): 4}
    store.close()


def test_a_stale_owner_is_fenced_and_writes_nothing(pg_dsn: str) -> None:
    pipeline, first = make_backend(pg_dsn, "tests.apps.monoids:ValueSum")
    _, second = make_backend(pg_dsn, "tests.apps.monoids:ValueSum")
    old = _remote(first.open("events", 1))
    new = _remote(second.open("events", 1))
    assert old.stored_offset() is None and new.stored_offset() is None
    new.deltas.add("k", 10)
    new.save(10)
    old.deltas.add("k", 3)
    with pytest.raises(StaleOwner):
        old.save(3)
    assert table_contents(pg_dsn, pipeline) == {"k": 10}
    assert stored_offsets(pg_dsn) == {("events", 1): 10}
    reopened = _remote(first.open("events", 1))
    assert reopened.stored_offset() == 10  # the resume offset comes from the database
    for store in (old, new, reopened):
        store.close()


def test_partitions_merging_overlapping_keys_concurrently_lose_no_update(pg_dsn: str) -> None:
    """Python-path merges from 4 partitions (4 connections) racing on 25 shared keys, new and old."""
    pipeline, _ = make_backend(pg_dsn, "tests.apps.monoids:PySum")
    truth: dict[str, int] = {}
    lock = threading.Lock()

    def partition(p: int) -> None:
        _, backend = make_backend(pg_dsn, "tests.apps.monoids:PySum")
        store = _remote(backend.open("events", p))
        rng = random.Random(p)
        for checkpoint in range(30):
            for _ in range(20):
                key, n = f"k{rng.randrange(25)}", rng.randint(1, 9)
                store.deltas.add(key, n)
                with lock:
                    truth[key] = truth.get(key, 0) + n
            store.save((checkpoint + 1) * 20)
        store.close()

    run_concurrently([functools.partial(partition, p) for p in range(4)])  # raises what a partition raised
    assert table_contents(pg_dsn, pipeline) == truth
    assert stored_offsets(pg_dsn) == {("events", p): 600 for p in range(4)}


def test_delta_state_reads_stored_plus_pending_and_refuses_assignment(pg_dsn: str) -> None:
    _, backend = make_backend(pg_dsn, "tests.apps.monoids:PySum")
    store = _remote(backend.open("events", 0))
    state = store.state
    assert isinstance(state, DeltaState)
    state.add("a", 2)
    store.save(1)
    state.add("a", 3)
    state.add("b", 4)
    assert state.get("a") == 5 and state["b"] == 4 and "c" not in state and state.get("c", -1) == -1
    assert dict(state.items()) == {"a": 5, "b": 4}
    with pytest.raises(TypeError, match="deltas"):
        state["a"] = 1
    journal = state.journal()
    state.add("a", 100)
    state.add("z", 1)
    state.rollback()  # a failing record's deltas are undone
    assert state.pending == {"a": 3, "b": 4}
    journal.clear()
    store.close()


def test_a_failing_record_leaves_no_delta_behind(pg_dsn: str) -> None:
    pipeline, backend = make_backend(pg_dsn, "tests.apps.monoids:FailsOnNegative")
    task = PartitionTask("events", 0, backend.open("events", 0))
    engine = engine_for(pipeline)
    handled: list[int] = []
    engine.failures = lambda msg, exc, stage, task: handled.append(msg.offset())
    msgs = messages("events", [(0, None, {"k": "a", "n": n}) for n in (1, -50, 2)])
    engine.process_messages(msgs, lambda t, p: task)
    assert handled == [1]
    assert task.store is not None
    task.store.save(task.next_offset)
    assert table_contents(pg_dsn, pipeline) == {"a": 3}
    task.store.close()


def test_topk_merge_is_associative_and_exact() -> None:
    rng = random.Random(7)
    for _ in range(200):
        parts: list[list[list[Any]]] = [
            [[f"e{rng.randrange(12)}", float(rng.randrange(50))] for _ in range(rng.randrange(6))] for _ in range(4)
        ]
        k = rng.randint(1, 4)
        left = reduce(lambda a, b: merge_top(a, b, k), parts, list[list[Any]]())
        right = merge_top(parts[0], merge_top(parts[1], merge_top(parts[2], parts[3], k), k), k)
        best: dict[str, float] = {}
        for part in parts:
            for event, score in part:
                best[event] = max(score, best.get(event, score))
        exact = [[e, s] for e, s in sorted(best.items(), key=lambda item: (-item[1], item[0]))[:k]]
        assert left == right == exact
