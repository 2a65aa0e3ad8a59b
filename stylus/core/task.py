"""Per-input-partition bookkeeping: its store, its progress and its event-time position."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from stylus.state.store import PartitionStore, StateMap

if TYPE_CHECKING:
    from stylus.core.acker import PartitionAcker
    from stylus.state.memory import MemoryState

NO_TIME = -(2**63)


class PartitionTask:
    __slots__ = (
        "acker",
        "assigned_at",
        "at_eof",
        "clock",
        "committed_offset",
        "max_event_time",
        "next_offset",
        "partition",
        "sink",
        "state",
        "store",
        "topic",
    )

    def __init__(self, topic: str, partition: int, store: PartitionStore | None) -> None:
        self.topic = topic
        self.partition = partition
        self.store = store
        self.state: StateMap | MemoryState | None = store.state if store is not None else None
        self.sink: Any = None  # a per-partition sink (exactly-once output: into the worker's transaction)
        stored = store.stored_offset() if store is not None else None
        self.next_offset: int | None = stored  # next input offset to process (to read, under `concurrency`)
        self.committed_offset: int | None = stored  # last offset saved by a checkpoint
        self.max_event_time = NO_TIME
        self.clock: Any = None  # stylus.eventtime.clock.PartitionClock, made on first use (clock_of)
        self.at_eof = False
        self.assigned_at = time.monotonic()
        # under `concurrency` (stylus/core/concurrent.py): the records read whose work is not complete yet
        self.acker: PartitionAcker | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def checkpoint_offset(self) -> int | None:
        """The offset a checkpoint saves: where a restart resumes. `next_offset`, or, while records read are
        still being worked on (`concurrency`), the lowest of them (the acker's committable offset): a
        checkpoint never waits for work in flight, and never saves an offset past it (docs/acker.md)."""
        acker = self.acker
        return self.next_offset if acker is None else acker.committable(self.next_offset)

    @property
    def has_progress(self) -> bool:
        """Input consumed, or state or timers changed (a timer firing with no new input), since the last
        checkpoint."""
        return self.checkpoint_offset != self.committed_offset or (self.store is not None and self.store.dirty)

    def __repr__(self) -> str:
        return f"PartitionTask({self.topic}[{self.partition}] next={self.next_offset})"
