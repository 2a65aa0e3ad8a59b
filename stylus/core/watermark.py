"""The processor's low watermark from its partitions' event-time progress.

A partition that has carried no data for `idle_timeout` since it was assigned does not hold the
watermark back; every other partition does, at its largest event time less `allowed_lateness`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from stylus.config.model import EventTimeSpec
from stylus.core.task import NO_TIME, PartitionTask


def low_watermark(tasks: Iterable[PartitionTask], spec: EventTimeSpec | None, now: float | None = None) -> int:
    lateness_ms = int((spec.allowed_lateness if spec else 0.0) * 1000)
    idle_timeout = spec.idle_timeout if spec else 10.0
    now = time.monotonic() if now is None else now
    marks = []
    for task in tasks:
        if task.max_event_time == NO_TIME:
            if now - task.assigned_at < idle_timeout:
                return NO_TIME  # a partition that may still bring early data holds everything back
            continue
        marks.append(task.max_event_time - lateness_ms)
    return min(marks) if marks else NO_TIME
