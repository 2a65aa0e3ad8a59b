"""The processor's low watermark from its partitions' event-time progress.

Kept as the simple entry point for callers that hold only an `EventTimeSpec`; the estimator with its
confidence, idle rules and upstream watermarks lives in `stylus.eventtime.tracker`.
"""

from __future__ import annotations

from collections.abc import Iterable

from stylus.config.model import EventTimeSpec
from stylus.core.task import PartitionTask
from stylus.eventtime.tracker import WatermarkTracker


def low_watermark(tasks: Iterable[PartitionTask], spec: EventTimeSpec | None, now: float | None = None) -> int:
    return WatermarkTracker(spec).low_watermark(tasks, now)
