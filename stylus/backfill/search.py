"""Offsets for times, found by reading record timestamps.

The embedded broker answers `offsets_for_times` with 0, so we do not ask it: a binary search over
[low, high) fetches the record at (or just after) the middle offset and compares its timestamp.
Correct on any broker for partitions whose timestamps do not decrease (one producer's CreateTime,
LogAppendTime); backfill filters every record by timestamp as well, so a bound is never exceeded.
"""

from __future__ import annotations

import time
import uuid
from types import TracebackType

from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.kafka.settings import connect


class TimestampProbe:
    """One group-less consumer that reads single records by offset."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.probes = 0
        self.consumer = Consumer(connect(bootstrap, **{
            "group.id": f"stylus-probe-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "fetch.max.bytes": 1 << 20,
            "max.partition.fetch.bytes": 1 << 16,
        }))

    def record_at(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `offset`, None at the end of the partition.
        Only call it with offset < the partition's (correct) high watermark: the broker stalls past it."""
        self.probes += 1
        self.consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(num_messages=1, timeout=0.2):
                err = msg.error()
                if err is None:
                    return msg.offset(), msg.timestamp()[1]
                if err.code() == KafkaError._PARTITION_EOF:
                    return None
        raise TimeoutError(f"no record from {topic}[{partition}]@{offset} within {self.timeout}s")

    def offset_for_time(self, topic: str, partition: int, low: int, high: int, timestamp_ms: int) -> int:
        """The first offset in [low, high] whose record has timestamp >= `timestamp_ms` (high if none)."""
        lo, hi = low, high
        while lo < hi:
            mid = (lo + hi) // 2
            found = self.record_at(topic, partition, mid)
            if found is None or found[0] >= hi:
                hi = mid  # nothing at [mid, hi): the answer is at or before mid
            elif found[1] >= timestamp_ms:
                hi = mid  # offsets in [mid, found) hold no record, so mid is as good as found
            else:
                lo = found[0] + 1
        return lo

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TimestampProbe:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
