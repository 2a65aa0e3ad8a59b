"""A backfill task's MemoryState saves what a StateMap saves for the same writes, scans alike, and refuses
the keys a StateMap refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stylus.state.kv import MemoryKV
from stylus.state.memory import MemoryState
from stylus.state.store import PartitionStore

Ops = list[tuple[str, Any, Any]]  # ("set", key, value) | ("del", key, None) | ("save", offset, None)

SEQUENCES: dict[str, Ops] = {
    "writes": [("set", "a", 1), ("set", "b", {"n": [1, 2]}), ("set", "a", 2), ("save", 10, None)],
    "delete after a save": [("set", "a", 1), ("set", "b", 2), ("save", 5, None), ("del", "a", None),
                            ("set", "c", "x"), ("save", 9, None)],
    "deleted and written again": [("set", "a", 1), ("save", 1, None), ("del", "a", None), ("set", "a", 3),
                                  ("save", 2, None)],
    "odd keys and values": [("set", "é\udcff", None), ("set", "w:2026-01-01:x", {1: "non-str dict key"}),
                            ("save", 3, None)],
}


def _apply(store: PartitionStore, ops: Ops) -> dict[bytes, bytes]:
    assert isinstance(store.kv, MemoryKV)
    for op, key, value in ops:
        if op == "set":
            store.state[key] = value
        elif op == "del":
            del store.state[key]
        else:
            store.save(key)
    return dict(store.kv.data)


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_saves_the_same_entries_as_a_state_map(name: str) -> None:
    ops = SEQUENCES[name]
    expected = _apply(PartitionStore(MemoryKV()), ops)
    assert _apply(PartitionStore(MemoryKV(), state=MemoryState()), ops) == expected
    assert expected  # the sequence saved something to compare


def test_scan_prefix_matches_a_state_map() -> None:
    keys = ["w:b", "w:a", "x:a", "w:c", "w"]
    memory, mapped = MemoryState(), PartitionStore(MemoryKV()).state
    for i, key in enumerate(keys):
        memory[key] = mapped[key] = i
    assert memory.scan_prefix("w:") == mapped.scan_prefix("w:") == [("w:a", 1), ("w:b", 0), ("w:c", 3)]


@pytest.mark.parametrize("check", [MemoryState.check_keys, MemoryState.take_changes])
def test_a_non_str_key_is_refused_with_the_state_maps_error(check: Callable[[MemoryState], Any]) -> None:
    mapped = PartitionStore(MemoryKV()).state
    with pytest.raises(TypeError) as refused:
        mapped[7] = "x"  # type: ignore[index]
    memory = MemoryState()
    memory["fine"] = 1
    memory[7] = "x"  # type: ignore[index]  # a dict takes it; the unit's end refuses it
    with pytest.raises(TypeError) as late:
        check(memory)
    assert str(late.value) == str(refused.value) == "state keys are str, not int (7)"


def test_columns_read_and_written_as_a_state_map_does() -> None:
    """`get_columns` / `set_columns` (a batch processor's bulk state) give and save what they do on a StateMap."""
    import numpy as np

    stores = [PartitionStore(MemoryKV()), PartitionStore(MemoryKV(), state=MemoryState())]
    for store in stores:
        store.state["a"] = [1, 0.5]
        store.state.set_columns(["b", "c"], np.array([2, 3]), [2.5, 3.5])
    (counts, sums), (counts2, sums2) = (store.state.get_columns(["c", "zz", "a", "b"], (0, 0.0)) for store in stores)
    assert counts.tolist() == counts2.tolist() == [3, 0, 1, 2] and counts2.dtype == np.int64
    assert sums.tolist() == sums2.tolist() == [3.5, 0.0, 0.5, 2.5]
    assert _apply(stores[0], [("save", 1, None)]) == _apply(stores[1], [("save", 1, None)])
