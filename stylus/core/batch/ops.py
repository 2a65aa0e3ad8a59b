"""Vectorised helpers for batch processors: rows grouped by a key, running totals per group in row order (what a
per-record processor's `state[key] += ...` computes, for a whole batch at once), keys as text.

Integer totals are exact. Float running sums are prefix sums less the group's start, so they can differ from a
per-record processor's sequential additions in the last bits (docs/batch.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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
    `codes` each row's group (an index into `names`)."""

    def __init__(self, keys: Any) -> None:
        encoded = pc.dictionary_encode(group_text(keys))
        self.names: list[str] = encoded.dictionary.to_pylist()
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
        """Per row: its value plus those of its group before it in the batch, plus `before[group]`; nulls add 0."""
        if isinstance(values, np.ndarray):
            array = values
        else:
            array = (pc.fill_null(values, 0) if values.null_count else values).to_numpy(zero_copy_only=False)
        sums = np.cumsum(array[self._order])
        start = np.repeat(np.r_[0, sums][self._starts], self._sizes)
        out = np.empty(self.rows, dtype=sums.dtype)
        out[self._order] = sums - start
        return out + np.asarray(before)[self.codes] if np.ndim(before) else out + before

    def last(self, per_row: np.ndarray) -> list[Any]:
        """Per group (in `names` order): the value of its last row, as a Python value."""
        out = np.empty(len(self.names), dtype=per_row.dtype)
        out[self._group_of_segment] = per_row[self._order[self._starts + self._sizes - 1]]
        return out.tolist()
