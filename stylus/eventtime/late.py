"""Records that arrive behind the watermark, per processor (`event_time.late`):

- `drop`: counted and skipped;
- `topic`: counted and sent unchanged (raw bytes, original headers plus where it came from) to
  `<pipeline>.<processor>.late`, for inspection or a separate correction job;
- `update`: counted and processed anyway; windows then re-emit a corrected result for the closed
  window (see `stylus.windows`), other processors see it like any record.

A processor may refine what "late" means with `is_late(event_time, watermark) -> bool` (windows
do: a record is late only when every window it falls in has closed).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from stylus.config.model import Pipeline

log = logging.getLogger(__name__)

#: At most one log line per this many seconds about late records (the first one is logged at once).
REPORT_EVERY = 30.0


def late_topic(pipeline: Pipeline, name: str) -> str:
    return f"{pipeline.pipeline}.{name}.late"


class LateCounters:
    __slots__ = ("dropped", "redirected", "updated")

    def __init__(self) -> None:
        self.dropped = 0
        self.redirected = 0
        self.updated = 0

    def as_dict(self) -> dict[str, int]:
        return {"dropped": self.dropped, "redirected": self.redirected, "updated": self.updated}

    @property
    def total(self) -> int:
        return self.dropped + self.redirected + self.updated


class LateHandler:
    def __init__(self, pipeline: Pipeline, name: str, processor: Any, sink: Any) -> None:
        spec = pipeline.processors[name].event_time
        self.policy = spec.late if spec else "drop"
        self.topic = late_topic(pipeline, name)
        self.sink = sink
        self.is_late = getattr(processor, "is_late", None)
        self.counters = LateCounters()
        self.name = name
        self._reported_at = -REPORT_EVERY
        self._reported_total = 0

    def __call__(self, msg: Any, key: str | None, value: Any, event_time: int, watermark: int,
                 sink: Any = None) -> bool:
        """Handle a record with event_time < watermark. Returns True when it must not be processed."""
        if self.is_late is not None and not self.is_late(event_time, watermark):
            return False
        counters = self.counters
        now = time.monotonic()
        if now - self._reported_at >= REPORT_EVERY:  # never silent: say so, at most every REPORT_EVERY s
            self._reported_at = now
            log.warning("%s: %d records behind the watermark since the last report (late: %s, %s so far); "
                        "latest: %s[%d]@%d, event time %d is %d ms behind watermark %d", self.name,
                        counters.total - self._reported_total + 1, self.policy, counters.as_dict(), msg.topic(),
                        msg.partition(), msg.offset(), event_time, watermark - event_time, watermark)
            self._reported_total = counters.total + 1
        if self.policy == "update":
            counters.updated += 1
            return False
        if self.policy == "topic":
            counters.redirected += 1
            headers = list(msg.headers() or [])
            headers += [("stylus.late.source", f"{msg.topic()}[{msg.partition()}]@{msg.offset()}".encode()),
                        ("stylus.late.watermark", str(watermark).encode())]
            sink = sink or self.sink  # the partition's own sink under exactly-once output
            send = getattr(sink, "send", None)
            if send is not None:  # the Kafka sink: raw bytes, like dead letters
                send(self.topic, msg.value(), msg.key(), msg.timestamp()[1], headers)
            else:
                sink(self.topic, key, value, msg.timestamp()[1], dict(headers))
            return True
        counters.dropped += 1
        return True
