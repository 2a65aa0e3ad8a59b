"""The acker's bookkeeping (stylus/core/acker.py): one XOR per input record, a record complete exactly when every
unit of its tree is done, and a committable offset that never passes an incomplete record."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stylus.core.acker import PartitionAcker


def test_a_record_completes_when_its_last_unit_is_acked_whatever_the_order() -> None:
    acker = PartitionAcker(random.Random(1))
    root = acker.begin(10)
    children = [acker.add(10) for _ in range(3)]
    grandchild = acker.add(10)  # made by a child while it ran: XORed in as it is made
    assert not acker.ack(10, children[1])
    assert not acker.ack(10, root)  # the root done before its children: still open
    assert not acker.ack(10, grandchild)
    assert not acker.ack(10, children[2])
    assert acker.completes(10, children[0])
    assert acker.ack(10, children[0])
    assert 10 not in acker and len(acker) == 0


def test_committable_is_the_lowest_incomplete_offset() -> None:
    acker = PartitionAcker(random.Random(2))
    units = {offset: acker.begin(offset) for offset in (3, 4, 7, 8)}  # gaps: compacted or transactional input
    assert acker.committable(9) == 3
    assert acker.ack(7, units[7]) and acker.committable(9) == 3  # done out of order: holds nothing back
    assert acker.ack(3, units[3]) and acker.committable(9) == 4
    assert acker.done(4)  # dead-lettered: settled without completing
    assert acker.committable(9) == 8
    assert acker.ack(8, units[8])
    assert acker.committable(9) == 9  # nothing incomplete: up to the next offset to read
    assert acker.committable(None) is None


def test_a_restart_gives_the_record_a_new_tree_and_stale_acks_are_ignored_by_the_caller() -> None:
    acker = PartitionAcker(random.Random(3))
    old_root = acker.begin(0)
    old_child = acker.add(0)
    new_root = acker.restart(0)  # the attempt failed: its units no longer count
    assert acker.completes(0, new_root) and not acker.completes(0, old_root) and not acker.completes(0, old_child)
    assert acker.ack(0, new_root)
    assert not acker.ack(0, old_child)  # a late ack of a completed record is ignored


def test_records_begin_in_offset_order() -> None:
    acker = PartitionAcker()
    acker.begin(5)
    with pytest.raises(ValueError, match="offset order"):
        acker.begin(5)
    with pytest.raises(KeyError):
        acker.add(6)  # never begun


def test_ids_are_64_bit_and_never_zero() -> None:
    acker = PartitionAcker(random.Random(4))
    ids = [acker.new_id() for _ in range(10_000)]
    assert all(0 < unit < 2**64 for unit in ids) and len(set(ids)) == len(ids)


class Model:
    """The acker's promise, kept the slow obvious way: the set of open units per record."""

    def __init__(self) -> None:
        self.open: dict[int, set[int]] = {}
        self.next_offset = 0

    def committable(self) -> int:
        return min(self.open, default=self.next_offset)


def _step(acker: PartitionAcker, model: Model, choice: int, pick: int, gap: int) -> None:
    """One random operation on both, checking the acker against the model."""
    incomplete = sorted(model.open)
    if choice == 0 or not incomplete:  # a new record
        offset = model.next_offset + gap
        model.open[offset] = {acker.begin(offset)}
        model.next_offset = offset + 1
        return
    offset = incomplete[pick % len(incomplete)]
    units = model.open[offset]
    if choice == 1:  # a running unit makes a child
        units.add(acker.add(offset))
    elif choice in (2, 3, 4):  # a unit is done
        unit = sorted(units)[pick % len(units)]
        units.discard(unit)
        completed = acker.ack(offset, unit)
        assert completed == (not units), f"offset {offset}: complete={completed}, open units left {len(units)}"
        if completed:
            del model.open[offset]
    elif choice == 5:  # the attempt failed and is tried again: one new root
        model.open[offset] = {acker.restart(offset)}
    else:  # settled by on_error (dead letter, skip)
        assert acker.done(offset)
        del model.open[offset]


def _check(acker: PartitionAcker, model: Model) -> None:
    committable = acker.committable(model.next_offset)
    assert committable == model.committable()
    assert all(committable <= offset for offset in model.open), "committable passed an incomplete record"
    assert len(acker) == len(model.open)
    assert list(acker.incomplete()) == sorted(model.open)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1_000), st.integers(0, 3)), max_size=300),
       st.integers(0, 2**32))
def test_committable_never_passes_an_incomplete_record(ops: list[tuple[int, int, int]], seed: int) -> None:
    acker, model = PartitionAcker(random.Random(seed)), Model()
    for choice, pick, gap in ops:
        _step(acker, model, choice, pick, gap)
        _check(acker, model)


def test_randomized_long_runs_against_the_model() -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(20):
        acker, model = PartitionAcker(random.Random(rng.randrange(1 << 30))), Model()
        for _ in range(5_000):
            _step(acker, model, rng.choices(range(7), weights=(3, 2, 4, 4, 4, 1, 1))[0], rng.randrange(10_000),
                  rng.choice((0, 0, 0, 1, 5)))
            _check(acker, model)
        for offset in sorted(model.open):  # finish every record: nothing is left, all is committable
            for unit in sorted(model.open[offset]):
                acker.ack(offset, unit)
        assert len(acker) == 0 and acker.committable(model.next_offset) == model.next_offset, f"seed {seed}"
