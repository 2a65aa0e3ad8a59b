"""stylus/core/batch/ops.py: `Groups`' running totals are what a per-record processor's `total += value` computes,
row by row, to the last bit of a float, whatever the keys' spread and wherever the batches are cut."""

from __future__ import annotations

import random
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from stylus.core.batch.ops import Groups

SPREADS = {  # how a batch's keys are spread: each cuts the rows into groups of other sizes
    "one key": lambda rng: "k0",
    "few keys": lambda rng: f"k{rng.randrange(10)}",
    "middling": lambda rng: f"k{rng.randrange(60)}",
    "many keys": lambda rng: f"k{rng.randrange(5000)}",
    "one hot key": lambda rng: "hot" if rng.random() < 0.5 else f"k{rng.randrange(1000)}",
}


def floats(rng: random.Random, n: int) -> list[float]:
    """Values whose sums round differently in another order: mixed magnitudes and signs."""
    return [rng.choice([rng.random(), rng.random() * 1e9, -rng.random() * 1e-7, 0.1, 1e16, -1e16,
                        float(rng.randrange(100))]) for _ in range(n)]


def sequential(keys: list[str], values: list[Any], totals: dict[str, Any]) -> list[Any]:
    """The per-record fold: each row's total after adding its value onto its key's."""
    out = []
    for key, value in zip(keys, values, strict=True):
        totals[key] = totals[key] + value
        out.append(totals[key])
    return out


@pytest.mark.parametrize("spread", SPREADS)
def test_float_running_sums_are_the_per_record_fold_to_the_last_bit(spread: str) -> None:
    rng = random.Random(spread)
    for rows in (1, 7, 300, 2000):
        keys = [SPREADS[spread](rng) for _ in range(rows)]
        values = floats(rng, rows)
        groups = Groups(pa.array(keys))
        before = {name: rng.choice([0.0, rng.random() * 100, 1e16]) for name in groups.names}
        got = groups.running_sum(pa.array(values), np.array([before[name] for name in groups.names]))
        want = sequential(keys, values, dict(before))
        assert got.tolist() == want  # equal floats: the same additions in the same order
        assert groups.last(got) == [[t for k, t in zip(keys, want, strict=True) if k == name][-1]
                                    for name in groups.names]


@pytest.mark.parametrize("spread", SPREADS)
def test_where_the_batches_are_cut_changes_no_total(spread: str) -> None:
    """A stream in batches of any sizes, each batch's totals starting from the previous batches' (as state
    carries them), gives the per-record fold's totals: a replay cut elsewhere emits the same values."""
    rng = random.Random(f"cuts {spread}")
    keys = [SPREADS[spread](rng) for _ in range(3000)]
    values = floats(rng, 3000)
    want = sequential(keys, values, dict.fromkeys(keys, 0.0))
    random_sizes = np.diff([0, *sorted(rng.sample(range(1, 3000), 40)), 3000]).tolist()
    for sizes in ([3000], [1, 999, 2000], [700] * 4 + [200], random_sizes):
        edges = np.cumsum([0, *sizes]).tolist()
        state: dict[str, float] = {}
        got: list[float] = []
        for start, end in pairwise(edges):
            groups = Groups(pa.array(keys[start:end]))
            sums = groups.running_sum(pa.array(values[start:end]), np.array([state.get(n, 0.0) for n in groups.names]))
            state.update(zip(groups.names, groups.last(sums), strict=True))
            got += sums.tolist()
        assert got == want


def test_integer_totals_stay_integers_and_nulls_add_nothing() -> None:
    keys = ["a", "b", "a", "a", "b"]
    groups = Groups(pa.array(keys))
    sums = groups.running_sum(pa.array([1, 2, None, 4, 5]), np.array([10, 0], dtype=np.int64))
    assert sums.dtype == np.int64 and sums.tolist() == [11, 2, 11, 15, 7]
    assert groups.running_count(np.array([3, 0])).tolist() == [4, 1, 5, 6, 2]
    mixed = groups.running_sum(pa.array([1, 2, 3, 4, 5]), np.array([0.5, 0.25]))  # float totals before
    assert mixed.tolist() == [1.5, 2.25, 4.5, 8.5, 7.25]


def test_an_empty_batch_has_no_totals() -> None:
    groups = Groups(pa.array([], pa.string()))
    assert groups.running_sum(pa.array([], pa.float64()), 0.0).tolist() == []
