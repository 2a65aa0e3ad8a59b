"""The event-time position of one input partition, beyond its largest event time (kept on the task).

`floor` is the processor watermark last reached while this partition was assigned; it is saved with
the partition's state, so after a restart the watermark never goes back behind windows and timers
that already fired (their effects are in the saved state). `reports` are the upstream watermarks
read from control records on this partition (see `control.py`), saved the same way because an idle
upstream does not repeat them.
"""

from __future__ import annotations

import time
from typing import Any

from stylus.eventtime.sketch import LatenessSketch

NO_TIME = -(2**63)
META_KEY = "event_time"


class PartitionClock:
    __slots__ = ("floor", "last_active", "reports", "saved", "sketch")

    def __init__(self, floor: int = NO_TIME, reports: dict[str, dict[str, int]] | None = None) -> None:
        self.floor = floor
        self.last_active = time.monotonic()
        self.reports: dict[str, dict[str, int]] = reports or {}
        self.sketch: LatenessSketch | None = None
        self.saved: tuple[int, int] = (floor, _reports_size(self.reports))

    @classmethod
    def restore(cls, meta: Any) -> PartitionClock:
        """From the metadata saved by `snapshot` (None for a fresh partition)."""
        if not isinstance(meta, dict):
            return cls()
        reports = {str(u): {str(p): int(w) for p, w in parts.items()} for u, parts in (meta.get("up") or {}).items()}
        return cls(int(meta.get("floor", NO_TIME)), reports)

    def report(self, upstream: str, partitions: list[str], watermark: int) -> None:
        """An upstream instance passed `watermark` on these of its input partitions."""
        marks = self.reports.setdefault(upstream, {})
        for part in partitions:
            if watermark > marks.get(part, NO_TIME):
                marks[part] = watermark

    def upstream_mark(self, required: dict[str, frozenset[str]]) -> int:
        """min over upstream processors and their input partitions; NO_TIME while any is unreported."""
        mark: int | None = None
        for upstream, parts in required.items():
            marks = self.reports.get(upstream)
            if not marks:
                return NO_TIME
            for part in parts:
                value = marks.get(part, NO_TIME)
                if mark is None or value < mark:
                    mark = value
        return NO_TIME if mark is None else mark

    def snapshot(self) -> dict[str, Any] | None:
        """The metadata to save when it changed since the last call, else None."""
        key = (self.floor, _reports_size(self.reports))
        if key == self.saved:
            return None
        self.saved = key
        return {"floor": self.floor, "up": self.reports}


def _reports_size(reports: dict[str, dict[str, int]]) -> int:
    """A cheap change detector: reports only grow, and marks only rise."""
    return hash(tuple(sorted((u, p, w) for u, parts in reports.items() for p, w in parts.items())))


def clock_of(task: Any) -> PartitionClock:
    """The task's clock, restored from its store's metadata the first time it is needed (after any
    recovery of the store has run, so the floor is the one of the state actually restored)."""
    clock = task.clock
    if clock is None:
        store = task.store
        clock = task.clock = PartitionClock.restore(store.meta(META_KEY) if store is not None else None)
        clock.last_active = task.assigned_at
    return clock
