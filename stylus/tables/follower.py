"""Reading table partitions into their copies: a catch-up to a fixed end, and following what comes after.

One group-less consumer (assign only, `read_committed`) per owner of table copies (a worker, a serving
instance). It never commits: the offsets a copy covers are kept in the copy itself (stylus/tables/store.py),
in the same write batch as the entries, so a restarted owner resumes where its copy ends.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from stylus.eventtime.control import is_control
from stylus.kafka.offsets import watermarks
from stylus.tables.store import Codec, TableStore

log = logging.getLogger(__name__)

#: how long a catch-up may take before the owner gives up (below the group's max.poll.interval.ms, 300 s)
CATCH_UP_TIMEOUT = 240.0

TP = tuple[str, int]


class CatchUpFailed(RuntimeError):
    """A table partition did not reach its end in time: the owner stops rather than look up a partial table."""


@dataclass
class Followed:
    """One table partition being read: its copy (shared by every partition of a global table) and codec."""

    store: TableStore
    codec: Codec
    name: str  # the table's name, for messages
    on_reset: Callable[[TableStore], None] | None = None  # the copy was made again: its owner takes the new one
    applied: int = field(default=0)  # records applied since it was added (catch-up figures)


class Follower:
    def __init__(self, config: dict[str, Any]) -> None:
        """`config`: a consumer config (client_config("consumer", ...)); group, commits and reset are ours."""
        self.consumer = Consumer({**config, "group.id": f"stylus-tables-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "enable.partition.eof": True,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        self.parts: dict[TP, Followed] = {}

    # ---------------------------------------------------------------- what is followed
    def add(self, topic: str, partition: int, followed: Followed) -> None:
        """Read `topic[partition]` into `followed.store` from where the copy ends. A copy that ends before the
        partition's log start (retention deleted records it never applied) is made again from that start."""
        tp = (topic, partition)
        if tp in self.parts:
            return
        low, _ = watermarks(self.consumer, topic, partition)
        start = followed.store.offset(partition)
        if start is not None and start < low:
            log.warning("table %s: its copy ends at %s[%d]@%d, but the topic now starts at %d (retention): "
                        "reloading it", followed.name, topic, partition, start, low)
            self._reset(followed)
            start = None
        self.parts[tp] = followed
        self.consumer.incremental_assign([TopicPartition(topic, partition,
                                                         start if start is not None else OFFSET_BEGINNING)])

    def remove(self, topic: str, partition: int) -> None:
        if self.parts.pop((topic, partition), None) is not None:
            self.consumer.incremental_unassign([TopicPartition(topic, partition)])

    def _reset(self, followed: Followed) -> None:
        """Make `followed`'s copy again (every partition reading into it starts over)."""
        old = followed.store
        new = old.reset()
        for (topic, partition), other in self.parts.items():
            if other.store is old:
                other.store = new
                self.consumer.incremental_unassign([TopicPartition(topic, partition)])
                self.consumer.incremental_assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        followed.store = new
        if followed.on_reset is not None:
            followed.on_reset(new)

    # ---------------------------------------------------------------- reading
    def ends(self, parts: Iterable[TP]) -> dict[TP, int]:
        """The end of each partition now, as a read_committed reader sees it: the last stable offset (a
        transaction still open on the table's topic ends it)."""
        return {tp: watermarks(self.consumer, *tp)[1] for tp in parts}

    def catch_up(self, parts: Iterable[TP], timeout: float = CATCH_UP_TIMEOUT) -> dict[TP, int]:
        """Apply every record of `parts` below the end each has now (its last stable offset). Returns the ends.
        Other followed partitions are applied meanwhile as their records come."""
        ends = self.ends(parts)
        deadline = time.monotonic() + timeout
        while True:
            behind = {tp: end for tp, end in ends.items() if self._position(tp) < end}
            if not behind:
                return ends
            if time.monotonic() > deadline:
                raise CatchUpFailed("tables not caught up within {:.0f}s: {}".format(timeout, ", ".join(
                    f"{self.parts[tp].name} {tp[0]}[{tp[1]}] at {self._position(tp)} of {end}"
                    for tp, end in sorted(behind.items()))))
            self.poll(timeout=0.2)

    def _position(self, tp: TP) -> int:
        offset = self.parts[tp].store.offset(tp[1])
        return offset if offset is not None else -1

    def poll(self, timeout: float = 0.0, max_records: int = 5000) -> int:
        """Apply what has arrived (waiting up to `timeout` for it), one write batch per copy. Returns the
        number of records applied."""
        if not self.parts:
            return 0
        msgs = self.consumer.consume(num_messages=max_records, timeout=timeout)
        if not msgs:
            return 0
        batches: dict[int, tuple[TableStore, dict[bytes, bytes | None], dict[int, int]]] = {}
        applied = 0
        for msg in msgs:
            tp = (msg.topic(), msg.partition())
            followed = self.parts.get(tp)
            if followed is None:  # removed since it was fetched
                continue
            store = followed.store
            _, entries, offsets = batches.setdefault(id(store), (store, {}, {}))
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # the end, past any transaction markers
                    known = offsets.get(tp[1], store.offset(tp[1]))
                    if known is None or msg.offset() > known:
                        offsets[tp[1]] = msg.offset()
                else:
                    log.warning("table %s: %s[%d]: %s", followed.name, tp[0], tp[1], err)
                continue
            offsets[tp[1]] = msg.offset() + 1
            headers = msg.headers()
            if headers and is_control(headers):  # a watermark control record of the writing processor
                continue
            change = followed.codec.entry(msg.key(), msg.value(), msg.timestamp()[1])
            if change is not None:
                entries[change[0]] = change[1]
                followed.applied += 1
                applied += 1
        for store, entries, offsets in batches.values():
            if entries or offsets:
                store.apply(entries, offsets)
        return applied

    def close(self) -> None:
        self.consumer.close()
        self.parts.clear()
