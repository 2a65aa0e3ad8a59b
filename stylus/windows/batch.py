"""`BatchWindowedProcessor`: `WindowedProcessor`'s tumbling and hopping windows on the batch path (docs/batch.md).

The same configuration, state layout, timers and results as the per-record `WindowedProcessor` (it is one, and
inherits `on_timer`, `is_late`, `result` and `emit_window` from it): only the update differs. A batch's rows are
grouped by (window end, group) with one `pyarrow` group-by, the touched windows' accumulators are read in one
`get_many`, combined with the batch's partial aggregates and written back in one `set_many`: the cost is per
window and group per batch, not per record. Float sums and means instead fold the batch's values one at a time
in row order onto each accumulator (`Groups.running_sum` over the rows grouped by state key), as `add` does, so
even their last bits agree. Windows close on the same watermark and timers, so a batch and a per-record instance
over the same input emit the same results, wherever the batches are cut.

Supported: tumbling and hopping windows; count, sum, min, max and mean; `emit: final`; late records dropped or
redirected (`late: update` corrects closed windows one record at a time: per-record only). Needs the `batch`
extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stylus.api import BatchContext, BatchProcessor, Context
from stylus.core.batch.ops import Groups, group_text
from stylus.windows.aggregates import Count, Max, Mean, Min, Sum
from stylus.windows.assigners import Hopping, Tumbling
from stylus.windows.processor import _WINDOW, WindowedProcessor, _hex

_NO_NULL_SUM = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)  # a sum of nulls is 0, as Sum.zero()


class BatchWindowedProcessor(BatchProcessor, WindowedProcessor):
    """Configure as `WindowedProcessor` (YAML `config:` or class attributes)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        cls = type(self)
        agg = self.aggregate
        problems = []
        if not isinstance(self.window, Tumbling | Hopping):
            problems.append("windows must be tumbling or hopping (sessions merge one record at a time)")
        if type(agg) not in (Count, Sum, Min, Max, Mean):
            problems.append("the aggregate must be count, sum, min, max or mean")
        if self.emit_updates or self.emit_changes:
            problems.append("`emit` must be `final`")
        if cls.key_of is not WindowedProcessor.key_of or cls.value_of is not WindowedProcessor.value_of:
            problems.append("`key_of` and `value_of` are per record: group by `key` and aggregate `field` instead")
        if problems:
            raise ValueError(f"{cls.__name__}: the batch path cannot run this window: {'; '.join(problems)}")
        wanted = [f for f in (self.key_field, getattr(agg, "field", None)) if f is not None]
        self.fields = tuple(dict.fromkeys(wanted))  # only these are decoded into columns

    def setup(self, ctx: Context) -> None:
        super().setup(ctx)
        if self.retain_ms:
            raise ValueError(f"{type(self).__name__}: late corrections (`retain`, `late: update`) are per-record "
                             "only; use `stylus.windows:WindowedProcessor`")

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
        window = self.window
        times = ctx.event_times.to_numpy()
        groups = group_text(batch.column(self.key_field) if self.key_field is not None else batch.column("key"))
        field = getattr(self.aggregate, "field", None)
        values = batch.column(field) if field is not None else pa.nulls(batch.num_rows, pa.int64())
        if isinstance(window, Tumbling):
            ends = times - times % window.size + window.size
            rows = np.arange(len(times))
        else:
            assert isinstance(window, Hopping)
            first = times - times % window.slide + window.slide
            spans = [(first + k * window.slide, k) for k in range(-(-window.size // window.slide) + 1)]
            parts = [(end, np.flatnonzero(end <= times + window.size)) for end, _ in spans]
            ends = np.concatenate([end[valid] for end, valid in parts])
            rows = np.concatenate([valid for _, valid in parts])
            order = np.argsort(rows, kind="stable")  # each window's rows in row order, as they are added
            ends, rows = ends[order], rows[order]
        open_ = ends > ctx.watermark  # a window already closed is gone (no `retain` here)
        if not open_.all():
            ends, rows = ends[open_], rows[open_]
        if not len(ends):
            return
        table = pa.table({"end": ends, "group": groups.take(pa.array(rows)), "value": values.take(pa.array(rows))})
        if isinstance(self.aggregate, Sum | Mean) and pa.types.is_floating(table.schema.field("value").type):
            self._fold(ctx, ends, table.column("group").combine_chunks(), table.column("value").combine_chunks())
            return
        self._combine(ctx, table.group_by(["end", "group"], use_threads=False).aggregate(self._aggregations()))

    def _aggregations(self) -> list[tuple[Any, ...]]:
        agg = self.aggregate
        if isinstance(agg, Count):
            return [("value", "count", pc.CountOptions(mode="all"))]
        if isinstance(agg, Mean):
            return [("value", "sum", _NO_NULL_SUM), ("value", "count")]
        if isinstance(agg, Sum):
            return [("value", "sum", _NO_NULL_SUM)]
        return [("value", "min" if type(agg) is Min else "max")]

    def _fold(self, ctx: BatchContext, ends: np.ndarray, groups: pa.Array, values: pa.Array) -> None:
        """A float sum or mean: each window and group's values added one at a time in row order onto its stored
        accumulator, as `add` adds them (nulls skipped); a window new to the state gets its closing timer."""
        windows, texts = pc.dictionary_encode(pa.array(ends)), pc.dictionary_encode(groups)
        width = len(texts.dictionary)
        keyed = Groups.of_numbers(windows.indices.to_numpy().astype(np.int64) * width + texts.indices.to_numpy())
        window_ends, group_names = windows.dictionary.to_pylist(), texts.dictionary.to_pylist()
        prefixes = [_WINDOW + _hex(end) for end in window_ends]
        numbers = np.asarray(keyed.names)
        window_of = (numbers // width).tolist()  # per state key: its window (an index into `window_ends`)
        names = [prefixes[w] + group_names[g] for w, g in zip(window_of, (numbers % width).tolist(), strict=True)]
        before = ctx.state.get_many(names)
        counts = np.bincount(keyed.codes, weights=values.is_valid().to_numpy(zero_copy_only=False),
                             minlength=len(names)).astype(np.int64).tolist()  # values added per key
        mean = isinstance(self.aggregate, Mean)
        accs: list[Any] = [(b or [0, 0]) if mean else (0 if b is None else b) for b in before]
        sums = keyed.last(keyed.running_sum(values, np.array([a[0] if mean else a for a in accs], dtype=np.float64)))
        after = [acc if not n else [total, acc[1] + n] if mean else total
                 for acc, total, n in zip(accs, sums, counts, strict=True)]  # all nulls: unchanged, as `add`
        ctx.state.set_many(dict(zip(names, after, strict=True)))
        for w in sorted({w for w, b in zip(window_of, before, strict=True) if b is None}, key=window_ends.__getitem__):
            ctx.set_timer(prefixes[w], window_ends[w])

    def _combine(self, ctx: BatchContext, partial: pa.Table) -> None:
        """The batch's aggregate per (window, group) folded into the stored accumulators, as `add` folds values
        one at a time; a window new to the state gets its closing timer."""
        agg = self.aggregate
        assert agg is not None
        ends = partial.column("end").to_pylist()
        prefixes = {end: _WINDOW + _hex(end) for end in set(ends)}
        keys = [prefixes[end] + group for end, group in zip(ends, partial.column("group").to_pylist(), strict=True)]
        before = ctx.state.get_many(keys)
        columns = [partial.column(i).to_pylist() for i in range(2, partial.num_columns)]
        if isinstance(agg, Mean):
            after = [[(b or [0, 0])[0] + s, (b or [0, 0])[1] + c] for b, s, c in zip(before, *columns, strict=True)]
        elif isinstance(agg, Count | Sum):
            after = [(b or 0) + x for b, x in zip(before, columns[0], strict=True)]
        else:  # min, max: None-skipping, as their `add`
            after = [agg.add(b, x) for b, x in zip(before, columns[0], strict=True)]
        ctx.state.set_many(dict(zip(keys, after, strict=True)))
        for end in sorted({end for end, b in zip(ends, before, strict=True) if b is None}):
            ctx.set_timer(prefixes[end], end)
