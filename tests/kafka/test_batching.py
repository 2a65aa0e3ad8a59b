"""How many records a consume() call asks for: bounded by the prefetch's byte budget, not only by count."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from stylus.core.message import RawMessage
from stylus.kafka.batching import FIRST_GUESS_BYTES, OVERHEAD_BYTES, BatchSizer

MIB = 1 << 20


def records(n: int, size: int) -> list[RawMessage]:
    return [RawMessage("t", 0, i, b"k", b"x" * size, 0) for i in range(n)]


def partition_ends(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """The end-of-partition events a consumer gets from an empty topic: messages that are no records."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "batching-eof", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    events: list[Any] = []
    deadline = time.monotonic() + 20
    try:
        while len(events) < partitions and time.monotonic() < deadline:
            events += consumer.consume(num_messages=10, timeout=0.2)
    finally:
        consumer.close()
    assert len(events) == partitions and all(e.error().code() == KafkaError._PARTITION_EOF for e in events)
    return events


def test_before_any_record_a_batch_fits_the_budget_even_if_records_are_as_big_as_a_broker_accepts() -> None:
    assert BatchSizer(2000, 4 * MIB).size == 4 * MIB // FIRST_GUESS_BYTES == 4
    assert BatchSizer.for_consumer(2000, {}).size == 64  # librdkafka's default prefetch bound: 64 MiB
    assert BatchSizer.for_consumer(2000, {"queued.max.messages.kbytes": 512}).size == 1  # never zero


def test_the_count_follows_the_size_of_the_records_seen() -> None:
    sizer = BatchSizer(2000, 4 * MIB)
    sizer.observe(records(300, 10_000))
    per_record = 10_000 + 1 + OVERHEAD_BYTES
    assert sizer.size == 4 * MIB // per_record == 411  # 4 MiB of 10 KB records, not 2,000 of them (20 MB)
    sizer.observe(records(300, 1_000_000))
    assert sizer.size == 4  # bigger records shrink the next batch at once
    for _ in range(30):
        sizer.observe(records(100, 100))
    assert sizer.size == 2000  # smaller ones let it grow back, up to the configured count


def test_end_of_partition_events_do_not_count_as_tiny_records(bootstrap: str,
                                                              topic_factory: Callable[..., str]) -> None:
    """The bug this guards against: a first batch of end-of-partition events (no value) made the records
    look 200 bytes big, and the next call took 2,000 records of 10 KB (the slow-processor test's 20 MB)."""
    topic = topic_factory("eof", partitions=2)
    sizer = BatchSizer(2000, 4 * MIB)
    sizer.observe(partition_ends(bootstrap, topic, 2))
    assert sizer.size == 4 and sizer.mean_bytes is None
    sizer.observe([*partition_ends(bootstrap, topic, 2), *records(10, 10_000)])
    assert sizer.size == 411  # only the records were measured
