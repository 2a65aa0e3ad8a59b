"""What every processor benchmark does the same way: run the real Worker and time it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from stylus.config.model import Pipeline
from stylus.runtime.worker import Worker


class BatchMarks:
    """When a worker finished its first batch and when it had processed `records`, marked by the worker
    itself at the end of a batch, so the timing thread can block instead of polling: a timing thread that
    polled (it once woke every millisecond) took the GIL from the worker each time and slowed down what it
    measured."""

    def __init__(self, worker: Worker, records: int) -> None:
        self.started, self.finished = threading.Event(), threading.Event()
        self.first = self.last = 0.0
        self.already = 0  # records of the first batch, processed before the clock started
        handle = worker._handle

        def timed_handle(msgs: list[Any]) -> None:
            handle(msgs)
            if not self.started.is_set() and worker.processed:
                self.first, self.already = time.perf_counter(), worker.processed
                self.started.set()
            if worker.processed >= records and not self.finished.is_set():
                self.last = time.perf_counter()
                self.finished.set()

        worker._handle = timed_handle  # type: ignore[method-assign]


def time_worker(pipeline: Pipeline, processor: str, bootstrap: str, records: int,
                after: Callable[[Worker], None] | None = None) -> float:
    """Records/s of a Worker from its first processed batch until `records` are processed and every output
    acknowledged (the raw loops' clocks also stop after their final flush). The first batch, processed
    before the clock starts, is counted out. `after` gets the stopped worker (its stats, for reports)."""
    stop = threading.Event()
    worker = Worker(pipeline, processor, bootstrap, stop=stop)
    marks = BatchMarks(worker, records)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    marks.finished.wait()
    worker.sink.flush()
    elapsed = time.perf_counter() - marks.first
    stop.set()
    thread.join()
    if after is not None:
        after(worker)
    return (records - marks.already) / elapsed
