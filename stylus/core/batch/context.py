"""`ctx` of a batch processor: the per-record `EngineContext` (whose fields the worker's transaction, the
replay and `fire_timers` set) plus `emit_batch`, `forward`, the batch's event times and buffered timers.

While `process_batch` runs, outputs wait in `_pending` in the engine's formats (where the sink offers its direct
path, `Rows` of a batch's emit, or the positional arguments of `produce`; where it takes rows as columns
(`rows_sink`), one `(put, topic, keys, values, timestamps, None)`; `(sink, topic, key, value, timestamp,
headers)` elsewhere)
and timers in `_timers`: the engine releases both only when the (sub-)batch succeeded, so a batch that fails
and is split leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from stylus.core.batch.columns import Run, Values, as_list, getter, is_mask
from stylus.core.batch.encode import Table, check_sizes, encode_values, int_list, key_bytes, value_columns
from stylus.core.engine import EngineContext
from stylus.serde import decoder

if TYPE_CHECKING:
    from stylus.core.batch.engine import BatchEngine


class Rows(NamedTuple):
    """Outputs of one `emit_batch` / `forward` waiting for their batch to succeed, as columns: the engine produces
    them without a tuple per row (a held output gets one: `tuples`)."""

    topic: str
    values: Sequence[Any]
    keys: Sequence[bytes | None]
    stamps: Sequence[int]

    def tuples(self) -> Iterator[tuple[Any, ...]]:
        """The rows as `produce`'s positional arguments (held output)."""
        return zip(repeat(self.topic), self.values, self.keys, repeat(-1), repeat(None), repeat(None), self.stamps)


class BatchContext(EngineContext):
    __slots__ = ("_decoded", "_run", "_serdes", "_timers", "_where", "event_times")

    def __init__(self, engine: BatchEngine, name: str, default_topic: str | None, serdes: Mapping[str, str]) -> None:
        super().__init__(engine, name, default_topic)
        self._serdes = serdes  # output topic -> its serde
        self._run: Run | None = None  # the run whose rows `forward` emits
        self._timers: list[tuple[str, int]] | None = None  # timers set by the batch in progress
        self.event_times: Any = None  # while process_batch runs: its rows' event times (Int64Array)
        self._decoded: Values | None = None  # the run's decoded values, and the batch's rows among them
        self._where: Sequence[int] | None = None

    @property
    def topic(self) -> str | None:
        """The input topic of the batch (or timer) in progress."""
        return self._task.topic if self._task is not None else None

    @property
    def partition(self) -> int | None:
        """The input partition of the batch (or timer) in progress."""
        return self._task.partition if self._task is not None else None

    @property
    def values(self) -> list[Any]:
        """The batch's values as the topic's serde decoded them, one per row: the Python objects its columns were
        made from (a JSON number keeps its int or float, a field keeps its absence). While `process_batch` runs."""
        decoded, where = self._decoded, self._where
        if decoded is None or where is None:
            raise RuntimeError("`values` are the rows of the batch in progress: read them in `process_batch`")
        decoded = as_list(decoded)
        first, last = where[0], where[-1]
        if last - first == len(where) - 1:  # contiguous rows (no late row left out): a slice
            return decoded if first == 0 and last == len(decoded) - 1 else decoded[first:last + 1]
        return [decoded[i] for i in where]

    # ---------------------------------------------------------------- outputs
    def emit_batch(self, table: Table, key: Any = None, topic: str | None = None, timestamp: Any = None) -> None:
        """One output per row: the JSON object of its value columns (for a table derived from the input batch,
        every column but `key`, `timestamp`, `offset`, `headers`), keyed by the column `key` names, timestamped
        by the column `timestamp` names or one int (default: the input rows' own, for a table derived from the
        batch, else the newest record's, or the timer's in `on_timer`)."""
        target = self._target(topic)
        if not table.num_rows:
            return
        values, value_bytes = encode_values(table, value_columns(table), self._serdes[target])
        keys, key_bytes_ = key_bytes(table, key)
        stamps = int_list(table, timestamp, self._timestamp, meta="timestamp")
        origins = None  # the input offset each output's `stylus.id` names: only when outputs carry ids
        if self._stamp is not None:
            origins = int_list(table, None, self.record.offset if self.record is not None else -1, meta="offset")
        self._put(target, values, keys, stamps, origins, value_bytes + key_bytes_)

    def forward(self, rows: Any, topic: str | None = None) -> None:
        """The input records of `rows` emitted unchanged: the value bytes as read (no encoding), the key and the
        timestamp. `rows`: a table derived from the batch (its `offset` column names the records), or a boolean
        mask over the batch in progress (a pyarrow or NumPy boolean array, one per row; null is false), which
        spares filtering the batch's columns."""
        target = self._target(topic)
        run = self._run
        if run is None:
            raise RuntimeError("`forward` emits input records: call it from `process_batch`")
        if is_mask(rows):
            where = self._masked(rows)
            if not where:
                return
            pick = getter(where)
            origins = [run.offsets[i] for i in where] if self._stamp is not None else None
        else:
            offsets = rows.column("offset")
            if not len(offsets):
                return
            pick = run.picker(offsets)
            origins = offsets.to_pylist() if self._stamp is not None else None  # only outputs with ids name them
        self._put(target, pick(run.values), pick(run.keys), pick(run.timestamps), origins)

    def _masked(self, mask: Any) -> list[int]:
        """The run positions of the batch's rows where `mask` is true."""
        rows = self._where
        if rows is None:
            raise RuntimeError("a mask selects rows of the batch in progress: forward it from `process_batch`")
        flags = mask if isinstance(mask, np.ndarray) else mask.to_numpy(zero_copy_only=False)
        if len(flags) != len(rows):
            raise ValueError(f"the mask has {len(flags):,} values for a batch of {len(rows):,} rows: compute it "
                             "over the batch `process_batch` got")
        if flags.dtype != np.bool_:  # nulls (pyarrow gives objects then): false
            flags = np.array([bool(flag) for flag in flags], dtype=np.bool_)
        chosen = np.flatnonzero(flags)
        if isinstance(rows, range) and rows.step == 1:
            return (chosen + rows.start).tolist()
        return [rows[i] for i in chosen.tolist()]

    def _target(self, topic: str | None) -> str:
        target = topic or self._default_topic
        if target is None:
            raise ValueError(f"processor `{self.processor_name}` has no outputs to emit to")
        if target not in self._outputs:
            raise ValueError(f"emitted to `{target}`, which is not among the processor's outputs")
        return target

    def _put(self, target: str, values: Sequence[Any], keys: Sequence[bytes | None], stamps: Sequence[int],
             origins: Sequence[int] | None, bound: int | None = None) -> None:
        """The rows as outputs to `target`, in the format the sink in use takes (see the module docstring)."""
        fixed = self._fixed
        parts = fixed.get(target) if fixed else None  # an `all` / `global` output's partitions
        pending = self._pending
        direct = self._direct
        if direct is not None and pending is not None:
            check_sizes(values, keys, direct.max_bytes, target, bound)
            stamp = self._stamp
            if stamp is None and parts is None:  # the common case: the columns as they are, produced row by row
                pending.append(Rows(target, values, keys, stamps))  # on success (BatchEngine._release)
                return
            name = self._stamp_name
            seen: dict[int, int] = {}
            for value, key, ts, origin in zip(values, keys, stamps, origins or repeat(-1), strict=False):
                for part in (-1,) if parts is None else parts:
                    if stamp is None:
                        pending.append((target, value, key, part, None, None, ts))
                        continue
                    index = seen[origin] = seen.get(origin, -1) + 1  # the emit index among the origin's outputs
                    pending.append((target, value, key, part, None, None, ts, [(name, stamp % (origin, index))]))
            return
        send = getattr(self._sink, "send", None)
        offer = getattr(self._sink, "rows_sink", None)
        put = offer(target) if offer is not None and parts is None else None
        if put is not None:  # the rows as columns (a backfill's Parquet output)
            items: Any = [(put, target, keys, values, stamps, None)]
        elif send is not None and parts is None:  # raw bytes: a KafkaSink's own path (it stamps timer outputs)
            items = zip(repeat(partial(_send, send)), repeat(target), keys, values, stamps, repeat(None))
        else:  # a sink that takes decoded values (tests, backfill's collecting outputs)
            decode = decoder(self._serdes[target])
            texts = [None if k is None else k.decode("utf-8", "surrogateescape") for k in keys]
            decoded = [None if v is None else decode(v) for v in values]
            sinks = [self._sink] if parts is None else [partial(self._sink, partition=p) for p in parts]
            items = [(sink, target, k, v, ts, None)
                     for k, v, ts in zip(texts, decoded, stamps, strict=True) for sink in sinks]
        if pending is not None:
            pending.extend(items)
        else:  # outside a batch or a timer (setup): at once
            for sink, *args in items:
                sink(*args)

    # ---------------------------------------------------------------- timers
    def set_timer(self, key: str, timestamp: int) -> None:
        """As `Context.set_timer`; inside a batch the timer is kept only if the batch succeeds."""
        timers = self._timers
        if timers is None:
            super().set_timer(key, timestamp)
            return
        task = self._task
        if task is None or task.store is None:
            raise RuntimeError(f"processor `{self.processor_name}` is stateless; set `semantics.state` to use timers")
        timers.append((key, int(timestamp)))


def _send(send: Any, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
          headers: Mapping[str, Any] | None) -> None:
    """A sink's `send` (raw bytes) called as sinks are called: (topic, key, value, timestamp, headers)."""
    send(topic, value, key, timestamp, headers)

