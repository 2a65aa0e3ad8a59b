"""A progress bar on stderr, fed by polling Spark's status tracker from the driver."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO


class SparkProgress:
    """While active, redraws `label [####----] done/total tasks` every `interval` seconds."""

    def __init__(self, spark: Any, label: str, *, stream: TextIO | None = None, interval: float = 0.5,
                 enabled: bool = True) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.label = label
        self.stream = stream or sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.done = 0
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stylus-progress", daemon=True)
        self._started = time.monotonic()

    def poll(self) -> tuple[int, int]:
        """(completed, total) tasks over the active stages; keeps the last answer between stages."""
        done = total = 0
        for stage_id in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        if total:
            self.done, self.total = done, total
        return self.done, self.total

    def _draw(self, final: bool = False) -> None:
        done, total = (self.total, self.total) if final and self.total else (self.done, self.total)
        width = 30
        filled = int(width * done / total) if total else 0
        elapsed = time.monotonic() - self._started
        self.stream.write(f"\r{self.label} [{'#' * filled}{'-' * (width - filled)}] {done}/{total} tasks "
                          f"{elapsed:5.1f}s" + ("\n" if final else ""))
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()
            self._draw()

    def __enter__(self) -> SparkProgress:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._draw(final=exc is None)
            if exc is not None:
                self.stream.write("\n")
