"""Partition offsets by ListOffsets: the log start and end (high watermark), and the offset for a time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from stylus.kafka.settings import connect


def _offsets_client(bootstrap: str) -> Consumer:
    """A consumer outside any group: ListOffsets needs no membership, and no offsets are ever committed."""
    return Consumer(connect(bootstrap, **{"group.id": f"stylus-offsets-{uuid.uuid4().hex[:8]}",
                                          "enable.auto.commit": False}))


def end_offsets(bootstrap: str, partitions: Iterable[tuple[str, int]],
                timeout: float = 10.0) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (log start offset, high watermark), asked again while a partition's leader moves
    (`watermarks`)."""
    wanted = list(partitions)
    if not wanted:
        return {}
    consumer = _offsets_client(bootstrap)
    try:
        return {(topic, partition): watermarks(consumer, topic, partition, timeout) for topic, partition in wanted}
    finally:
        consumer.close()


#: ListOffsets answers while a partition's leader is being elected or moves (a fresh topic, a broker restart),
#: the connection was just lost, or the client replaced its handle of a restarting broker (`_DESTROY_BROKER`):
#: the same call succeeds soon.
_LEADER_MOVING = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                            KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY_BROKER, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT})


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """(log start, end) of a partition, asked of the broker by `consumer` again while its leader moves, until
    `timeout`. The end is the high watermark, or for a `read_committed` consumer the last stable offset (the
    first offset of a transaction still open): what that consumer can read up to."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=max(1.0, deadline - time.monotonic()), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def offsets_for_times(bootstrap: str, times: Mapping[tuple[str, int], int],
                      timeout: float = 10.0) -> dict[tuple[str, int], int | None]:
    """(topic, partition) -> the first offset whose record's timestamp is >= the time in ms (None: no such
    record yet, every record is older). Kafka's time index answers it in one request per broker."""
    if not times:
        return {}
    consumer = _offsets_client(bootstrap)
    try:
        found = consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in times.items()],
                                           timeout=timeout)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in found}


def topic_partitions(bootstrap: str, topics: Iterable[str], timeout: float = 10.0) -> list[tuple[str, int]]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(connect(bootstrap)).list_topics(timeout=timeout).topics
    out: list[tuple[str, int]] = []
    for topic in topics:
        if topic in meta:
            out.extend((topic, p) for p in sorted(meta[topic].partitions))
    return out


#: Answers of a group coordinator that is moving or still loading its offsets: the same call succeeds soon.
_COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                 KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT_QUEUE})


def committed_offsets(consumer: Consumer, partitions: list[TopicPartition],
                      timeout: float = 30.0) -> list[TopicPartition]:
    """The group's committed offsets (with their metadata), asked again while the group's coordinator moves
    or loads (a broker restart, a fresh offsets topic) until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(partitions, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
