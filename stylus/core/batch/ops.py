"""Vectorised helpers for batch processors: rows grouped by a key, running totals per group in row order (what a
per-record processor's `state[key] += ...` computes, for a whole batch at once), keys as text.

Running totals are exact: integer sums are prefix sums less the group's start, and float sums add each group's values
one at a time in row order onto its total before the batch, as a per-record processor's `total += value` does, so
even their last bits agree whatever the batch boundaries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: float running sums: one `cumsum` call costs about as much as this many cells of the padded matrix
CELLS_PER_CALL = 1000


def group_text(column: Any) -> pa.Array:
    """Each row's group key as text, as `stylus.windows` takes a group: "" for null, strings as they are,
    integers as their digits, anything else as `str()` writes it."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.fill_null("") if column.null_count else column
    if pa.types.is_integer(kind):
        text = column.cast(pa.string())
        return text.fill_null("") if text.null_count else text
    return pa.array(["" if v is None else str(v) for v in column.to_pylist()], pa.string())


class Groups:
    """The rows of a batch grouped by a key column: `names` the distinct keys in order of first appearance,
    `codes` each row's group (an index into `names`). `Groups.of_numbers` groups by integers instead."""

    def __init__(self, keys: Any) -> None:
        self._index(pc.dictionary_encode(group_text(keys)))

    @classmethod
    def of_numbers(cls, numbers: np.ndarray) -> Groups:
        """The rows grouped by an integer per row (`names`: those integers, in order of first appearance): a
        composite key made of several columns' codes, without a string per row."""
        groups = cls.__new__(cls)
        groups._index(pc.dictionary_encode(pa.array(numbers)))
        return groups

    def _index(self, encoded: Any) -> None:
        self.names: list[Any] = encoded.dictionary.to_pylist()
        self.codes: np.ndarray = encoded.indices.to_numpy(zero_copy_only=False)
        self.rows = len(self.codes)
        self._order = np.argsort(self.codes, kind="stable")  # rows group by group, in row order within each
        ordered = self.codes[self._order]
        self._starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if self.rows else np.empty(0, int)
        self._sizes = np.diff(np.r_[self._starts, self.rows])
        self._group_of_segment = ordered[self._starts] if self.rows else np.empty(0, int)

    def running_count(self, before: Any = 0) -> np.ndarray:
        """Per row: 1 + the rows of its group before it in the batch, plus `before[group]`."""
        position = np.arange(self.rows) - np.repeat(self._starts, self._sizes)
        out = np.empty(self.rows, dtype=np.int64)
        out[self._order] = position + 1
        return out + np.asarray(before)[self.codes] if np.ndim(before) else out + before

    def running_sum(self, values: Any, before: Any = 0) -> np.ndarray:
        """Per row: `before[group]` plus its group's values up to its own, added in row order; nulls add 0."""
        if isinstance(values, np.ndarray):
            array = values
        else:
            array = (pc.fill_null(values, 0) if values.null_count else values).to_numpy(zero_copy_only=False)
        if array.dtype.kind == "f" or np.asarray(before).dtype.kind == "f":
            return self._folded(array.astype(np.float64, copy=False), before)
        sums = np.cumsum(array[self._order])
        start = np.repeat(np.r_[0, sums][self._starts], self._sizes)
        out = np.empty(self.rows, dtype=sums.dtype)
        out[self._order] = sums - start
        return out + np.asarray(before)[self.codes] if np.ndim(before) else out + before

    def _folded(self, array: np.ndarray, before: Any) -> np.ndarray:
        """Float running sums added one at a time, as `total = total + value` row by row. Each group's total before
        the batch is added to its first value; then each group's values are summed by `cumsum`, a sequential left
        fold (the same additions in the same order): the groups of up to `width` rows as the rows of one
        zero-padded matrix, in one call, each longer group in a call of its own. `width` makes it cheapest."""
        values = array[self._order]  # a copy: group by group, each in row order
        starts, sizes = self._starts, self._sizes
        values[starts] += np.asarray(before, dtype=np.float64)[self._group_of_segment] if np.ndim(before) else before
        sums = np.empty(self.rows, dtype=np.float64)
        if not self.rows:
            return sums
        fitting = np.cumsum(np.bincount(sizes))  # per width w: the groups of at most w rows
        width = int(np.argmin((fitting * np.arange(len(fitting)) + CELLS_PER_CALL * (len(sizes) - fitting))[1:])) + 1
        short = sizes <= width
        segment = np.repeat(np.arange(len(sizes)), sizes)  # per row (in group order): its group
        in_short = short[segment]
        row = (np.cumsum(short) - 1)[segment[in_short]]  # the matrix row of each short group's rows
        column = (np.arange(self.rows) - np.repeat(starts, sizes))[in_short]  # and its place in its group
        padded = np.zeros((int(short.sum()), width))
        padded[row, column] = values[in_short]
        sums[in_short] = np.cumsum(padded, axis=1)[row, column]
        for start, size in zip(starts[~short].tolist(), sizes[~short].tolist(), strict=True):
            np.cumsum(values[start:start + size], out=sums[start:start + size])
        out = np.empty(self.rows, dtype=np.float64)
        out[self._order] = sums
        return out

    def last(self, per_row: np.ndarray) -> list[Any]:
        """Per group (in `names` order): the value of its last row, as a Python value."""
        out = np.empty(len(self.names), dtype=per_row.dtype)
        out[self._group_of_segment] = per_row[self._order[self._starts + self._sizes - 1]]
        return out.tolist()
