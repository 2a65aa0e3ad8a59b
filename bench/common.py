"""What every processor benchmark does the same way: run the real Worker and time it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from stylus.config.model import Pipeline
from stylus.runtime.worker import Worker


def time_worker(pipeline: Pipeline, processor: str, bootstrap: str, records: int,
                after: Callable[[Worker], None] | None = None) -> float:
    """Records/s of a Worker from its first processed batch until `records` are processed and every output
    acknowledged (the raw loops' clocks also stop after their final flush). The first batch, processed
    before the clock starts, is counted out. `after` gets the stopped worker (its stats, for reports)."""
    stop = threading.Event()
    worker = Worker(pipeline, processor, bootstrap, stop=stop)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    while worker.processed == 0:
        time.sleep(0.0005)
    first, already = time.perf_counter(), worker.processed
    while worker.processed < records:
        time.sleep(0.001)
    worker.sink.flush()
    elapsed = time.perf_counter() - first
    stop.set()
    thread.join()
    if after is not None:
        after(worker)
    return (records - already) / elapsed
