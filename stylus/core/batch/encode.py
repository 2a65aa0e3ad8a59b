"""A table's rows as output records, column-wise: value bytes, key bytes, timestamps.

Values of a JSON topic are written byte for byte as orjson writes each row's dict (tested): in C from the
columns (`json_columns.encode`); without the C module, by Polars (`struct.json_encode` of one struct Series), which
costs little per row but a fixed price per call, and for small tables and tables Polars cannot take, row by row
through orjson (docs/batch.md, "Choosing the libraries", has the figures).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, TypeAlias

import orjson

# A worker is one thread by design (stylus/runtime/worker.py); Polars would otherwise start a pool per core to
# encode a few thousand rows, and fight the worker and its Kafka client threads for the cores.
os.environ.setdefault("POLARS_MAX_THREADS", "1")
import polars as pl
import pyarrow as pa

from stylus.core.batch import json_columns
from stylus.core.batch.columns import RENAMED, meta_columns
from stylus.core.sink import FRAMING_BYTES
from stylus.serde import encoder

Table: TypeAlias = Any  # a pyarrow Table or RecordBatch (pyarrow has no type hints)
#: from this many rows on, Polars encodes; fewer: orjson, a dict per row (docs/batch.md)
POLARS_ROWS = 256


def value_columns(table: Table) -> list[str]:
    """The columns that make up the value: all but the metadata columns of a table derived from the input."""
    meta = meta_columns(table.schema)
    return [name for name in table.column_names if name not in meta]


def encode_values(table: Table, columns: list[str], serde: str) -> tuple[list[bytes | None], int]:
    """One value per row, as the output topic's serde encodes it: a JSON object of `columns` for json; the
    one column's values for string and bytes topics. Also their total size (a bound on any one of them)."""
    rows = table.num_rows
    values: list[Any]
    if serde == "json":
        if not columns:
            return [b"{}"] * rows, 2
        sub = table.select(columns)
        if any(name.startswith(RENAMED) for name in columns):
            sub = sub.rename_columns([name.removeprefix(RENAMED) for name in columns])
        encoded = json_columns.encode([_array(column) for column in sub.columns], sub.column_names, rows)
        if encoded is not None:
            return encoded
        values = []
        if rows >= POLARS_ROWS:
            try:  # one struct Series: about half the per-call price of a DataFrame and a `select`
                rows_struct = pa.StructArray.from_arrays([_array(column) for column in sub.columns],
                                                         names=sub.column_names)
                series = pl.from_arrow(rows_struct)
                assert isinstance(series, pl.Series)
                text = series.struct.json_encode().to_arrow()
                return text.cast(pa.large_binary()).to_pylist(), text.nbytes
            except Exception:  # a type Polars does not take (maps, unions, ...): one dict per row
                pass
        dumps = orjson.dumps
        values = [dumps(row, option=orjson.OPT_NON_STR_KEYS) for row in sub.to_pylist()]
    else:
        if len(columns) != 1:
            raise ValueError(f"a {serde} topic takes one value column, not {len(columns)} ({', '.join(columns)}); "
                             "select it, or emit to a json topic")
        encode = encoder(serde)
        values = [None if v is None else encode(v) for v in _pylist(table.column(columns[0]))]
    return values, sum(map(len, filter(None, values)))


def key_bytes(table: Table, key: Any) -> tuple[list[bytes | None], int]:
    """Each row's record key as the producer takes it: `key` names a column (or is an array); None: no key.
    Text as UTF-8, integers as their digits, anything else as `str()` makes it (as `ctx.emit` encodes keys).
    Also a bound on their total size."""
    if key is None:
        return [None] * table.num_rows, 0
    column = table.column(key) if isinstance(key, str) else key
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind):
        if pa.types.is_integer(kind):
            column = column.cast(pa.string())
        return _pylist(column.cast(pa.large_binary())), column.nbytes
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _pylist(column), column.nbytes
    keys = [None if v is None else str(v).encode("utf-8", "surrogateescape") for v in _pylist(column)]
    return keys, sum(map(len, filter(None, keys)))


def int_list(table: Table, spec: Any, default: int, *, meta: str) -> list[int]:
    """Per row: the column `spec` names (or an array), one int for all rows, or, with `spec` None, the metadata
    column `meta` of a table derived from the input, else `default` for all rows."""
    if spec is None:
        if meta in meta_columns(table.schema) and meta in table.column_names:
            return _pylist(table.column(meta))
        return [default] * table.num_rows
    if isinstance(spec, int):
        return [spec] * table.num_rows
    return _pylist(table.column(spec) if isinstance(spec, str) else spec)


def _array(column: Any) -> pa.Array:
    """A column as one Arrow array (a table's column may be chunked)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _pylist(column: Any) -> list[Any]:
    return column.to_pylist()


def check_sizes(values: Sequence[bytes | None], keys: Sequence[bytes | None], limit: int, topic: str,
                bound: int | None = None) -> None:
    """Refuse, inside the batch (so bisection finds the row), an output the producer would refuse
    (`message.max.bytes`); as `stylus.core.sink.refuse_oversized` does for held output. `bound`: a size no row
    exceeds (the batch's total), which settles the common case without looking at the rows."""
    if bound is None:  # the total size: one copy in C, cheaper than a length per row; a null (a forwarded
        with suppress(TypeError):  # tombstone, no key) takes the slower way
            bound = len(b"".join(values)) + len(b"".join(keys))  # type: ignore[arg-type]
    if bound is not None and bound + FRAMING_BYTES <= limit:
        return
    try:  # C-level; a null (a forwarded tombstone) takes the slower way
        biggest = max(map(len, values), default=0) + max(map(len, keys), default=0)  # type: ignore[arg-type]
    except TypeError:
        biggest = max(map(len, filter(None, values)), default=0) + max(map(len, filter(None, keys)), default=0)
    if biggest + FRAMING_BYTES <= limit:
        return
    for value, key in zip(values, keys, strict=True):
        size = FRAMING_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
        if size > limit:
            raise ValueError(f"an output of {size:,} bytes to `{topic}` is too large for the producer "
                             f"(message.max.bytes {limit:,}): raise `message.max.bytes` (producer and broker) "
                             "or emit less")
