"""The driver's stand-in for the broker: every topic an append-only log per partition, in memory.

An entry keeps the bytes a producer would have written, so processors downstream decode them with their
topic's serde exactly as from Kafka. Output that the runtime holds back until a checkpoint (at-most-once
output) or writes inside an open transaction (exactly-once output) is appended at once but marked as
such, and a crash drops it (`GONE`, like an aborted transaction's records: its offsets stay used).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from confluent_kafka import murmur2

from stylus.config.model import Pipeline
from stylus.core.message import RawMessage
from stylus.kafka.admin import pipeline_topics


class Status(Enum):
    VISIBLE = "visible"  # in Kafka for every reader
    HELD = "held"  # at-most-once output waiting in the producer's memory for the checkpoint
    OPEN = "open"  # exactly-once output inside a transaction not committed yet
    GONE = "gone"  # dropped by a crash before it was released or committed


@dataclass
class Entry:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes]] | None
    status: Status = Status.VISIBLE
    control: bool = False  # a watermark control record (stylus/eventtime/control.py)
    seq: int = 0  # position among every entry of every topic: the order records were produced in

    def message(self) -> RawMessage:
        return RawMessage(self.topic, self.partition, self.offset, self.key, self.value, self.timestamp,
                          self.headers)


def partition_for(key: bytes, partitions: int) -> int:
    """The runtime's producers partition with librdkafka's `murmur2_random` (stylus/kafka/settings.py),
    the Java client's murmur2: this is the same librdkafka function."""
    return int(murmur2(key, partitions))


class Topics:
    """Every topic of the pipeline (dead-letter and late-record topics included), partitioned as declared."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.widths = {name: spec.partitions for name, spec in pipeline_topics(pipeline).items()}
        self.logs: dict[str, list[list[Entry]]] = {}
        self.order: dict[str, list[Entry]] = {}
        self._next_seq = 0
        self._round_robin: dict[str, int] = {}

    def width(self, topic: str) -> int:
        width = self.widths.get(topic)
        if width is None:
            raise KeyError(f"`{topic}` is not a topic of this pipeline; it has {sorted(self.widths)}")
        return width

    def pick_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """As a producer does: the given partition, murmur2 of the key, or (no key) the next partition in
        turn: librdkafka spreads keyless records at random, the driver round-robin, to stay deterministic."""
        width = self.width(topic)
        if partition is not None and partition >= 0:
            if partition >= width:
                raise ValueError(f"`{topic}` has {width} partitions; there is no partition {partition}")
            return partition
        if key is not None:
            return partition_for(key, width)
        turn = self._round_robin.get(topic, 0)
        self._round_robin[topic] = turn + 1
        return turn % width

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, timestamp: int,
               headers: list[tuple[str, bytes]] | None, status: Status = Status.VISIBLE,
               control: bool = False) -> Entry:
        width = self.width(topic)
        logs = self.logs.setdefault(topic, [[] for _ in range(width)])
        log = logs[partition]
        entry = Entry(topic, partition, len(log), key, value, timestamp, headers or None, status, control,
                      self._next_seq)
        self._next_seq += 1
        log.append(entry)
        self.order.setdefault(topic, []).append(entry)
        return entry

    def partition_log(self, topic: str, partition: int) -> list[Entry]:
        logs = self.logs.get(topic)
        return logs[partition] if logs is not None else []

    def entries(self, topic: str) -> list[Entry]:
        """Every entry of `topic` in the order it was produced (control records and dropped ones included)."""
        self.width(topic)
        return self.order.get(topic, [])
