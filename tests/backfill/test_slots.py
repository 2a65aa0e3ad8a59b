"""Units are spread over one Spark task per executor core by planned size (largest first)."""

from __future__ import annotations

from stylus.backfill.task import assign_slots


def test_slots_balance_planned_work_and_keep_every_unit_once() -> None:
    sizes = [250, 10, 240, 20, 230, 5, 0, 245]
    slots = assign_slots(sizes, 2)
    assert sorted(i for slot in slots for i in slot) == list(range(len(sizes)))
    assert all(slot == sorted(slot) for slot in slots)  # each task runs its units in plan order
    loads = sorted(sum(sizes[i] for i in slot) for slot in slots)
    assert loads == [500, 500]  # LPT: 250+240+10 / 245+230+20+5 (contiguous halves: 520/480)
    assert sorted(assign_slots(sizes, 100)) == [[i] for i in range(len(sizes))]  # never more slots than units
    assert assign_slots([7], 4) == [[0]] and assign_slots([], 4) == []
