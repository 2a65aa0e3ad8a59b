"""A processor's state changes in a compacted Kafka topic: a second restore source for local RocksDB state.

With `state.changelog: true` (exactly-once state and output only) every checkpoint produces its state changes
to the changelog partition of its input partition (`Pipeline.changelog_topic`) inside the same Kafka
transaction that commits the outputs and the input offset. A committed transaction therefore makes the state
changes, the outputs and the offset visible together, and an aborted or fenced one none of them: reading the
partition `read_committed` from its beginning rebuilds exactly the state the committed offset belongs to,
without a backup and without the input (which retention may have deleted). Compaction keeps the latest value of
each key, and a tombstone (a None value) deletes it.

Each checkpoint's records start with an offset mark: the state store's own offset key, holding the input offset
the checkpoint brings the state to. A restore for the group's committed offset C stops at the first mark past
C: the partition may have moved on to another owner while the restore ran (a frozen restorer, a zombie), and
the later transactions belong to later offsets, which recovery replays or the new owner holds.

This module only writes and reads the records; wiring them into the checkpoint and recovery is the runtime's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.kafka.offsets import watermarks
from stylus.state.kv import KV
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

#: records written to RocksDB per write batch while restoring: big enough to amortise a batch, small enough
#: to keep the pending dict (later records of a key replace earlier ones in it) a few MB
RESTORE_BATCH = 10_000
#: seconds between two progress reports (and log lines) of a restore
PROGRESS_EVERY = 1.0
#: errors the restore cannot outlast: the topic is gone or not ours to read
_PERMANENT = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        KafkaError._UNKNOWN_TOPIC})
#: a restore that reads nothing new for this long while short of its end fails instead of hanging a rebalance
STALL_TIMEOUT = 60.0


#: the key of a checkpoint's offset mark: the state store's own offset key, so a restored mark is harmless
OFFSET_MARK = PartitionStore.OFFSET_KEY


@dataclass(frozen=True)
class RestoreResult:
    records: int  # changelog records read (tombstones included); keys overwritten later count each time
    seconds: float
    bytes: int  # key + value bytes read


def write_changes(producer: Producer, topic: str, partition: int, changes: Mapping[bytes, bytes | None],
                  offset: int | None = None) -> int:
    """Produce each state change to `partition` of the changelog (None: a tombstone) and return how many;
    with `offset`, first the mark of the input offset these changes bring the state to.

    The partition is explicit, not chosen by key: changelog partition p holds the state of input partition p,
    whatever the state's keys hash to. The caller owns the producer (transactional: these records commit or
    abort with the checkpoint's transaction), so nothing here flushes, commits or waits for delivery."""
    count = 0
    if offset is not None:
        changes = {**PartitionStore.offset_change(offset), **changes}
    for key, value in changes.items():
        while True:
            try:
                producer.produce(topic, value, key, partition=partition)
                break
            except BufferError:  # the producer's queue is full: let librdkafka send some, then try again
                producer.poll(0.05)
        count += 1
    return count


def restore(consumer_config: dict[str, Any], topic: str, partition: int, kv: KV, *,
            progress: Callable[[int, int], None] | None = None, upto: int | None = None) -> RestoreResult:
    """Read changelog `partition` of `topic` from its beginning to its end into `kv` (a RocksKV, written in
    batches of RESTORE_BATCH): later records of a key win, tombstones delete it. With `upto`, the read stops
    at the first offset mark past it: the state is then that of input offset `upto`.

    The end is the partition's last stable offset when the restore starts (read_committed): every committed
    transaction before it is read, aborted ones are skipped by the consumer. A transaction still open then
    would hold the end back, so fence the partition's previous owner (`init_transactions`) first.
    `consumer_config` is a consumer's settings (`client_config("consumer", ...)`); the restore uses them with a
    throwaway group id and assignment only: it joins no group and commits nothing. `progress(done, total)`
    gets the offsets read out of those to read, about once a second and at the end."""
    started = time.monotonic()
    name = f"{topic}[{partition}]"
    settings = {k: v for k, v in consumer_config.items() if k != "group.instance.id"}  # no group to be a member of
    consumer = Consumer({
        **settings,
        "group.id": f"stylus-changelog-restore-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",  # compaction or retention moved the log start: read from where it is
    })
    records = size = 0
    pending: dict[bytes, bytes | None] = {}
    try:
        low, end = watermarks(consumer, topic, partition)  # read_committed: the end is the last stable offset
        position = low  # the next offset to read
        reported = last_move = time.monotonic()
        if end > low:  # else nothing was ever committed there (or retention removed all of it)
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while position < end:
            batch = consumer.consume(num_messages=RESTORE_BATCH, timeout=0.2)
            moved = position
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:  # the position says so too; either ends the read
                        position = max(position, msg.offset())
                    elif err.fatal() or err.code() in _PERMANENT:
                        raise KafkaException(err)
                    else:  # a lost connection and the like: librdkafka carries on (the stall timeout bounds it)
                        log.warning("restoring changelog %s: %s", name, err.str())
                    continue
                if msg.offset() >= end:  # committed after the restore began: not part of what it restores
                    position = end
                    break
                key, value = msg.key(), msg.value()
                if key == OFFSET_MARK and upto is not None and value and PartitionStore.offset_of(value) > upto:
                    position = end  # a later checkpoint's changes: not part of the state at `upto`
                    break
                position = msg.offset() + 1
                records += 1
                size += len(key or b"") + len(value or b"")
                if key is not None:  # a changelog record always has a key; a keyless one restores nothing
                    pending[key] = value
                    if len(pending) >= RESTORE_BATCH:
                        kv.write(pending)
                        pending = {}
            if position < end:  # the consumer's position passes transaction markers and aborted records too
                position = max(position, consumer.position([TopicPartition(topic, partition)])[0].offset)
            now = time.monotonic()
            if position > moved:
                last_move = now
            elif now - last_move > STALL_TIMEOUT:
                raise TimeoutError(f"changelog {name}: no progress for {STALL_TIMEOUT:.0f}s at offset {position} "
                                   f"of {end}")
            if now - reported >= PROGRESS_EVERY and position < end:
                reported = now
                _report(name, progress, position - low, end - low, records, now - started)
        kv.write(pending)
    finally:
        consumer.close()
    seconds = time.monotonic() - started
    _report(name, progress, end - low, end - low, records, seconds)
    return RestoreResult(records, seconds, size)


def _report(name: str, progress: Callable[[int, int], None] | None, done: int, total: int, records: int,
            seconds: float) -> None:
    log.info("restoring changelog %s: %d of %d offsets, %d records in %.1fs", name, done, total, records, seconds)
    if progress is not None:
        progress(done, total)
