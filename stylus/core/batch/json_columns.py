"""JSON objects to and from Arrow columns in C (the module `_json_columns`, stylus/core/batch/_json_columns.c): no
Python object per record or per field. `decode` reads a run's values into columns; `encode` writes a table's rows
as JSON objects, byte for byte as orjson writes each row's dict.

Per record, orjson builds a dict and an object per field, and `pa.array` then reads each back: most of what a
stateless batch processor costs beyond Kafka (docs/batch.md, "What a record costs"). The C decoder reads each
value once into column buffers. It builds a column only where it builds what orjson and `pa.array` would
(one kind of scalar, or null, per column; others are `None`, left to orjson), and it takes a run only when it is
sure orjson accepts every value: for anything it does not vouch for (a value that is not an object, a number
beyond int64 or double, deep nesting, bad UTF-8), `decode` returns None and the run is decoded by orjson, which
accepts, refuses and reports as always. The encoder writes integers, booleans, strings and nulls from the Arrow
buffers and takes every other column's values as orjson writes them in one call (a JSON array: floats from a
NumPy array, the rest from Python objects), so it writes what orjson writes. `make install` builds the module
(scripts/build-native.sh); without it, every run is decoded by orjson and encoded by Polars or orjson.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa

try:
    from stylus.core.batch import _json_columns  # type: ignore[attr-defined]
except ImportError:  # not built: orjson decodes every run
    _json_columns = None

_TYPES = {"bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(), "string": pa.string()}


def available() -> bool:
    return _json_columns is not None


def decode(values: list[bytes | None], fields: Sequence[str] | None) -> tuple[list[str], list[pa.Array | None]] | None:
    """The columns of `fields` (None: every top-level field, in the order first seen) of values that are JSON
    objects or null (a null value: null in every column), as `(names, arrays)`; an array is None where the C
    decoder leaves the column to orjson. None when the run must be decoded by orjson."""
    if _json_columns is None:
        return None
    out = _json_columns.decode(values, None if fields is None else tuple(fields))
    if out is None:
        return None
    names, columns = out
    return names, [None if column is None else _array(*column) for column in columns]


def _array(kind: str, rows: int, nulls: int, validity: bytes | None, data: bytes | None,
           offsets: bytes | None) -> pa.Array:
    if kind == "null":
        return pa.nulls(rows)
    buffers: list[Any] = [None if validity is None else pa.py_buffer(validity)]
    if offsets is not None:
        buffers.append(pa.py_buffer(offsets))
    buffers.append(pa.py_buffer(data))
    return pa.Array.from_buffers(_TYPES[kind], rows, buffers, null_count=nulls)


def encode(columns: Sequence[pa.Array], names: Sequence[str], rows: int) -> tuple[list[bytes | None], int] | None:
    """Each of the `rows` rows of `columns` (one Arrow array per field of `names`) as a JSON object, byte for
    byte what `orjson.dumps(row, option=OPT_NON_STR_KEYS)` writes for the row's dict, and their total size.
    None without the C module, or for a column orjson cannot write (the caller's other encoders decide)."""
    if _json_columns is None:
        return None
    try:
        specs = [_spec(column) for column in columns]
    except TypeError:  # orjson.JSONEncodeError: a type orjson does not write
        return None
    return _json_columns.encode([orjson.dumps(name) for name in names], specs, rows)


def _spec(column: pa.Array) -> tuple[Any, ...]:
    """What `_json_columns.encode` reads of one column (see the C file)."""
    kind = column.type
    if kind in _BUFFERED:
        validity, *buffers = column.buffers()
        return (_BUFFERED[kind], validity if column.null_count else None, *buffers, column.offset)
    if kind == pa.null():
        return ("null",)
    if kind == pa.float64():  # NaN (and a null, made NaN by to_numpy) is null, as orjson writes NaN
        return ("text", orjson.dumps(column.to_numpy(zero_copy_only=False), option=orjson.OPT_SERIALIZE_NUMPY))
    return ("text", orjson.dumps(column.to_pylist(), option=orjson.OPT_NON_STR_KEYS))


_BUFFERED = {pa.int64(): "int64", pa.bool_(): "bool", pa.string(): "string"}
