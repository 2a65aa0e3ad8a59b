"""Catch-up replay with output suppressed.

After a restore, the state is at the backup's offset B while the group committed C >= B: the previous
owner already processed B..C and wrote its output. Re-running the processor over B..C rebuilds the
state; its output and dead letters must not be written again. This happens synchronously while the
partition is being opened (before it is handed to the consumer), so the checkpoint protocol never sees
a partition in replay: the group's committed offset cannot move back below C, and no message on the hot
path pays for a check. See docs/backups.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from stylus.core.engine import Engine
from stylus.core.task import PartitionTask
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range

log = logging.getLogger(__name__)

BATCH = 5000


def _discard(topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None) -> None:
    """A sink that writes nothing: the previous owner already wrote this output."""


def _quiet_failure(msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
    """During replay a failing record failed before too; its dead letter is already written."""
    log.debug("replay: %s failed again at %s[%s]@%s: %s", stage, msg.topic(), msg.partition(), msg.offset(), exc)


def group_committed(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> int | None:
    committed = consumer.committed([TopicPartition(topic, partition)], timeout=timeout)[0].offset
    return committed if committed >= 0 else None


def replay_suppressed(task: PartitionTask, engine: Engine, bootstrap: str, until: int, *,
                      timeout: float = 600.0) -> int:
    """Process task.next_offset..until with output suppressed, then save state + offset `until` together.
    Returns the number of records replayed."""
    start = task.next_offset
    if start is None or until <= start or task.store is None:
        return 0
    key = (task.topic, task.partition)
    low, high = end_offsets(bootstrap, [key])[key]
    if until > high:  # the committed offset is past the data (a recreated topic): replay what exists
        log.warning("%s[%d]: committed offset %d is past the end %d; replaying up to the end", *key, until, high)
        until = high
    if start < low:
        log.warning("%s[%d]: offsets %d..%d are gone from the topic; the restored state misses them", *key,
                    start, low)
        start = low
    started = time.monotonic()
    saved_sink, saved_failures = task.sink, engine.failures
    task.sink, engine.failures = _discard, _quiet_failure
    count = 0
    try:
        batch: list[Any] = []
        for msg in read_range(bootstrap, {key: (start, until)}, timeout=timeout):
            batch.append(msg)
            if len(batch) >= BATCH:
                count += engine.process_messages(batch, lambda t, p: task)
                batch = []
        if batch:
            count += engine.process_messages(batch, lambda t, p: task)
    finally:
        task.sink, engine.failures = saved_sink, saved_failures
    task.next_offset = until
    task.store.save(until, state=True)
    task.committed_offset = until
    log.info("%s[%d]: replayed offsets %d..%d (%d records) with output suppressed in %.2fs", *key, start, until,
             count, time.monotonic() - started)
    return count
