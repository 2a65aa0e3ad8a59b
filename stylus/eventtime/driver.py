"""The worker's side of event time: advance the watermark each loop, publish it downstream.

Where a control record may be written depends on the output semantics: with output going straight
to the producer (at-least-once), right away, behind the data already handed to the same producer;
with output held until the checkpoint (at-most-once) or committed in the worker's transaction
(exactly-once), only after the checkpoint made that output visible, carrying the watermark as it was
when the checkpoint began (so it never covers output still held or uncommitted). The control record
itself goes through the worker's plain idempotent producer, after the commit: a record that follows the
committed data is what readers need.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stylus.config.model import Pipeline
from stylus.core.engine import Engine
from stylus.core.task import PartitionTask
from stylus.eventtime.control import WatermarkPublisher
from stylus.eventtime.late import LateCounters
from stylus.eventtime.topology import publishes


class WorkerEventTime:
    def __init__(self, pipeline: Pipeline, name: str, instance: str, producer: Any, engine: Engine, *,
                 eager: bool) -> None:
        self.engine = engine
        self.eager = eager
        self.publisher: WatermarkPublisher | None = None
        if publishes(pipeline, name):
            self.publisher = WatermarkPublisher(pipeline, name, instance, producer)
            engine.track_time = True  # downstream needs this stage's event-time progress

    @property
    def watermark(self) -> int:
        return self.engine.watermark

    @property
    def late(self) -> LateCounters:
        """Late records by outcome (dropped / redirected / updated), for metrics."""
        return self.engine.late.counters

    def tick(self, tasks: Iterable[PartitionTask]) -> None:
        tasks = list(tasks)
        self.engine.advance_time(tasks)
        # Eager (at-least-once output) still holds output while an overlapped checkpoint is in flight
        # (KafkaSink.paused): a mark now would overtake records it covers. The tick after the release does.
        if self.eager and self.publisher is not None and not getattr(self.engine.sink, "held_count", 0):
            self.publisher.maybe_publish(self.engine.watermark, [t.key for t in tasks])

    def after_checkpoint(self, watermark: int, tasks: Iterable[PartitionTask]) -> None:
        """`watermark` as it was when the checkpoint started: all output it covers is now visible."""
        if not self.eager and self.publisher is not None:
            self.publisher.maybe_publish(watermark, [t.key for t in tasks], force=True)
