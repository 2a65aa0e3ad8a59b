"""Reading a unit's chunks inside a Spark task: Kafka ranges with confluent-kafka, archive files with
pyarrow, merged in offset order with no offset twice, filtered by the time bounds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from itertools import islice
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.archive import read_segment
from stylus.backfill.plan import Chunk, Unit


def read_kafka_batches(bootstrap: str, topic: str, partition: int, start: int, end: int, *,
                       batch: int = 10_000, timeout: float = 30.0) -> Iterator[list[Any]]:
    """Records start <= offset < end of one partition, as lists of confluent-kafka Messages of at most
    `batch` (the engine reads them as the stream does; no wrapper per record, no generator step per
    record). Asks `consume` for at most what is left, so the last call never waits out its timeout; a
    range must end at or before the partition's true end."""
    if end <= start:
        return
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"stylus-backfill-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 10,
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": 100_000,
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
    })
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        deadline = time.monotonic() + timeout
        while position < end:
            msgs = consumer.consume(num_messages=max(1, min(batch, end - position)), timeout=0.2)
            if not msgs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}[{partition}] stalled at offset {position} before {end}")
                continue
            deadline = time.monotonic() + timeout
            good = [m for m in msgs if m.error() is None]
            if len(good) < len(msgs) and any(m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= end
                                             for m in msgs if m.error() is not None):
                position = end  # the true end: nothing more will come
            if not good:
                continue
            if good[-1].offset() >= end:  # never past the range (consume asked for at most what was left)
                good = [m for m in good if m.offset() < end]
                if not good:
                    return
            position = good[-1].offset() + 1
            yield good
    finally:
        consumer.close()


def read_kafka(bootstrap: str, topic: str, partition: int, start: int, end: int,
               timeout: float = 30.0) -> Iterator[Any]:
    """The same records one at a time."""
    for batch in read_kafka_batches(bootstrap, topic, partition, start, end, timeout=timeout):
        yield from batch


def read_chunk_batches(chunk: Chunk, bootstrap: str, archive_root: str | None, batch: int) -> Iterator[list[Any]]:
    """Records of one chunk with start <= offset < end, in offset order, in lists of at most `batch`."""
    if chunk.source == "kafka":
        yield from read_kafka_batches(bootstrap, chunk.topic, chunk.partition, chunk.start, chunk.end, batch=batch)
        return
    if archive_root is None or chunk.path is None:
        raise ValueError(f"archive chunk {chunk} without an archive root")
    records = (m for m in read_segment(archive_root, chunk.path) if chunk.start <= m.offset() < chunk.end)
    while True:
        part = list(islice(records, batch))
        if not part:
            return
        yield part


def read_chunk(chunk: Chunk, bootstrap: str, archive_root: str | None) -> Iterator[Any]:
    """Records of one chunk with start <= offset < end, in offset order."""
    for part in read_chunk_batches(chunk, bootstrap, archive_root, 10_000):
        yield from part


def read_unit_batches(unit: Unit, bootstrap: str, archive_root: str | None, batch: int) -> Iterator[list[Any]]:
    """All records of a unit in offset order, in lists of at most `batch`: each (topic, partition, offset)
    at most once, timestamps within [min_ts, max_ts)."""
    last = -1
    min_ts, max_ts = unit.min_ts, unit.max_ts
    timed = min_ts is not None or max_ts is not None
    low = min_ts if min_ts is not None else -(2**63)
    high = max_ts if max_ts is not None else 2**63
    for chunk in unit.chunks:
        for part in read_chunk_batches(chunk, bootstrap, archive_root, batch):
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


def read_unit(unit: Unit, bootstrap: str, archive_root: str | None) -> Iterator[Any]:
    """All records of a unit in offset order, one at a time (see `read_unit_batches`)."""
    for part in read_unit_batches(unit, bootstrap, archive_root, 10_000):
        yield from part
