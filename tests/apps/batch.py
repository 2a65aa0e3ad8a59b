"""Batch processors used by the tests, each beside the per-record processor it must equal (same outputs, same
state, on the same input)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stylus import BatchProcessor, Processor
from stylus.core.batch.ops import Groups

KEEP = ["post", "comment", "share"]


class Keep(BatchProcessor):
    """The stateless filter: the records whose `type` is kept, forwarded unchanged."""

    fields = ("type",)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        ctx.forward(batch.filter(pc.is_in(batch.column("type"), pa.array(KEEP))))


class KeepMask(Keep):
    """`Keep` forwarding by a mask over the batch instead of a filtered table."""

    def process_batch(self, batch: Any, ctx: Any) -> None:
        ctx.forward(pc.is_in(batch.column("type"), pa.array(KEEP)))


class KeepPerRecord(Processor):
    def process(self, record: Any, ctx: Any) -> None:
        if record.value["type"] in KEEP:
            ctx.emit(record.value, key=record.key)


class RunningTotals(BatchProcessor):
    """Per key: the running count and sum of `n`, emitted per input, state `[count, sum]`."""

    fields = ("n",)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        groups = Groups(batch.column("key"))
        counts_before, sums_before = ctx.state.get_columns(groups.names, default=(0, 0))  # of [count, sum]
        counts = groups.running_count(counts_before)
        sums = groups.running_sum(batch.column("n"), sums_before)
        ctx.state.set_columns(groups.names, groups.last(counts), groups.last(sums))
        ctx.emit_batch(pa.table({"key": batch.column("key"), "count": counts, "sum": sums}), key="key",
                       timestamp=batch.column("timestamp"))


class RunningTotalsPerRecord(Processor):
    def process(self, record: Any, ctx: Any) -> None:
        count, total = ctx.state.get(record.key) or (0, 0)
        count, total = count + 1, total + (record.value.get("n") or 0)
        ctx.state[record.key] = [count, total]
        ctx.emit({"key": record.key, "count": count, "sum": total}, key=record.key)


class Poison(BatchProcessor):
    """Fails any batch holding a record with `"fail": true`; emits the others' values (a JSON object of their
    columns). `batches` counts its calls, failed ones included."""

    calls = 0

    def process_batch(self, batch: Any, ctx: Any) -> None:
        type(self).calls += 1
        n = batch.column("n")
        ctx.state.set_many({f"n{v}": 1 for v in n.to_pylist()})  # undone when the batch fails
        if "fail" in batch.column_names and pc.any(pc.fill_null(batch.column("fail"), False)).as_py():
            raise ValueError("poison in this batch")
        ctx.emit_batch(batch.select(["key", "n"]), key="key")  # `key` is metadata: not in the value


class CounterNode(BatchProcessor):
    """processors.counter:CounterNode on the batch path: per window of the record timestamp, the running count,
    emitted per input with where it came from (`src`), so the crash harness checks it record by record."""

    def setup(self, ctx: Any) -> None:
        from stylus.config.durations import parse_duration

        self.window_ms = int(parse_duration(self.config.get("window", "10s")) * 1000)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        stamps = batch.column("timestamp").to_numpy()
        windows = stamps - stamps % self.window_ms
        groups = Groups(pa.array(windows))
        before = ctx.state.get_many(groups.names)
        counts = groups.running_count(np.array([b or 0 for b in before], dtype=np.int64))
        ctx.state.set_many(dict(zip(groups.names, groups.last(counts), strict=True)))
        src = pc.binary_join_element_wise(f"{ctx.topic}:{ctx.partition}:", batch.column("offset").cast(pa.string()),
                                          "")
        ctx.emit_batch(pa.table({"window": windows, "count": counts, "src": src}),
                       key=pa.array(windows).cast(pa.string()), timestamp=batch.column("timestamp"))
