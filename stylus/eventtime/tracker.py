"""The processor's low watermark: the minimum of its input partitions' watermarks.

A source partition's watermark is its largest event time less a delay: with `confidence` 1.0 the
delay is `allowed_lateness`; below 1.0 it is the observed lateness quantile at that confidence
(at most 1 - confidence of records arrive behind it), capped by `allowed_lateness` when one is set.
A partition written by upstream processors follows their control records instead (MillWheel: a
stage's watermark is bounded by its upstream's), less this stage's own `allowed_lateness`: a stage
whose input an upstream re-keys or re-times sees records up to that much behind the upstream's mark,
and its windows must wait for them. `confidence` and `idle_timeout` concern source partitions only
(the loader refuses them on a stage without one: stylus/config/applicability.py). A source
partition stops holding the watermark back once it sits at its end offset and has brought nothing
for `idle_timeout`; one that is not at its end still holds it, because records behind it are in
flight. When every partition is idle the watermark follows the most advanced one. No partition ever
goes below its saved floor; a partition that joins behind the others takes the processor's watermark back to
its own floor (Engine._joined).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from stylus.config.model import EventTimeSpec, Pipeline
from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.clock import PartitionClock, clock_of
from stylus.eventtime.sketch import LatenessSketch
from stylus.eventtime.topology import required_upstreams

MIN_SAMPLES = 100  # below this many records the quantile is not trusted: wait the full cap


class WatermarkTracker:
    def __init__(self, spec: EventTimeSpec | None, pipeline: Pipeline | None = None,
                 inputs: Iterable[str] = ()) -> None:
        self.confidence = spec.confidence if spec else 1.0
        self.cap_ms = int((spec.allowed_lateness if spec else 0.0) * 1000)
        self.idle_timeout = spec.idle_timeout if spec else 10.0
        self.required = {t: r for t in inputs if (r := required_upstreams(pipeline, t))} if pipeline else {}

    def new_sketch(self) -> LatenessSketch | None:
        return LatenessSketch() if self.confidence < 1.0 else None

    def delay(self, clock: PartitionClock) -> int:
        sketch = clock.sketch
        if sketch is None:
            return self.cap_ms
        if sketch.total < MIN_SAMPLES:
            return self.cap_ms if self.cap_ms else sketch.quantile(1.0)
        learned = sketch.quantile(self.confidence)
        return min(learned, self.cap_ms) if self.cap_ms else learned

    def partition_mark(self, task: PartitionTask, now: float) -> tuple[int, bool]:
        """(watermark, idle) of one input partition."""
        clock = clock_of(task)
        required = self.required.get(task.topic)
        if required:
            upstream = clock.upstream_mark(required)
            mark = NO_TIME if upstream == NO_TIME else upstream - self.cap_ms
            return max(mark, clock.floor), False
        mark = NO_TIME if task.max_event_time == NO_TIME else task.max_event_time - self.delay(clock)
        idle = task.at_eof and now - clock.last_active >= self.idle_timeout
        return max(mark, clock.floor), idle

    def low_watermark(self, tasks: Iterable[PartitionTask], now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        active: int | None = None
        idle: int | None = None
        for task in tasks:
            mark, is_idle = self.partition_mark(task, now)
            if is_idle:
                idle = mark if idle is None else max(idle, mark)
            else:
                active = mark if active is None else min(active, mark)
        if active is not None:
            return active
        return NO_TIME if idle is None else idle
