"""Offsets for times: where a time-bounded backfill starts and stops in each partition.

Kafka's time index answers `offsets_for_times` (ListOffsets by timestamp): the first offset whose record's
timestamp is at or after the time. Exact for partitions whose timestamps do not decrease (one producer's
CreateTime, LogAppendTime); backfill filters every record by timestamp as well, so a bound is never exceeded.
"""

from __future__ import annotations

import uuid
from types import TracebackType

from confluent_kafka import Consumer, TopicPartition

from stylus.kafka.settings import connect


class TimestampProbe:
    """One group-less consumer that asks the broker's time index."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.probes = 0
        self.consumer = Consumer(connect(bootstrap, **{
            "group.id": f"stylus-probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}))

    def offset_for_time(self, topic: str, partition: int, low: int, high: int, timestamp_ms: int) -> int:
        """The first offset in [low, high] whose record has timestamp >= `timestamp_ms` (high if none)."""
        self.probes += 1
        [found] = self.consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)],
                                                  timeout=self.timeout)
        if found.error is not None:
            raise RuntimeError(f"offsets_for_times({topic}[{partition}], {timestamp_ms}) failed: {found.error}")
        offset = found.offset if found.offset >= 0 else high  # no record that late: the end
        return min(max(offset, low), high)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TimestampProbe:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
