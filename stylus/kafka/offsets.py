"""End offsets that are right on real Kafka and on the embedded broker.

ListOffsets(latest) on the embedded broker answers the base offset of the last batch + 1, which
is short of the end when that batch holds several records. The high watermark carried by a Fetch
response is right, so: ask ListOffsets for a lower bound, fetch one record from just below it,
and read the watermark the fetch brought back. On real Kafka the fetch confirms the same number.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

from stylus.kafka.settings import connect


def end_offsets(bootstrap: str, partitions: Iterable[tuple[str, int]],
                timeout: float = 10.0) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (low, high) with a correct high watermark."""
    wanted = list(partitions)
    if not wanted:
        return {}
    consumer = Consumer(connect(bootstrap, **{
        "group.id": f"stylus-offsets-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,
        "isolation.level": "read_uncommitted",
    }))
    try:
        bounds: dict[tuple[str, int], tuple[int, int]] = {}
        assign = []
        for topic, partition in wanted:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            bounds[(topic, partition)] = (low, high)
            if high > low:
                assign.append(TopicPartition(topic, partition, max(low, high - 1)))
        if not assign:
            return bounds
        consumer.assign(assign)
        pending = {(tp.topic, tp.partition) for tp in assign}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                key = (msg.topic(), msg.partition())
                err = msg.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(key)
        result = dict(bounds)
        for topic, partition in {(tp.topic, tp.partition) for tp in assign}:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if high >= 0 and high != OFFSET_END:
                result[(topic, partition)] = (bounds[(topic, partition)][0], max(high, bounds[(topic, partition)][1]))
        return result
    finally:
        consumer.close()


def topic_partitions(bootstrap: str, topics: Iterable[str], timeout: float = 10.0) -> list[tuple[str, int]]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(connect(bootstrap)).list_topics(timeout=timeout).topics
    out: list[tuple[str, int]] = []
    for topic in topics:
        if topic in meta:
            out.extend((topic, p) for p in sorted(meta[topic].partitions))
    return out
