"""A run of one input partition's messages, read once, and the `pyarrow.RecordBatch` a batch processor gets.

Columns: `key` (string; binary when some key is not UTF-8), `timestamp`, `offset` (int64), `headers`
(map<string, binary>, null where a record has none), then the value: for a JSON topic whose values are objects
(or null), one column per top-level field, in first-seen order (a field named like one of the four columns above
is `value.<name>`); otherwise one `value` column. The schema's metadata names the four as the records' metadata
(`META`), which `pyarrow` keeps through filter, take, slice and select: `emit_batch` leaves them out of the
value it encodes.

JSON values are decoded as the per-record engine decodes them (the same values, the same records refused),
and never by guessing a type (no timestamp inference, no int-to-float widening, no field dropped past a sample):
straight into columns in C where the run is plain JSON objects (`json_columns`, with Python objects made by
orjson only when read: `Decoded`), else by orjson per record. Measured in docs/batch.md against pyarrow's and
Polars' JSON readers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from stylus.core.batch import json_columns
from stylus.core.message import RawMessage

META = b"stylus.meta"
META_COLUMNS = ("key", "timestamp", "offset", "headers")
_META_VALUE = ",".join(META_COLUMNS).encode()
HEADERS_TYPE = pa.map_(pa.string(), pa.binary())
#: a value field named like a metadata column gets this prefix (and loses it again when encoded)
RENAMED = "value."
_SLOTS = tuple(map(attrgetter, ("_value", "_key", "_timestamp", "_offset", "_headers")))  # RawMessage's, in Run's order
_SECOND = itemgetter(1)  # of `Message.timestamp()`: (type, ms)
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError,
                 ValueError)


class Run:
    """One input partition's consecutive records and what the batch path reads of each, read once: from
    messages (the stream, a Kafka range), or from columns (`of_columns`: an archive file's rows, no object per
    record). `message(i)` is the record at `i` as a message, for the failure and late-record policies."""

    __slots__ = ("headers", "keys", "msgs", "offsets", "source", "timestamps", "values")

    def __init__(self, msgs: list[Any]) -> None:
        self.msgs: list[Any] | None = msgs
        self.source: tuple[str, int] = ("", -1)  # (topic, partition) of a run made of columns
        self.values: list[bytes | None]
        self.keys: list[bytes | None]
        self.timestamps: list[int]
        self.offsets: Sequence[int]  # a range when contiguous
        self.headers: list[Any]
        kinds = set(map(type, msgs))
        if not msgs:  # a run of control records only, once they are taken out
            self.values, self.keys, self.timestamps, self.headers, self.offsets = [], [], [], [], range(0)
            return
        if kinds == {RawMessage}:  # tests, a backfill's Kafka records wrapped: read the slots directly
            self.values, self.keys, self.timestamps, self.offsets, self.headers = (
                list(map(get, msgs)) for get in _SLOTS)
            return
        if len(kinds) == 1:  # one class (confluent-kafka's Message): its accessors mapped in C
            kind: Any = kinds.pop()
            self.values, self.keys, self.headers = (list(map(get, msgs)) for get in (kind.value, kind.key,
                                                                                       kind.headers))
            self.timestamps = list(map(_SECOND, map(kind.timestamp, msgs)))
        else:
            self.values = [m.value() for m in msgs]
            self.keys = [m.key() for m in msgs]
            self.headers = [m.headers() for m in msgs]
            self.timestamps = [m.timestamp()[1] for m in msgs]
        first, last = msgs[0].offset(), msgs[-1].offset()
        # offsets rise within a partition: first..last with no gap is every offset in between, read from no message
        self.offsets = range(first, last + 1) if last - first == len(msgs) - 1 else [m.offset() for m in msgs]

    @classmethod
    def of_columns(cls, topic: str, partition: int, offsets: Sequence[int], keys: list[bytes | None],
                   values: list[bytes | None], timestamps: list[int], headers: list[Any]) -> Run:
        """A run of one partition's records given as columns, in offset order."""
        run = cls([])
        run.msgs, run.source = None, (topic, partition)
        first, last = (offsets[0], offsets[-1]) if len(offsets) else (0, -1)
        run.offsets = range(first, last + 1) if last - first == len(offsets) - 1 else offsets
        run.keys, run.values, run.timestamps, run.headers = keys, values, timestamps, headers
        return run

    def __len__(self) -> int:
        return len(self.values)

    def message(self, i: int) -> Any:
        """The record at `i` as a message (the one read, or one made of the columns)."""
        if self.msgs is not None:
            return self.msgs[i]
        topic, partition = self.source
        return RawMessage(topic, partition, self.offsets[i], self.keys[i], self.values[i], self.timestamps[i],
                          self.headers[i])

    def without(self, drop: Sequence[int]) -> Run:
        """The run less the records at `drop` (control records)."""
        gone = set(drop)
        if self.msgs is not None:
            return Run([m for i, m in enumerate(self.msgs) if i not in gone])
        keep = [i for i in range(len(self)) if i not in gone]
        return Run.of_columns(*self.source, [self.offsets[i] for i in keep], [self.keys[i] for i in keep],
                              [self.values[i] for i in keep], [self.timestamps[i] for i in keep],
                              [self.headers[i] for i in keep])

    def picker(self, offsets: Any) -> Callable[[Sequence[Any]], Sequence[Any]]:
        """A function that takes, from a sequence of the run's records (its `values`, `keys`, ...), the items of
        the records at `offsets` (an Arrow integer array, at least one), in C. Raises for an offset that is not
        a record of the run."""
        first, last = self.offsets[0], self.offsets[-1]
        if offsets.null_count == 0 and last - first == len(self.offsets) - 1:  # contiguous: arithmetic
            array = offsets.to_numpy()
            low, high = int(array.min()), int(array.max())
            if low < first or high > last:
                raise ValueError(f"offset {low if low < first else high} is not a record of this batch "
                                 f"(offsets {first}..{last}): forward rows of the batch")
            where = (array - first).tolist()
        else:
            index = {offset: i for i, offset in enumerate(self.offsets)}
            missing = [o for o in offsets.to_pylist() if o not in index]
            if missing:
                raise ValueError(f"offset {missing[0]} is not a record of this batch: forward rows of the batch")
            where = [index[offset] for offset in offsets.to_pylist()]
        return getter(where)


def getter(where: list[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """A function that takes the items at `where` (at least one) from a sequence, in C."""
    if len(where) == 1:
        at = where[0]
        return lambda items: (items[at],)
    return itemgetter(*where)


def is_mask(rows: Any) -> bool:
    """Whether `rows` is a boolean array (pyarrow or NumPy) rather than a table of rows."""
    if isinstance(rows, np.ndarray):
        return rows.dtype == np.bool_
    return isinstance(rows, (pa.Array, pa.ChunkedArray)) and pa.types.is_boolean(rows.type)


class Decoded(Sequence[Any]):
    """A run's JSON values decoded into columns in C (`json_columns`: `names`, `arrays`), and into Python objects
    by orjson only when something reads them by row (a fallback column, `ctx.values`, a late or failing record)."""

    __slots__ = ("_objects", "arrays", "names", "raw")

    def __init__(self, raw: list[bytes | None], names: list[str], arrays: list[pa.Array | None]) -> None:
        self.raw, self.names, self.arrays = raw, names, arrays
        self._objects: list[Any] | None = None

    def objects(self) -> list[Any]:
        if self._objects is None:
            loads = orjson.loads
            self._objects = [None if raw is None else loads(raw) for raw in self.raw]
        return self._objects

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: Any) -> Any:
        if self._objects is None and type(i) is int:  # one record (late, or its event time read): that one alone
            raw = self.raw[i]
            return None if raw is None else orjson.loads(raw)
        return self.objects()[i]


#: a run's decoded values: a list (orjson's, or another serde's), or columns decoded in C
Values = list[Any] | Decoded


def as_list(decoded: Values) -> list[Any]:
    return decoded.objects() if isinstance(decoded, Decoded) else decoded


def decode_values(values: list[bytes | None], serde: str, fields: Sequence[str] | None = None
                  ) -> tuple[Values, list[tuple[int, Exception]]]:
    """Each value decoded as the topic's serde decodes it, and the (position, error) of those that fail.
    JSON objects into the columns of `fields` (None: all) in C when the run allows (`Decoded`); else one C-level
    pass when none fails (a value may be null: a tombstone), a careful one otherwise. `fields` empty: no column is
    wanted, the processor reads `ctx.values` (SQL stages), which orjson decodes at once."""
    if serde == "json":
        columns = json_columns.decode(values, fields) if fields is None or fields else None
        if columns is not None:
            return Decoded(values, *columns), []
        try:
            return list(map(orjson.loads, values)), []  # type: ignore[arg-type]  # None fails: see below
        except (orjson.JSONDecodeError, TypeError):
            pass
        loads: Any = orjson.loads
    elif serde == "string":
        loads = bytes.decode
    else:
        return list(values), []
    out: list[Any] = []
    failed: list[tuple[int, Exception]] = []
    for i, raw in enumerate(values):
        try:
            out.append(None if raw is None else loads(raw))
        except Exception as exc:
            out.append(None)
            failed.append((i, exc))
    return out, failed


def to_array(items: list[Any], type_: pa.DataType | None = None) -> pa.Array:
    """An Arrow array of Python values; values Arrow cannot hold in one type (mixed kinds, huge integers)
    become their JSON text."""
    try:
        return pa.array(items, type_)
    except _ARROW_ERRORS:
        return pa.array([None if v is None else orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()
                         for v in items], pa.string())


def key_array(keys: list[bytes | None]) -> pa.Array:
    raw = pa.array(keys, pa.binary())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:  # a key that is not UTF-8: keep the bytes
        return raw


def headers_array(headers: list[Any]) -> pa.Array:
    if not any(headers):
        return pa.nulls(len(headers), HEADERS_TYPE)
    return pa.array([h or None for h in headers], HEADERS_TYPE)


def value_fields(values: list[Any], fields: Sequence[str] | None, kinds: set[type] | None = None) -> list[str] | None:
    """The top-level fields to make columns of when every value is a JSON object or null, else None. `kinds`:
    the values' types, when the caller has them."""
    kinds = set(map(type, values)) if kinds is None else kinds
    if kinds - {dict, type(None)}:
        return None
    if fields is not None:
        return list(fields)
    objects = [v for v in values if v is not None] if type(None) in kinds else values
    if not objects:
        return []
    first = objects[0]
    names = set().union(*objects)
    if names == first.keys():
        return list(first)
    seen = dict.fromkeys(first)
    for value in objects:  # fields missing from the first value: in the order they first appear
        seen.update(dict.fromkeys(value))
    return list(seen)


def record_batch(run: Run, rows: Sequence[int] | None, decoded: Values, serde: str,
                 fields: Sequence[str] | None) -> pa.RecordBatch:
    """The RecordBatch of the run's records at `rows` (None: all of them), values as `decoded` holds them."""
    if rows is None:
        keys, stamps, offsets, headers = run.keys, run.timestamps, run.offsets, run.headers
    else:
        keys = [run.keys[i] for i in rows]
        stamps = [run.timestamps[i] for i in rows]
        offsets = [run.offsets[i] for i in rows]
        headers = [run.headers[i] for i in rows]
    offset_array = pa.array(np.arange(offsets.start, offsets.stop, dtype=np.int64)) if isinstance(offsets, range) \
        else pa.array(offsets, pa.int64())
    arrays = [key_array(keys), pa.array(stamps, pa.int64()), offset_array, headers_array(headers)]
    names = list(META_COLUMNS)
    if isinstance(decoded, Decoded) and rows is None:  # (some rows may name fewer fields: their objects below)
        for name, array in zip(decoded.names, decoded.arrays, strict=True):
            arrays.append(array if array is not None  # else a column the C decoder left to orjson
                          else to_array([None if v is None else v.get(name) for v in decoded.objects()]))
            names.append(RENAMED + name if name in META_COLUMNS else name)
        return pa.RecordBatch.from_arrays(arrays, names=names, metadata={META: _META_VALUE})
    values = _rows(as_list(decoded), rows)
    kinds = set(map(type, values)) if serde == "json" else None
    columns = value_fields(values, fields, kinds) if kinds is not None else None
    if columns is None:
        arrays.append(to_array(values, pa.string() if serde == "string" else pa.binary() if serde == "bytes"
                               else None))
        names.append("value")
    else:
        nulls = type(None) in kinds  # type: ignore[operator]  # kinds is set for json
        for name in columns:  # no null (the common case): one C-level pass per field
            arrays.append(to_array([None if v is None else v.get(name) for v in values] if nulls
                                   else list(map(dict.get, values, repeat(name)))))
            names.append(RENAMED + name if name in META_COLUMNS else name)
    return pa.RecordBatch.from_arrays(arrays, names=names, metadata={META: _META_VALUE})


def _rows(items: list[Any], rows: Sequence[int] | None) -> list[Any]:
    return items if rows is None else [items[i] for i in rows]


def meta_columns(schema: pa.Schema) -> frozenset[str]:
    """The columns of a table derived from an input batch that are its records' metadata (none otherwise)."""
    meta = schema.metadata
    raw = meta.get(META) if meta else None
    return frozenset(raw.decode().split(",")) if raw else frozenset()
