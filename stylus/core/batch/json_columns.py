"""A run's JSON objects decoded straight into Arrow columns in C (the module `_json_columns`,
stylus/core/batch/_json_columns.c): no Python object per record or per field.

Per record, orjson builds a dict and an object per field, and `pa.array` then reads each back: most of what a
stateless batch processor costs beyond Kafka (docs/batch.md, "What a record costs"). The C decoder reads each
value once into column buffers. It builds a column only where it builds what orjson and `pa.array` would
(one kind of scalar, or null, per column; others are `None`, left to orjson), and it takes a run only when it is
sure orjson accepts every value: for anything it does not vouch for (a value that is not an object, a number
beyond int64 or double, deep nesting, bad UTF-8), `decode` returns None and the run is decoded by orjson, which
accepts, refuses and reports as always. `make install` builds the module (scripts/build-native.sh); without it,
every run is decoded by orjson.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
