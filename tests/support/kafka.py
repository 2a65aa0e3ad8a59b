"""Produce and read test data with the real client."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.core.message import RawMessage
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.reader import read_topic


def produce(bootstrap: str, topic: str, records: Iterable[tuple[str | None, Any]] | Iterable[dict[str, Any]],
            *, timestamps: Iterable[int] | None = None, raw: bool = False) -> int:
    """Produce (key, value) pairs (values JSON-encoded unless raw) keyed with the Java partitioner."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random",
                         "enable.idempotence": True, "compression.type": "lz4"})
    ts_iter = iter(timestamps) if timestamps is not None else None
    count = 0
    for item in records:
        key, value = item if isinstance(item, tuple) else (None, item)
        data = value if raw else json.dumps(value).encode()
        kwargs: dict[str, Any] = {}
        if ts_iter is not None:
            kwargs["timestamp"] = next(ts_iter)
        while True:
            try:
                producer.produce(topic, data, key.encode() if isinstance(key, str) else key, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    assert producer.flush(30) == 0
    return count


def read_json(bootstrap: str, topic: str, isolation: str = "read_committed",
              timeout: float = 30.0) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in read_topic(bootstrap, topic, isolation=isolation, timeout=timeout)
            if m.value() is not None]


def read_raw(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[RawMessage]:
    return read_topic(bootstrap, topic, isolation=isolation)


def offset_holes(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, list[tuple[int, int]]]:
    """Per partition, runs of more than one offset up to the end that hold no record a read_uncommitted
    reader gets, control records included: for a failure's message. A run inside the partition is offsets
    the broker handed to a batch no reader ever gets (docs/faults.md); a run at the very end, as long as the
    number of transactional producers, is their final commit markers."""
    ends = end_offsets(bootstrap, topic_partitions(bootstrap, [topic]))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"holes-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                         "enable.partition.eof": True})
    seen: dict[int, list[int]] = {p: [] for (_, p), (low, high) in ends.items() if high > low}
    consumer.assign([TopicPartition(topic, p, ends[(topic, p)][0]) for p in seen])
    reading = set(seen)  # until each partition's end is reached (offsets that hold nothing never arrive)
    deadline = time.monotonic() + timeout
    try:
        while reading and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                err = m.error()
                if err is None:
                    seen[m.partition()].append(m.offset())
                elif err.code() == KafkaError._PARTITION_EOF:
                    reading.discard(m.partition())
    finally:
        consumer.close()
    holes = {}
    for p, offs in seen.items():
        found = [(a + 1, b) for a, b in zip([ends[(topic, p)][0] - 1, *offs], [*offs, ends[(topic, p)][1]],
                                             strict=True) if b - a > 2]
        if found:
            holes[p] = found
    return holes


def topic_with_deleted_records(bootstrap: str, records: int = 2000) -> str:
    """A one-partition topic whose first records retention has already deleted (its log start is past 0).
    Record times a minute apart every 100 records put each hundred in a segment of its own, all long past the
    topic's `retention.ms` but the active one; Kafka's cleaner (every second on the embedded broker) deletes them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"deleted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "60000", "retention.ms": "60000"})])[
        topic].result(30)
    produce(bootstrap, topic, [(None, {"i": i}) for i in range(records)],
            timestamps=[1_700_000_000_000 + (i // 100) * 60_000 for i in range(records)])
    deadline = time.monotonic() + 60
    while end_offsets(bootstrap, [(topic, 0)])[(topic, 0)][0] == 0:
        assert time.monotonic() < deadline, "retention deleted nothing within 60 s"
        time.sleep(0.2)
    return topic


def fenced_producer_errors(bootstrap: str, topic: str) -> tuple[KafkaException, KafkaException]:
    """A transactional producer fenced by a newer one of its id, and what it raises once its next record is
    refused: (the fence its `poll` serves, `_FENCED`; what its `produce` raises from then on, `_FATAL`)."""
    transactional_id = f"fenced-{uuid.uuid4().hex[:8]}"
    fenced = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    newer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    try:
        fenced.init_transactions(30)
        fenced.begin_transaction()
        newer.init_transactions(30)
        fenced.produce(topic, b"refused")
        served: KafkaException | None = None
        deadline = time.monotonic() + 30
        while served is None:
            assert time.monotonic() < deadline, "the fence was never served"
            try:
                fenced.poll(0.1)
            except KafkaException as exc:
                served = exc
        try:
            fenced.produce(topic, b"after the fence")
        except KafkaException as exc:
            return served, exc
        raise AssertionError("a fenced producer took a record")
    finally:
        newer.close()
        fenced.purge()
