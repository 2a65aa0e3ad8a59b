"""What every processor benchmark does the same way: run the real Worker and time it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from stylus.config.model import Pipeline
from stylus.runtime.worker import Worker


def time_worker(pipeline: Pipeline, processor: str, bootstrap: str, records: int,
                after: Callable[[Worker], None] | None = None) -> float:
    """Records/s of a Worker from its first processed batch until `records` are processed and every output
    acknowledged (the raw loops' clocks also stop after their final flush). The first batch, processed
    before the clock starts, is counted out. `after` gets the stopped worker (its stats, for reports).

    The worker marks both moments itself, at the end of a batch, and the timing thread blocks on them: a
    timing thread that polled (it once woke every millisecond) took the GIL from the worker each time and
    slowed down what it measured."""
    stop = threading.Event()
    worker = Worker(pipeline, processor, bootstrap, stop=stop)
    started, finished = threading.Event(), threading.Event()
    first: list[Any] = []
    handle = worker._handle

    def timed_handle(msgs: list[Any]) -> None:
        handle(msgs)
        if not first and worker.processed:
            first.extend((time.perf_counter(), worker.processed))
            started.set()
        if worker.processed >= records:
            finished.set()

    worker._handle = timed_handle  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    started.wait()
    finished.wait()
    worker.sink.flush()
    elapsed = time.perf_counter() - first[0]
    stop.set()
    thread.join()
    if after is not None:
        after(worker)
    return (records - first[1]) / elapsed
