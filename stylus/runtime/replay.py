"""Catch-up replay with output suppressed.

After a restore, the state is at the backup's offset B while the group committed C >= B: the previous
owner already processed B..C and wrote its output. Re-running the processor over B..C rebuilds the
state; its output and dead letters must not be written again. This happens synchronously while the
partition is being opened (before it is handed to the consumer), so the checkpoint protocol never sees
a partition in replay: the group's committed offset cannot move back below C, and no message on the hot
path pays for a check. See docs/backups.md.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stylus.core.engine import Engine
from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.clock import META_KEY, clock_of
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range
from stylus.runtime.timeline import FiredTimer

log = logging.getLogger(__name__)

BATCH = 5000
SMALL_BATCH = 100
_END = 2**63  # fire(): the end of the replay, where waiting timers that are still unset are dropped


def _discard(topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None,
             partition: int = -1) -> None:
    """A sink that writes nothing: the previous owner already wrote this output."""


def _quiet_failure(msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
    """During replay a failing record failed before too; its dead letter is already written."""
    log.debug("replay: %s failed again at %s[%s]@%s: %s", stage, msg.topic(), msg.partition(), msg.offset(), exc)


def replay_suppressed(task: PartitionTask, engine: Engine, bootstrap: str, until: int, *,
                      timeout: float = 600.0, fired: Sequence[FiredTimer] = (), fire_due: bool = False) -> int:
    """Process task.next_offset..until with output suppressed, then save state + offset `until` together.
    `fired`: the timers the old owner fired in that span (timeline.py), fired again at the same points.
    `fire_due` (at-most-once output, whose outputs carry no ids to tell which timers fired): every timer the old
    owner may have fired, due at this partition's own watermark, fires at the end, output suppressed: lost
    output is allowed there, output made twice is not.
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
    saved_sink, saved_failures, saved_watermark = task.sink, engine.failures, engine.watermark
    task.sink, engine.failures = _discard, _quiet_failure
    # The replay runs on the partition's own event time (the backup's floor), not on this instance's
    # watermark: records that were on time for the old owner stay on time.
    engine.watermark = NO_TIME
    timers = TimerReplay(task, engine, fired)
    count = 0
    try:
        batch: list[Any] = []
        for msg in read_range(bootstrap, {key: (start, until)}, timeout=timeout):
            offset = msg.offset()
            if timers.anchored_before(offset):
                if batch:
                    count += engine.process_messages(batch, lambda t, p: task)
                    batch = []
                timers.fire(offset)
            batch.append(msg)
            # while a timer waits, look often: the record that sets it or moves the watermark is near
            if len(batch) >= (SMALL_BATCH if timers.waiting else BATCH):
                count += engine.process_messages(batch, lambda t, p: task)
                batch = []
                timers.fire(offset + 1)
        if batch:
            count += engine.process_messages(batch, lambda t, p: task)
        timers.fire(_END)
        if fire_due:
            timers.fire_due_silently()
    finally:
        timers.close()
        task.sink, engine.failures, engine.watermark = saved_sink, saved_failures, saved_watermark
    # The floor moves only now: the old owner's watermark passed these timers somewhere in the span, but
    # raising it at a (lower-bound) firing point could make records late that were on time for it.
    clock = clock_of(task)
    clock.floor = max(clock.floor, timers.max_fired)
    snapshot = clock.snapshot()
    if snapshot is not None:
        task.store.set_meta(META_KEY, snapshot)
    task.next_offset = until
    task.store.save(until, state=True)
    task.committed_offset = until
    log.info("%s[%d]: replayed offsets %d..%d (%d records, %d of %d timers the old owner fired) with output "
             "suppressed in %.2fs", *key, start, until, count, timers.fired, len(fired),
             time.monotonic() - started)
    return count


class TimerReplay:
    """Fires the old owner's timers during a replay: each once the records up to its anchor are processed,
    it is set, and this partition's own watermark has passed it; checked after every batch, and batches
    shrink to SMALL_BATCH records while some timer waits. (The old owner fired it when its watermark
    passed; these are lower bounds of that point.)"""

    def __init__(self, task: PartitionTask, engine: Engine, fired: Sequence[FiredTimer]) -> None:
        assert task.store is not None
        self.task = task
        self.engine = engine
        self.timers = task.store.timers
        self.plan = sorted(fired)
        self.next = 0
        self.ready: list[tuple[int, str]] = []  # heap: anchored and set, waiting for the watermark
        self.unset: dict[tuple[int, str], FiredTimer] = {}  # anchored, not set (yet)
        self.unset_by_upper: list[tuple[int, int, str]] = []  # heap over `unset` by upper bound
        self.fired = 0
        self.max_fired = NO_TIME  # the latest timer fired inside the replayed span
        self.exact: list[tuple[int, str]] = []  # anchored timers whose firing point is exact: fire now
        self.timers.added = [] if self.plan else None

    @property
    def waiting(self) -> bool:
        return bool(self.ready or self.unset)

    def anchored_before(self, offset: int) -> bool:
        return self.next < len(self.plan) and self.plan[self.next].anchor < offset

    def close(self) -> None:
        self.timers.added = None

    def fire(self, offset: int) -> None:
        """All records before `offset` are processed (`_END`: the replay is over): fire what is due."""
        timers, end = self.timers, offset >= _END
        while self.anchored_before(offset):
            entry = self.plan[self.next]
            self.next += 1
            self._anchored(entry)
        if timers.added:
            for new in timers.added:
                if self.unset.pop(new, None) is not None:
                    heapq.heappush(self.ready, new)
            timers.added.clear()
        # not set although a record after which it fired is processed: it fired before the backup (its
        # output sits after the backup's marks, which are low bounds)
        while self.unset_by_upper and (end or self.unset_by_upper[0][0] < offset):
            _, ts, key = heapq.heappop(self.unset_by_upper)
            self.unset.pop((ts, key), None)
        if self.exact:
            self._fire_exact()
        mark = _END if end else self._own_watermark()
        while self.ready and self.ready[0][0] <= mark:
            ts, key = heapq.heappop(self.ready)
            if timers.remove(key, ts):
                self._fire_one(key, ts)
                if not end:
                    self.max_fired = max(self.max_fired, ts)

    def _fire_exact(self) -> None:
        """Timers the old owner fired exactly here. Its watermark had passed them, so from here on it judged
        records behind them late: the replay's own late mark (the engine's watermark, which the replay starts
        at NO_TIME) rises to them too, and a late record does not re-create a window that already fired."""
        engine = self.engine
        for ts, key in sorted(self.exact):
            if self.timers.remove(key, ts):
                self._fire_one(key, ts)
                self.max_fired = max(self.max_fired, ts)
            engine.watermark = max(engine.watermark, ts)
        self.exact.clear()

    def fire_due_silently(self) -> None:
        """Every timer due at this partition's own watermark (the old owner's cannot have been ahead of it)."""
        for ts, key in self.timers.pop_due(self._own_watermark()):
            self._fire_one(key, ts)
            self.max_fired = max(self.max_fired, ts)

    def _anchored(self, entry: FiredTimer) -> None:
        item = (entry.timestamp, entry.key)
        if item in self.timers:
            if entry.exact:
                self.exact.append(item)
            else:
                heapq.heappush(self.ready, item)
        else:
            self.unset[item] = entry
            heapq.heappush(self.unset_by_upper, (entry.upper, *item))

    def _own_watermark(self) -> int:
        """The old owner's watermark cannot have been ahead of this partition's own, for a source
        partition; one fed by upstream watermarks cannot tell (the replay skips control records)."""
        tracker = self.engine.watermarks
        if tracker.required.get(self.task.topic):
            return _END
        return tracker.partition_mark(self.task, time.monotonic())[0]

    def _fire_one(self, key: str, timestamp: int) -> None:
        task, ctx = self.task, self.engine.ctx
        ctx.state = task.state
        ctx._task = task
        ctx._sink = task.sink
        ctx.record = None
        ctx._timer = (timestamp, key)
        ctx._timestamp = timestamp
        ctx.watermark = max(clock_of(task).floor, timestamp)  # the old owner's had passed it
        try:
            self.engine._fire_one(task, key, timestamp)
        finally:
            ctx._timer = None
        self.fired += 1
