"""Reading a unit's chunks inside a Spark task: Kafka ranges with confluent-kafka, archive files with
pyarrow, merged in offset order with no offset twice, filtered by the time bounds."""

from __future__ import annotations

import time
import uuid
from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.archive import SegmentSlice, read_segment_slices
from stylus.backfill.plan import Chunk, Unit
from stylus.kafka.batching import BatchSizer
from stylus.kafka.reader import RecordsDeleted
from stylus.kafka.settings import connect

#: How far a range reads ahead: until ~20,000 records wait, 1 MB per fetch. A task keeps two ranges open (the
#: unit it processes and the next), and librdkafka keeps a few hundred bytes per queued small record: with
#: librdkafka's large defaults a range would buffer most of a partition in fresh pages, page-faulting as it
#: goes. Bounded, a range reuses the same few tens of MB. 1 MB per fetch still reads 50 MB/s from a broker
#: 20 ms away.
PREFETCH: dict[str, int] = {
    "queued.min.messages": 20_000,
    "fetch.max.bytes": 1 << 20,
    "max.partition.fetch.bytes": 1 << 20,
}


class KafkaRange:
    """Records start <= offset < end of one partition. The consumer is created and assigned when the range
    is opened, so librdkafka starts fetching in its own threads at once: a task opens its next unit's
    range before processing the current one, and the next records are already there when it gets to them."""

    def __init__(self, bootstrap: str, topic: str, partition: int, start: int, end: int, *,
                 timeout: float = 30.0) -> None:
        self.topic, self.partition, self.start, self.end, self.timeout = topic, partition, start, end, timeout
        self.consumer: Consumer | None = None
        self.config: dict[str, Any] = {}
        if end > start:
            self.config = connect(bootstrap, **{
                "group.id": f"stylus-backfill-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",  # records retention deleted since the plan: fail, never skip them
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 10,
                **PREFETCH,
            })
            self.consumer = Consumer(self.config)
            self.consumer.assign([TopicPartition(topic, partition, start)])

    def batches(self, batch: int = 10_000) -> Iterator[list[Any]]:
        """Lists of at most `batch` confluent-kafka Messages (the engine reads them as the stream does; no
        wrapper and no generator step per record). Asks `consume` for at most what is left, so the last
        call never waits out its timeout; the range must end at or before the partition's true end."""
        consumer, end = self.consumer, self.end
        if consumer is None:
            return
        sizer = BatchSizer.for_consumer(batch, self.config)  # fewer per list when records are big
        try:
            position = self.start
            deadline = time.monotonic() + self.timeout
            while position < end:
                msgs = consumer.consume(num_messages=max(1, min(sizer.size, end - position)), timeout=0.2)
                if not msgs:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{self.topic}[{self.partition}] stalled at offset {position} before {end}")
                    continue
                deadline = time.monotonic() + self.timeout
                sizer.observe(msgs)
                good = [m for m in msgs if m.error() is None]
                if len(good) < len(msgs):
                    deleted = next((m for m in msgs if m.error() is not None
                                    and m.error().code() == KafkaError._AUTO_OFFSET_RESET), None)
                    if deleted is not None:
                        raise RecordsDeleted(f"{self.topic}[{self.partition}] no longer holds offset {position}: "
                                             f"retention deleted it since the backfill was planned "
                                             f"({deleted.error().str()}); plan it again")
                if len(good) < len(msgs) and any(
                        m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= end
                        for m in msgs if m.error() is not None):
                    position = end  # the true end: nothing more will come
                if not good:
                    continue
                if good[-1].offset() >= end:  # never past the range
                    good = [m for m in good if m.offset() < end]
                    if not good:
                        return
                # max: an end of partition in the same list (above) already moved past a commit marker that ends
                # the range; going back to the record before it would wait for a record that never comes
                position = max(position, good[-1].offset() + 1)
                yield good
        finally:
            self.close()

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def open_chunk(chunk: Chunk, bootstrap: str) -> KafkaRange | None:
    """Start fetching a Kafka chunk now (None for an archive chunk: it is read when its turn comes)."""
    if chunk.source != "kafka":
        return None
    return KafkaRange(bootstrap, chunk.topic, chunk.partition, chunk.start, chunk.end)


def read_chunk_batches(chunk: Chunk, bootstrap: str, archive_root: str | None, batch: int,
                       opened: KafkaRange | None = None, *, columns: bool = False) -> Iterator[Any]:
    """Records of one chunk with start <= offset < end, in offset order, in lists of at most `batch`
    messages; with `columns`, an archive chunk's as `SegmentSlice`s instead (no object per record)."""
    if chunk.source == "kafka":
        reader = opened or KafkaRange(bootstrap, chunk.topic, chunk.partition, chunk.start, chunk.end)
        yield from reader.batches(batch)
        return
    if archive_root is None or chunk.path is None:
        raise ValueError(f"archive chunk {chunk} without an archive root")
    slices = read_segment_slices(archive_root, chunk.path, chunk.start, chunk.end, batch)
    yield from slices if columns else (part.messages() for part in slices)


def open_unit(unit: Unit, bootstrap: str) -> KafkaRange | None:
    """Start fetching the unit's first chunk (see KafkaRange); hand the result to `read_unit_batches`."""
    return open_chunk(unit.chunks[0], bootstrap) if unit.chunks else None


def read_unit_batches(unit: Unit, bootstrap: str, archive_root: str | None, batch: int,
                      opened: KafkaRange | None = None, *, columns: bool = False) -> Iterator[Any]:
    """All records of a unit in offset order, in lists of at most `batch` messages (with `columns`, archive
    records as `SegmentSlice`s): each (topic, partition, offset) at most once, timestamps within
    [min_ts, max_ts). `opened`: the first chunk's range from `open_unit`."""
    last = -1
    min_ts, max_ts = unit.min_ts, unit.max_ts
    timed = min_ts is not None or max_ts is not None
    low = min_ts if min_ts is not None else -(2**63)
    high = max_ts if max_ts is not None else 2**63
    for i, chunk in enumerate(unit.chunks):
        for part in read_chunk_batches(chunk, bootstrap, archive_root, batch, opened if i == 0 else None,
                                       columns=columns):
            if isinstance(part, SegmentSlice):
                part = _trim_slice(part, last, low, high, timed)
                if part is None:
                    continue
                last = part.offsets[-1]
                yield part
                continue
            if part[0].offset() <= last:  # overlapping sources: the first copy wins
                part = [m for m in part if m.offset() > last]
                if not part:
                    continue
            last = part[-1].offset()
            if timed:
                part = [m for m in part if low <= m.timestamp()[1] < high]
                if not part:
                    continue
            yield part


def _trim_slice(part: SegmentSlice, last: int, low: int, high: int, timed: bool) -> SegmentSlice | None:
    """`part` less the offsets up to `last` (read already) and, when `timed`, the records outside [low, high)."""
    rows, offsets = part.rows, part.offsets
    if offsets[0] <= last:
        skip = bisect_right(offsets, last)
        rows, offsets = rows.slice(skip), offsets[skip:]
    if timed and offsets:
        stamps = rows.column("timestamp").to_numpy()
        keep = (stamps >= low) & (stamps < high)
        if not keep.all():
            rows, offsets = rows.filter(pa.array(keep)), [o for o, k in zip(offsets, keep.tolist(), strict=True) if k]
    return SegmentSlice(rows, offsets) if offsets else None


def read_unit(unit: Unit, bootstrap: str, archive_root: str | None) -> Iterator[Any]:
    """All records of a unit in offset order, one at a time (see `read_unit_batches`)."""
    for part in read_unit_batches(unit, bootstrap, archive_root, 10_000):
        yield from part
