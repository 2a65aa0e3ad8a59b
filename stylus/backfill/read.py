"""Reading a unit's chunks inside a Spark task: Kafka ranges with confluent-kafka, archive files with
pyarrow, merged in offset order with no offset twice, filtered by the time bounds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.archive import read_segment
from stylus.backfill.plan import Chunk, Unit


def read_kafka(bootstrap: str, topic: str, partition: int, start: int, end: int,
               timeout: float = 30.0) -> Iterator[Any]:
    """Records start <= offset < end of one partition, as confluent-kafka Messages (the engine reads them
    as the stream does; no wrapper per record). Asks `consume` for at most what is left, so the last call
    never waits out its timeout; a range must end at or before the partition's true end."""
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
        while True:
            msgs = consumer.consume(num_messages=max(1, min(10_000, end - position)), timeout=0.2)
            if not msgs and time.monotonic() > deadline:
                raise TimeoutError(f"{topic}[{partition}] stalled at offset {position} before {end}")
            for msg in msgs:
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= end:
                        return
                    continue
                offset = msg.offset()
                if offset >= end:
                    return
                yield msg
                position = offset + 1
                if position >= end:
                    return
            if msgs:
                deadline = time.monotonic() + timeout
    finally:
        consumer.close()


def read_chunk(chunk: Chunk, bootstrap: str, archive_root: str | None) -> Iterator[Any]:
    """Records of one chunk with start <= offset < end, in offset order."""
    if chunk.source == "kafka":
        yield from read_kafka(bootstrap, chunk.topic, chunk.partition, chunk.start, chunk.end)
        return
    if archive_root is None or chunk.path is None:
        raise ValueError(f"archive chunk {chunk} without an archive root")
    for msg in read_segment(archive_root, chunk.path):
        offset = msg.offset()
        if offset >= chunk.end:
            break
        if offset >= chunk.start:
            yield msg


def read_unit(unit: Unit, bootstrap: str, archive_root: str | None) -> Iterator[Any]:
    """All records of a unit in offset order: each (topic, partition, offset) at most once, timestamps
    within [min_ts, max_ts)."""
    last = -1
    min_ts, max_ts = unit.min_ts, unit.max_ts
    for chunk in unit.chunks:
        for msg in read_chunk(chunk, bootstrap, archive_root):
            offset = msg.offset()
            if offset <= last:
                continue  # overlapping sources: the first copy wins
            last = offset
            if min_ts is not None or max_ts is not None:
                ts = msg.timestamp()[1]
                if (min_ts is not None and ts < min_ts) or (max_ts is not None and ts >= max_ts):
                    continue
            yield msg
