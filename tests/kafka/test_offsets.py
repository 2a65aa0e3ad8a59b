"""End offsets and range reads that are right on the embedded broker, whose ListOffsets(latest) is not."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range, read_topic
from tests.support.kafka import produce


def test_end_offsets_are_exact_where_list_offsets_is_not(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("ends", partitions=2)
    produce(bootstrap, topic, [(f"k{i}", {"i": i}) for i in range(1000)])  # lingered: multi-record batches
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends-probe"})
    listed = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                 for p in range(2))
    consumer.close()
    exact = end_offsets(bootstrap, [(topic, 0), (topic, 1)])
    assert sum(high for _, high in exact.values()) == 1000
    assert listed <= 1000  # the broker's answer is a lower bound (equal on real Kafka)


def test_read_range_is_exact_at_every_boundary(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("range", partitions=1)
    produce(bootstrap, topic, [(None, {"i": i}) for i in range(500)])
    chunks = [(0, 137), (137, 138), (138, 400), (400, 500)]
    offsets = [m.offset() for start, end in chunks for m in read_range(bootstrap, {(topic, 0): (start, end)})]
    assert offsets == list(range(500))
    assert list(read_range(bootstrap, {(topic, 0): (500, 500)})) == []
    assert [m.offset() for m in read_topic(bootstrap, topic)] == list(range(500))


def test_empty_topic_reads_nothing(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("empty", partitions=3)
    assert read_topic(bootstrap, topic) == []
    assert all(high == 0 for _, high in end_offsets(bootstrap, [(topic, p) for p in range(3)]).values())
