"""The Parquet archive of topics, shared by the archiver processor (writes) and backfill (reads).

Layout (Hive-style): `{root}/topic={topic}/date={YYYY-MM-DD}/part-{partition:05d}-{first:020d}-{last:020d}.parquet`
with columns topic, partition, offset, timestamp, key, value (bytes, as on the topic) and headers. The file
name is derived from the partition and the inclusive offset range it holds, so writing the same records
again (a re-run after a crash) overwrites the same file; a file that starts at the same offset supersedes
older ones (`write_segment` removes them). Readers still dedupe by (topic, partition, offset).
`root` is a local directory, `file:///dir`, or `hdfs://namenode:9870/dir` (WebHDFS through the `hdfs` package).
"""

from __future__ import annotations

import io
import os
import re
import uuid
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlparse

from stylus.core.message import RawMessage
from stylus.extras import MissingExtra, require

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
except ModuleNotFoundError as exc:
    raise MissingExtra("archive", "the Parquet archive (stylus.archive)") from exc

SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])

_NAME = re.compile(r"^part-(\d{5})-(\d{20})-(\d{20})\.parquet$")
DEFAULT_ROOT = "./.stylus/archive"


class Segment(NamedTuple):
    """One archive file: which partition and inclusive offset range it holds."""

    path: str
    topic: str
    date: str
    partition: int
    first: int
    last: int


def segment_name(partition: int, first: int, last: int) -> str:
    return f"part-{partition:05d}-{first:020d}-{last:020d}.parquet"


def date_of(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%d")


class FileSystem(Protocol):
    def write_bytes(self, path: str, data: bytes) -> None: ...
    def read_bytes(self, path: str) -> bytes: ...
    def listdir(self, path: str) -> list[str]: ...
    def delete(self, path: str) -> None: ...


class LocalFS:
    def write_bytes(self, path: str, data: bytes) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{target.name}")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)  # readers never see a half-written file

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def listdir(self, path: str) -> list[str]:
        p = Path(path)
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []

    def delete(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)


class HdfsFS:
    """WebHDFS via the `hdfs` package (the Hadoop jars bundled with pyspark cannot do webhdfs)."""

    def __init__(self, url: str, user: str | None = None) -> None:
        require("hdfs", "an hdfs:// archive")
        from hdfs import InsecureClient

        self.client = InsecureClient(url, user=user or os.environ.get("HADOOP_USER_NAME"))

    def write_bytes(self, path: str, data: bytes) -> None:
        tmp = f"{path.rsplit('/', 1)[0]}/.tmp-{uuid.uuid4().hex[:8]}"
        self.client.write(tmp, data=data, overwrite=True)
        if self.client.status(path, strict=False) is not None:
            self.client.delete(path)
        self.client.rename(tmp, path)

    def read_bytes(self, path: str) -> bytes:
        with self.client.read(path) as reader:
            return bytes(reader.read())

    def listdir(self, path: str) -> list[str]:
        return sorted(self.client.list(path)) if self.client.status(path, strict=False) else []

    def delete(self, path: str) -> None:
        self.client.delete(path)


def open_root(root: str) -> tuple[FileSystem, str]:
    """(filesystem, base path) for an archive root URI."""
    parsed = urlparse(root)
    if parsed.scheme in ("hdfs", "webhdfs"):
        return HdfsFS(f"http://{parsed.netloc}"), parsed.path.rstrip("/") or "/"
    if parsed.scheme == "file":
        return LocalFS(), parsed.path
    return LocalFS(), root


def write_segment(root: str, topic: str, partition: int, rows: Sequence[Any]) -> Segment:
    """Write records of one partition (one date, offset order) as one file; remove files it supersedes.
    `rows`: messages (a `RawMessage`, a consumed confluent-kafka Message) or tuples of RawMessage's fields."""
    fs, base = open_root(root)
    msgs = [RawMessage(*r) if isinstance(r, tuple) else r for r in rows]
    first, last = msgs[0].offset(), msgs[-1].offset()
    date = date_of(msgs[0].timestamp()[1])
    table = pa.Table.from_pydict({
        "topic": [topic] * len(msgs),
        "partition": [partition] * len(msgs),
        "offset": [m.offset() for m in msgs],
        "timestamp": [m.timestamp()[1] for m in msgs],
        "key": [m.key() for m in msgs],
        "value": [m.value() for m in msgs],
        "headers": [[{"key": k, "value": v} for k, v in (m.headers() or [])] or None for m in msgs],
    }, schema=SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    directory = f"{base}/topic={topic}/date={date}"
    name = segment_name(partition, first, last)
    fs.write_bytes(f"{directory}/{name}", buffer.getvalue())
    prefix = f"part-{partition:05d}-{first:020d}-"
    for other in fs.listdir(directory):
        if other.startswith(prefix) and other != name and _NAME.match(other):
            fs.delete(f"{directory}/{other}")
    return Segment(f"{directory}/{name}", topic, date, partition, first, last)


def list_segments(root: str, topic: str, dates: tuple[str | None, str | None] = (None, None)) -> list[Segment]:
    """Archive files of a topic, optionally only dates in [from_date, to_date], by (partition, first)."""
    fs, base = open_root(root)
    out: list[Segment] = []
    topic_dir = f"{base}/topic={topic}"
    for entry in fs.listdir(topic_dir):
        if not entry.startswith("date="):
            continue
        date = entry[5:]
        if (dates[0] and date < dates[0]) or (dates[1] and date > dates[1]):
            continue
        for name in fs.listdir(f"{topic_dir}/{entry}"):
            match = _NAME.match(name)
            if match:
                out.append(Segment(f"{topic_dir}/{entry}/{name}", topic, date, int(match.group(1)),
                                   int(match.group(2)), int(match.group(3))))
    out.sort(key=lambda s: (s.partition, s.first, s.last))
    return out


def read_segment(root: str, path: str) -> Iterator[RawMessage]:
    """The records of one archive file, in offset order."""
    for batch in read_segment_batches(root, path):
        yield from batch


class SegmentSlice(NamedTuple):
    """Consecutive records of one archive file as columns: `rows` (the file's columns), and its offsets as
    Python ints (the range was cut on them)."""

    rows: pa.Table
    offsets: list[int]

    def source(self) -> tuple[str, int] | None:
        """The one topic and partition of the slice's rows (`write_segment` writes one of each per file); None
        when they differ (a file written otherwise): such rows go as messages, each with its own."""
        topic, partition = _values(self.rows, "topic"), _values(self.rows, "partition")
        if isinstance(topic, repeat) and isinstance(partition, repeat):
            return next(topic), next(partition)
        return None

    def columns(self) -> tuple[list[bytes | None], list[bytes | None], list[int], list[Any]]:
        """keys, values, timestamps, headers: one item per record, no object per record."""
        rows = self.rows
        headers = _headers(rows)
        return (rows.column("key").to_pylist(), rows.column("value").to_pylist(), rows.column("timestamp").to_pylist(),
                [None] * rows.num_rows if isinstance(headers, repeat) else list(headers))

    def messages(self) -> list[RawMessage]:
        rows = self.rows
        return list(map(RawMessage, _values(rows, "topic"), _values(rows, "partition"), self.offsets,
                        rows.column("key").to_pylist(), rows.column("value").to_pylist(),
                        rows.column("timestamp").to_pylist(), _headers(rows)))


def read_segment_slices(root: str, path: str, start: int = 0, end: int = 2**63 - 1,
                        batch: int = 10_000) -> Iterator[SegmentSlice]:
    """The records of one archive file with start <= offset < end, in offset order, in slices of at most `batch`.

    Why not row by row: this is a backfill task's input, and a Python step per record per column cost a task
    more than reading the same records from Kafka. The range is cut by binary search on the sorted offsets; a
    slice becomes Python objects column by column (`SegmentSlice.messages`), or stays columns (`columns`: a
    batch processor's run needs no object per record)."""
    fs, _ = open_root(root)
    # ParquetFile, not read_table: that one imports pyarrow.dataset and pandas
    table = pq.ParquetFile(pa.BufferReader(fs.read_bytes(path))).read()
    if table.num_rows == 0:
        return
    column = table.column("offset")
    if table.num_rows > 1 and not pc.all(pc.less(column.slice(0, table.num_rows - 1), column.slice(1))).as_py():
        table = table.sort_by("offset")  # written in offset order by `write_segment`; anything else is sorted
        column = table.column("offset")
    # the range is cut on the offsets as Python ints, which the messages need anyway: comparing the column with
    # a Python int in Arrow would import pandas, a slow import in every fresh worker
    offsets = column.to_pylist()
    low, high = bisect_left(offsets, start), bisect_left(offsets, end)
    for first in range(low, high, batch):
        last = min(first + batch, high)
        yield SegmentSlice(table.slice(first, last - first), offsets[first:last])


def read_segment_batches(root: str, path: str, start: int = 0, end: int = 2**63 - 1,
                         batch: int = 10_000) -> Iterator[list[RawMessage]]:
    """The records of one archive file with start <= offset < end, in offset order, in lists of at most `batch`
    (`read_segment_slices`, as messages: topic and partition, and headers when a file has none, are not
    converted per row)."""
    for part in read_segment_slices(root, path, start, end, batch):
        yield part.messages()


def _values(rows: pa.Table, name: str) -> Iterable[Any]:
    """A column's values, or one value repeated when every row holds it (the topic and partition of a file)."""
    column = rows.column(name)
    if column.null_count == 0:
        bounds = pc.min_max(column).as_py()
        if bounds["min"] == bounds["max"]:
            return repeat(bounds["min"])
    return column.to_pylist()


def _headers(rows: pa.Table) -> Iterable[list[tuple[str, bytes]] | None]:
    if "headers" not in rows.column_names or rows.column("headers").null_count == rows.num_rows:
        return repeat(None)
    return [[(h["key"], h["value"]) for h in hs] if hs else None for hs in rows.column("headers").to_pylist()]
