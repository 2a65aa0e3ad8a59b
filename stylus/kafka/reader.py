"""Read whole topics (or offset ranges) by assignment, without joining a group: for tools and tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.core.message import RawMessage
from stylus.eventtime.control import is_control
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.settings import connect


class RecordsDeleted(LookupError):
    """A range starts below the partition's log start: retention (or deleteRecords) removed those records."""


def read_range(
    bootstrap: str,
    ranges: dict[tuple[str, int], tuple[int, int]],
    *,
    isolation: str = "read_committed",
    timeout: float = 30.0,
    partial: bool = False,
) -> Iterator[RawMessage]:
    """Records with start <= offset < end for each (topic, partition) -> (start, end), in offset order
    per partition. Stops as soon as every range is read: no waiting out a poll timeout. After `timeout`,
    raises TimeoutError, or with `partial` simply stops (what could be read was yielded)."""
    todo = {tp: (start, end) for tp, (start, end) in ranges.items() if end > start}
    if not todo:
        return
    consumer = Consumer(connect(bootstrap, **{
        "group.id": f"stylus-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "fetch.wait.max.ms": 10,
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": 10000,
        "auto.offset.reset": "error",  # a range whose start retention deleted must fail, not jump elsewhere
    }))
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in todo.items()])
        remaining = {tp: end for tp, (_, end) in todo.items()}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                if partial:
                    return
                raise TimeoutError(f"ranges not fully read within {timeout}s: {sorted(remaining)}")
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                key = (msg.topic(), msg.partition())
                end = remaining.get(key)
                err = msg.error()
                if end is None:
                    continue
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and msg.offset() >= end:
                        del remaining[key]
                    elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                        raise RecordsDeleted(f"{key[0]}[{key[1]}] no longer holds offset {todo[key][0]}: retention "
                                             f"deleted it ({err.str()})")
                    continue
                if msg.offset() >= end:
                    del remaining[key]
                    continue
                ts = msg.timestamp()[1]
                headers = msg.headers()
                if headers and is_control(headers):  # a watermark control record: not data
                    if msg.offset() + 1 >= end:
                        del remaining[key]
                        consumer.incremental_unassign([TopicPartition(*key)])
                    continue
                yield RawMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts,
                                 msg.headers())
                if msg.offset() + 1 >= end:
                    del remaining[key]
                    consumer.incremental_unassign([TopicPartition(*key)])
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str, *, isolation: str = "read_committed",
               timeout: float = 30.0, partial: bool = False) -> list[RawMessage]:
    """Every record of a topic as it is now, partition by partition."""
    parts = topic_partitions(bootstrap, [topic])
    ends = end_offsets(bootstrap, parts)
    return list(read_range(bootstrap, {tp: (low, high) for tp, (low, high) in ends.items()},
                           isolation=isolation, timeout=timeout, partial=partial))
