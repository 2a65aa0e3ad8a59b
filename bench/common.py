"""What every processor benchmark does the same way: run the real Worker and time it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from stylus.config.model import Pipeline
from stylus.runtime.executable import ExecutableWorker
from stylus.runtime.worker import Worker


class BatchMarks:
    """When a worker finished its first batch and when it had processed `records`, marked by the worker
    itself at the end of a batch, so the timing thread can block instead of polling: a timing thread that
    polled (it once woke every millisecond) took the GIL from the worker each time and slowed down what it
    measured. An ExecutableWorker (a `command:` processor) is marked after each answer line it handles."""

    def __init__(self, worker: Worker | ExecutableWorker, records: int) -> None:
        self.started, self.finished = threading.Event(), threading.Event()
        self.first = self.last = 0.0
        self.already = 0  # records of the first batch, processed before the clock started

        def mark() -> None:
            if not self.started.is_set() and worker.processed:
                self.first, self.already = time.perf_counter(), worker.processed
                self.started.set()
            if worker.processed >= records and not self.finished.is_set():
                self.last = time.perf_counter()
                self.finished.set()

        if isinstance(worker, ExecutableWorker):
            answer = worker._answer

            def timed_answer(arg: Any) -> None:
                answer(arg)
                mark()

            worker._answer = timed_answer  # type: ignore[method-assign]
        else:
            worker.on_batch = mark


def time_worker(pipeline: Pipeline, processor: str, bootstrap: str, records: int,
                after: Callable[[Any], None] | None = None,
                before: Callable[[Any], None] | None = None) -> float:
    """Records/s of a Worker (or an ExecutableWorker, for a `command:` processor) from its first processed
    batch until `records` are processed and every output acknowledged (the raw loops' clocks also stop after
    their final flush). The first batch, processed before the clock starts, is counted out. `before` gets the
    worker before it starts (to instrument it), `after` the stopped worker (its stats, for reports)."""
    stop = threading.Event()
    kind = ExecutableWorker if pipeline.processors[processor].command is not None else Worker
    worker = kind(pipeline, processor, bootstrap, stop=stop)
    if before is not None:
        before(worker)
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
