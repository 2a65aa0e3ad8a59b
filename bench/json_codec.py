"""JSON to and from Arrow columns, per row, in one process (no broker): the C module (`json_columns`) against
the ways it replaced, on bench.throughput's records and bench.batch's totals outputs.

    .venv/bin/python -m bench.json_codec [--rows 2000] [--repeat 200]

Decoding: runs of `{id, type, user, v}` into the columns of one field (`type`, as the filter; `v`, as the
totals) and of every field; the old way is orjson per record then `pa.array` per field (`record_batch` without
the C module). Encoding: tables of (key, count, sum) into JSON values; the old ways are Polars' struct
`json_encode` and orjson per row. Prints ns per row, best of 5 timings of `--repeat` calls each.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("POLARS_MAX_THREADS", "1")

import numpy as np
import orjson
import pyarrow as pa

from bench.throughput import TYPES
from stylus.core.batch import json_columns
from stylus.core.batch.columns import Run, decode_values, record_batch
from stylus.core.batch.encode import encode_values


def per_row(call: Callable[[], Any], rows: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            call()
        best = min(best, (time.perf_counter() - started) / repeat / rows * 1e9)
    return best


def without_c(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` as without the C module."""
    def run() -> Any:
        module, json_columns._json_columns = json_columns._json_columns, None
        try:
            return call()
        finally:
            json_columns._json_columns = module
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    if not json_columns.available():
        raise SystemExit("the C module is not built: `make install`")
    rows, repeat = args.rows, args.repeat
    rng = random.Random(1)
    values: list[bytes | None] = [orjson.dumps({"id": i, "type": TYPES[i % 5], "user": rng.randrange(100000),
                                                "v": rng.random()}) for i in range(rows)]
    run = Run.of_columns("t", 0, range(rows), [b"k"] * rows, values, list(range(rows)), [None] * rows)

    def batch(fields: tuple[str, ...] | None) -> pa.RecordBatch:
        decoded, _ = decode_values(run.values, "json", fields)
        return record_batch(run, None, decoded, "json", fields)

    print(f"decoding {rows:,} values a run into a RecordBatch, ns per row (C / orjson + pa.array):")
    for fields in (("type",), ("v",), None):
        c = per_row(lambda: batch(fields), rows, repeat)  # noqa: B023 - called within the iteration
        old = per_row(without_c(lambda: batch(fields)), rows, repeat)  # noqa: B023
        print(f"  {'every field' if fields is None else fields[0]:12s} {c:7.1f} / {old:7.1f}")
    table = pa.table({"key": pa.array([f"k{rng.randrange(10000)}" for _ in range(rows)]),
                      "count": np.arange(rows), "sum": np.random.default_rng(1).random(rows)})
    columns = ["key", "count", "sum"]
    print(f"encoding {rows:,} rows (key, count, sum) as JSON values, ns per row:")
    print(f"  C            {per_row(lambda: encode_values(table, columns, 'json'), rows, repeat):7.1f}")
    print(f"  Polars       {per_row(without_c(lambda: encode_values(table, columns, 'json')), rows, repeat):7.1f}")
    dicts = table.to_pylist()
    print(f"  orjson a row {per_row(lambda: [orjson.dumps(row) for row in dicts], rows, repeat):7.1f}"
          " (dicts already made)")


if __name__ == "__main__":
    main()
