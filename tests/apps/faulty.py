"""Processors that fail on purpose, after touching state and emitting (failure atomicity tests)."""

from __future__ import annotations

from stylus import BatchProcessor, Processor


class CountThenFail(Processor):
    """Counts per key and emits the count, then raises on `"fail": true` after having done both."""

    def process(self, record, ctx):
        n = (ctx.state.get(record.key) or 0) + 1
        ctx.state[record.key] = n
        total = (ctx.state.get("__total__") or 0) + 1
        ctx.state["__total__"] = total
        ctx.emit({"key": record.key, "n": n, "id": record.value.get("id")}, key=record.key)
        if record.value.get("fail"):
            raise ValueError(f"bad record {record.value.get('id')}")


class TimerFail(Processor):
    """Sets a timer per record at its `ts` (then raises if the value says `fail`); `on_timer` counts and emits,
    and raises for keys starting `bad`."""

    def process(self, record, ctx):
        ctx.set_timer(record.key, int(record.value["ts"]))
        if record.value.get("fail"):
            raise ValueError(f"record {record.offset} failed after setting its timer")

    def on_timer(self, key, timestamp, ctx):
        ctx.state["fired"] = (ctx.state.get("fired") or 0) + 1
        ctx.emit({"timer": key, "ts": timestamp}, key=key)
        if key.startswith("bad"):
            raise RuntimeError(f"timer {key} failed")


class BigState(Processor):
    """Keeps `config.size` bytes of state per record (to fill a disk) and passes the record on."""

    def process(self, record, ctx):
        ctx.state[str(record.value["id"])] = "x" * int(self.config.get("size", 10_000))
        ctx.emit(record.value, key=record.key)


class EmitTwice(Processor):
    """Two outputs per record; the second is a set (JSON cannot encode it) where the value says `bad`."""

    def process(self, record, ctx):
        ctx.emit({"n": record.value["n"], "first": True})
        ctx.emit({1, 2} if record.value.get("bad") else {"n": record.value["n"]})


class EmitTwiceBatch(BatchProcessor):
    """`EmitTwice` as a batch processor: per-row `ctx.emit` from `process_batch`."""

    def process_batch(self, batch, ctx):
        for n, bad in zip(batch.column("n").to_pylist(), batch.column("bad").to_pylist(), strict=True):
            ctx.emit({"n": n, "first": True})
            ctx.emit({1, 2} if bad else {"n": n})
