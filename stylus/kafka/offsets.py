"""End offsets that are right on real Kafka and on the embedded broker.

ListOffsets(latest) on the embedded broker answers the base offset of the last batch + 1, which
is short of the end when that batch holds several records. The high watermark carried by a Fetch
response is right, so: ask ListOffsets for a lower bound, fetch one record from just below it,
and read the watermark the fetch brought back. On real Kafka the fetch confirms the same number.

ListOffsets(earliest) on the embedded broker can be wrong too: it can answer the base offset of the
first batch the broker *stored*, and when producers race on a fresh partition a later batch can be
stored before the one at offset 0 (measured: 1 fresh partition in 30 with four transactional producers).
A reader starting there silently skips the records below. So a log start above 0 is checked by a
fetch from offset 0: real Kafka refuses it (out of range: its answer was right), the embedded broker
returns the records that were hidden.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

from stylus.kafka.settings import connect

log = logging.getLogger(__name__)
_corrected: set[tuple[str, int]] = set()  # partitions whose wrong log start was already reported


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
        "auto.offset.reset": "error",  # a fetch below the log start must say so, not move anywhere
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
        claimed = {tp: low for tp, (low, high) in result.items() if 0 < low < high}
        if claimed:
            consumer.unassign()
            for tp, low in verified_log_starts(consumer, claimed, time.monotonic() + timeout).items():
                result[tp] = (low, result[tp][1])
        return result
    finally:
        consumer.close()


def verified_log_starts(consumer: Consumer, claimed: dict[tuple[str, int], int],
                        deadline: float) -> dict[tuple[str, int], int]:
    """The claimed log start of each partition, lowered to the first record found below it. `consumer`
    must be group-less, read_uncommitted, with `auto.offset.reset=error` and no assignment."""
    consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in claimed])
    starts = dict(claimed)
    pending = set(claimed)
    try:
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1, timeout=0.2):
                key = (msg.topic(), msg.partition())
                if key not in pending:
                    continue
                pending.discard(key)  # a record, or an error: out of range (the claim was right), or EOF
                consumer.incremental_unassign([TopicPartition(*key)])
                if msg.error() is None and msg.offset() < starts[key]:
                    report = log.debug if key in _corrected else log.warning
                    report("%s[%d]: the broker gave %d as the partition's first offset, but it holds records "
                           "from %d (the embedded broker's ListOffsets, docs/faults.md)",
                           key[0], key[1], starts[key], msg.offset())
                    starts[key] = msg.offset()
                    _corrected.add(key)
    finally:
        consumer.unassign()
    return starts


def topic_partitions(bootstrap: str, topics: Iterable[str], timeout: float = 10.0) -> list[tuple[str, int]]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(connect(bootstrap)).list_topics(timeout=timeout).topics
    out: list[tuple[str, int]] = []
    for topic in topics:
        if topic in meta:
            out.extend((topic, p) for p in sorted(meta[topic].partitions))
    return out
