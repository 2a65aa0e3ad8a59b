"""Timings a worker records for monitoring, without depending on a metrics library.

The worker thread is the only writer; a metrics scrape reads from another thread. Each observation
is a few integer/float updates per batch or checkpoint (never per record), so the hot loop is untouched.
"""

from __future__ import annotations

import bisect
import time

#: Bucket upper bounds in seconds, chosen for batch processing and checkpoint times (1 ms .. 1 min).
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class Timing:
    """A cumulative-at-read histogram of durations (seconds)."""

    __slots__ = ("bounds", "counts", "last", "last_at", "total")

    def __init__(self, bounds: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last slot is +Inf
        self.total = 0.0
        self.last = 0.0
        self.last_at = 0.0  # wall-clock time of the last observation (0: never)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.last = seconds
        self.last_at = time.time()

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs in Prometheus order, ending with +Inf."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class WorkerStats:
    """What a worker times: batches through the engine, checkpoints, transaction commits."""

    def __init__(self) -> None:
        self.batch = Timing()  # one consumed batch through the engine: the processing latency
        self.checkpoint = Timing()  # one whole checkpoint (all steps of the ordering)
        self.commit = Timing()  # one transaction commit (exactly-once output)
        self.started_at = time.time()
