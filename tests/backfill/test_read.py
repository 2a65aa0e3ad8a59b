"""How a backfill task reads a Kafka range: what it holds in memory ahead of the records it processes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from stylus.backfill.read import KafkaRange
from stylus.kafka.reader import RecordsDeleted
from tests.support.kafka import topic_with_deleted_records

RECORDS = 100_000


def fill(bootstrap: str, topic: str, n: int) -> None:
    """n records of ~100 bytes that lz4 cannot shrink much: the partition is ~10 MB, far beyond one fetch."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": n})
    for i in range(n):
        producer.produce(topic, os.urandom(48).hex().encode(), str(i).encode())
    assert producer.flush(60) == 0


def test_an_open_range_reads_ahead_a_bounded_number_of_records(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A task keeps two ranges open (the unit it processes and the next). Each reads ahead in librdkafka's
    threads; with 64 MB fetches a range held its whole partition in fresh memory (88 MB for 250,000 small
    records), 0.1-0.14 page faults per record of a task (stylus/backfill/read.py, PREFETCH). The consumer is
    built from the range's own settings, with statistics added. It is left unread for 2 s: librdkafka's
    reports of that time give how much it fetched ahead on its own (a report carries the queue length from
    when it was made; it reaches the callback behind the records queued before it, so they are read after)."""
    topic = topic_factory("prefetch")
    fill(bootstrap, topic, RECORDS)
    opened = KafkaRange(bootstrap, topic, 0, 0, RECORDS)
    opened.close()  # its settings are what is tested; a consumer of our own reports its queue
    stats: list[int] = []

    def report(text: str) -> None:
        part = json.loads(text)["topics"].get(topic, {}).get("partitions", {}).get("0", {})
        stats.append(part.get("fetchq_cnt", 0))

    consumer = Consumer({**opened.config, "statistics.interval.ms": 100, "stats_cb": report})
    consumer.assign([TopicPartition(topic, 0, 0)])
    time.sleep(2.0)
    read, deadline = 0, time.monotonic() + 30
    try:
        while read < RECORDS and time.monotonic() < deadline:
            read += sum(1 for m in consumer.consume(10_000, 1.0) if not m.error())
    finally:
        consumer.close()
    assert read == RECORDS
    ahead = max(stats)
    assert 20_000 <= ahead < 50_000, f"{ahead} of {RECORDS} records fetched ahead (reports: {stats[:25]})"


def test_a_range_that_ends_on_a_commit_marker_ends(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A transaction committed last leaves its marker at the partition's last offset: a read_committed range up to
    the end holds no record there, and the end of partition comes in the same `consume` list as the last records.
    The range once went back from the end to the offset after its last record and waited for it (30 s, then
    TimeoutError); every partition an exactly-once processor writes ends like this."""
    topic = topic_factory("marker")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(50):
        producer.produce(topic, b"v", str(i).encode())
    producer.commit_transaction()
    end = 51  # 50 records and the commit marker
    for _ in range(20):  # the coordinator writes the marker after the commit returns
        if _high(bootstrap, topic) == end:
            break
        time.sleep(0.1)
    # a stall at the marker raises TimeoutError after the range's 5 s
    offsets = [m.offset() for batch in KafkaRange(bootstrap, topic, 0, 0, end, timeout=5).batches() for m in batch]
    assert offsets == list(range(50))


def _high(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "high"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_a_range_whose_records_retention_deleted_since_the_plan_fails_clearly(bootstrap: str) -> None:
    topic = topic_with_deleted_records(bootstrap)
    started = time.monotonic()
    with pytest.raises(RecordsDeleted, match=rf"{topic}\[0\] no longer holds offset 0: retention deleted it"):
        for _ in KafkaRange(bootstrap, topic, 0, 0, 2000).batches():
            pass
    assert time.monotonic() - started < 20  # an answer, not a stall until the range's 30 s timeout
