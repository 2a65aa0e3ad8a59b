"""`stylus table load`: rows of a JSON-lines or Parquet file produced into a table's topic, keyed by the
table's `key` field (the Java partitioner, as every producer of the runtime), so the table holds them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from stylus.config.model import Pipeline
from stylus.errors import ClearError
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config
from stylus.serde import encode_key


class LoadError(ClearError):
    """A file or row that cannot be loaded into the table as asked."""


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a `.parquet` file (or a directory of them), else of a JSON-lines file."""
    if path.is_dir() or path.suffix == ".parquet":
        from stylus.extras import require

        require("archive", "loading a Parquet file into a table")
        import pyarrow.parquet as pq

        from stylus.tables.parquet import snapshot_files

        for file in snapshot_files(path):
            for batch in pq.ParquetFile(file).iter_batches(batch_size=65_536):
                yield from batch.to_pylist()
        return
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise LoadError(f"{path}:{number}: not JSON ({exc}); fix: one JSON object per line") from exc
            if not isinstance(row, dict):
                raise LoadError(f"{path}:{number}: a JSON object per line is needed, not {type(row).__name__}")
            yield row


def load_rows(bootstrap: str, pipeline: Pipeline, table: str, rows: Iterable[dict[str, Any]],
              key: str | None = None) -> int:
    """Produce `rows` to `table`'s topic keyed by `key` (default: the table's `key` field); returns the count.
    Waits until every record is acknowledged."""
    spec = pipeline.tables.get(table)
    if spec is None:
        raise LoadError(f"no table `{table}` in {pipeline.source}; declared: "
                        f"{', '.join(sorted(pipeline.tables)) or 'none'}")
    field = key or spec.key
    if field is None:
        raise LoadError(f"table `{table}` names no `key` field to key the rows by; fix: add `key: FIELD` to "
                        f"tables.{table} in {pipeline.source}, or pass --key FIELD")
    # rows are idempotent by nature (the latest per key wins), and one request in flight keeps a file's order:
    # no idempotent producer, whose first record waits for the transaction coordinator (a second on a new broker)
    producer = Producer(client_config("producer", bootstrap, pipeline, None,
                                      {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}))
    count = 0
    try:
        for number, row in enumerate(rows, 1):
            value = row.get(field)
            if value is None:
                raise LoadError(f"row {number} has no `{field}`: {str(row)[:200]}")
            data = orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS)
            while True:
                try:
                    producer.produce(spec.topic, data, encode_key(value))
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
        left = producer.flush(60)
        if left:
            raise LoadError(f"{left} rows were not acknowledged by the broker within 60 s")
    finally:
        close_producer(producer)
    return count
