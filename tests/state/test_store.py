"""PartitionStore on both KV backends: buffered writes land atomically with the offset, timers persist,
a staged checkpoint round-trips."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stylus.state.kv import KV, MemoryKV, RocksKV
from stylus.state.store import PartitionStore, decode_changes, encode_changes


@pytest.fixture(params=["rocksdb", "memory"])
def make_kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    memory = MemoryKV()

    def make() -> KV:
        return RocksKV(tmp_path / "db") if request.param == "rocksdb" else memory

    yield make


def test_writes_are_invisible_to_the_kv_until_saved(make_kv) -> None:
    store = PartitionStore(make_kv())
    store.state["a"] = {"n": 1}
    store.state["b"] = [1, 2]
    assert store.state["a"] == {"n": 1} and "b" in store.state and len(store.state) == 2
    store.close()
    reopened = PartitionStore(make_kv())
    assert dict(reopened.state.items()) == {} and reopened.stored_offset() is None
    reopened.state["a"] = 5
    reopened.save(42)
    reopened.close()
    again = PartitionStore(make_kv())
    assert dict(again.state.items()) == {"a": 5} and again.stored_offset() == 42


def test_delete_and_iteration_merge_buffer_and_disk(make_kv) -> None:
    store = PartitionStore(make_kv())
    for key in ("x", "y", "z"):
        store.state[key] = key.upper()
    store.save(3)
    del store.state["y"]
    store.state["w"] = "W"
    assert sorted(store.state) == ["w", "x", "z"]
    assert store.state.get("y") is None and "y" not in store.state
    with pytest.raises(KeyError):
        del store.state["nope"]
    with pytest.raises(TypeError):
        store.state[1] = "keys are str"  # type: ignore[index]
    store.save(4)
    store.close()
    assert dict(PartitionStore(make_kv()).state.items()) == {"w": "W", "x": "X", "z": "Z"}


def test_offsets_alone_do_not_save_state(make_kv) -> None:
    """At-most-once state saves offsets first: a crash right after leaves the state behind them."""
    store = PartitionStore(make_kv())
    store.state["k"] = 1
    store.save(10, state=False)
    store.close()
    reopened = PartitionStore(make_kv())
    assert reopened.stored_offset() == 10 and dict(reopened.state.items()) == {}


def test_timers_persist_and_fire_in_order(make_kv) -> None:
    store = PartitionStore(make_kv())
    store.timers.add("b", 200)
    store.timers.add("a", 100)
    store.timers.add("a", 100)  # set semantics
    store.timers.add("c", 300)
    store.save(1)
    store.close()
    reopened = PartitionStore(make_kv())
    assert len(reopened.timers) == 3
    assert reopened.timers.pop_due(250) == [(100, "a"), (200, "b")]
    reopened.save(2)
    reopened.close()
    assert PartitionStore(make_kv()).timers.pop_due(10**12) == [(300, "c")]


def test_staged_checkpoint_applies_or_discards(make_kv) -> None:
    store = PartitionStore(make_kv())
    store.state["n"] = 7
    changes = store.state_changes()
    store.stage(99, changes, "owner-1")
    assert store.staged() == (99, changes, "owner-1")
    store.apply_staged(99, changes)
    assert store.staged() is None and store.stored_offset() == 99
    store.stage(120, {b"snope": b"1"}, "owner-2")
    store.discard_staged()
    assert store.staged() is None and store.stored_offset() == 99 and dict(store.state.items()) == {"n": 7}


def test_change_encoding_round_trips() -> None:
    changes = {b"s\x00key": b"\x00\xff" * 10, b"sdel": None, b"": b""}
    assert decode_changes(encode_changes(2**40, changes)) == (2**40, changes)


def test_scans_see_what_a_checkpoint_took_until_it_lands(make_kv) -> None:
    """An overlapped checkpoint writes on another thread, and exactly-once output applies its changes only
    after the commit: until then the changes are in neither the buffer nor the KV. Point reads find them in
    the cache; scans must too (a window closing meanwhile scanned its groups and emitted none of them)."""
    store = PartitionStore(make_kv())
    store.state["w:10:a"] = 1
    store.state["w:10:b"] = 2
    store.state["w:20:a"] = 3
    store.save(1)
    store.state["w:10:c"] = 4  # new since the last checkpoint
    del store.state["w:10:a"]
    write = store.prepare_save(2)  # the snapshot is taken; its write has not happened yet
    store.state["w:10:d"] = 5  # and processing goes on meanwhile
    expected = [("w:10:b", 2), ("w:10:c", 4), ("w:10:d", 5)]
    assert store.state.scan_prefix("w:10:") == expected
    assert dict(store.state.items()) == {**dict(expected), "w:20:a": 3}
    write()
    store.state.evict()  # the checkpoint is complete
    assert store.state.scan_prefix("w:10:") == expected
    store.save(3)
    store.close()
    assert PartitionStore(make_kv()).state.scan_prefix("w:10:") == expected


def test_rolled_back_and_discarded_writes_read_as_saved(make_kv) -> None:
    """A failing record's writes (rollback) and a lost partition's (discard) leave the saved values readable
    and nothing for the next checkpoint to write, also for keys a checkpoint in flight had taken."""
    store = PartitionStore(make_kv())
    store.state["a"] = 1
    store.state["b"] = 1
    store.save(1)
    store.state.journal()  # from here on writes are journaled, as the engine has it for every record
    store.state["a"] = 2
    store.state["a"] = 3
    del store.state["b"]
    store.state["c"] = 1
    store.state.rollback()
    assert (store.state["a"], store.state["b"], "c" in store.state) == (1, 1, False)
    assert store.state_changes() == {}
    store.state["a"] = 4
    store.prepare_save(2)  # taken, never written (the partition is lost before it lands): the KV says 1
    store.state["a"] = 5
    store.state["b"] = 5
    store.state.discard_changes()  # the worker then drops the partition: reads go to the KV again
    assert (store.state["a"], store.state["b"]) == (1, 1) and not store.dirty


def test_state_read_and_written_as_columns(make_kv) -> None:
    """`get_columns` is `get_many` transposed (saved, unsaved and absent keys alike); `set_columns` writes the
    rows back, journaled, and they are saved as lists."""
    import numpy as np

    store = PartitionStore(make_kv())
    store.state["a"] = [1, 0.5]
    store.save(1)
    store.state["b"] = [2, 2]
    state = store.state
    counts, sums = state.get_columns(["b", "zz", "a"], (0, 0.0))
    assert counts.dtype == np.int64 and counts.tolist() == [2, 0, 1]
    assert sums.dtype == np.float64 and sums.tolist() == [2.0, 0.0, 0.5]
    (names,) = state.get_columns(["a", "b"], ("",))  # not numbers: a list
    assert isinstance(names, list)
    empty, _ = state.get_columns([], (0, 0.0))
    assert empty.dtype == np.int64 and len(empty) == 0
    state.journal()  # writes from here on can be rolled back
    state.set_columns(["a", "c"], np.array([3, 4]), [1.5, None])
    assert state.get_many(["a", "c"]) == [(3, 1.5), (4, None)] and type(state["a"][0]) is int
    state.rollback()
    assert state.get_many(["a", "c"]) == [[1, 0.5], None]
    with pytest.raises(ValueError, match="2 keys but columns of"):
        state.set_columns(["a", "c"], [1])
    state["bad"] = 7
    with pytest.raises(ValueError, match=r"state\['bad'\] is 7, not a list of 2"):
        state.get_columns(["a", "bad"], (0, 0))
    state.set_columns(["a"], [9], [9.5])
    store.save(2)
    store.close()
    assert PartitionStore(make_kv()).state.get_many(["a", "b"]) == [[9, 9.5], [2, 2]]
