"""When checkpoints are taken and how the worker waits for them: at most one in flight, its I/O on a
checkpoint thread while the worker goes on processing into held output (the paper's Figure 9), its
completion back on the worker thread. What a checkpoint does is `checkpoint.PendingCheckpoint`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from confluent_kafka import KafkaError, TopicPartition

from stylus.core.task import PartitionTask
from stylus.runtime.checkpoint import CheckpointScope, PendingCheckpoint
from stylus.runtime.sink import KafkaSink
from stylus.runtime.stats import WorkerStats
from stylus.state.store import StateMap


class CheckpointListener(Protocol):
    """What happens around a completed checkpoint, outside the checkpoint itself."""

    def checkpoint_failed(self, exc: Exception, *, fenced: bool) -> None: ...

    def completed(self, pending: PendingCheckpoint) -> None: ...


class Checkpointer:
    def __init__(self, scope: CheckpointScope, listener: CheckpointListener, *, overlap: bool,
                 serve: Callable[[float], None], sinks: Callable[[], list[KafkaSink]], watermark: Callable[[], int],
                 stats: WorkerStats) -> None:
        self.scope = scope
        self.listener = listener
        self.overlap = overlap
        self.serve = serve  # the producers' delivery reports, which a checkpoint's flushes wait for
        self.sinks = sinks
        self.watermark = watermark
        self.stats = stats
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stylus-{scope.name}-checkpoint")
        self.inflight: tuple[PendingCheckpoint, Future[None]] | None = None
        self.count = 0

    def begin(self, tasks: Iterable[PartitionTask]) -> PendingCheckpoint | None:
        chosen = [t for t in tasks if t.next_offset is not None]
        if not any(t.has_progress for t in chosen) and not self.scope.sink.held_count:
            return None
        return PendingCheckpoint(self.scope, chosen, self.watermark())

    def checkpoint(self, tasks: Iterable[PartitionTask]) -> None:
        """Checkpoint `tasks` and wait for it (after the one in flight). Raises on any failure."""
        self.await_inflight()
        pending = self.begin(tasks)
        if pending is not None:
            pending.run()
            self._complete(pending)

    def start(self, tasks: Iterable[PartitionTask]) -> None:
        """A checkpoint of `tasks`: in the background when overlapped (output is held and processing goes
        on until it is done), inline otherwise."""
        if not self.overlap:
            self.checkpoint(tasks)
            return
        pending = self.begin(tasks)
        if pending is None:
            return
        pending.run_prefix(overlapped=True)  # its consumer commit is only sent: see PendingCheckpoint
        if not pending.middle:
            pending.run_suffix()
            self._complete(pending)
            return
        for sink in self.sinks():
            sink.paused = True
        self.inflight = (pending, self.executor.submit(pending.run_background))

    def await_inflight(self, *, block: bool = True) -> None:
        if self.inflight is None:
            return
        pending, future = self.inflight
        if not block and not future.done():
            return
        self.inflight = None
        if not future.done():  # its commit's answer comes through consume(): commit here before waiting
            try:
                pending.commit_here()
            except Exception:
                self._serve_until_done(future)  # the background stops on the same error: let it finish first
                raise
        self._serve_until_done(future)
        future.result()  # a failed checkpoint fails the worker, as it would inline
        pending.run_suffix()
        self._complete(pending)

    def drop_held(self) -> int:
        """Throw away the output held for the next checkpoint (at-most-once output of partitions that were
        lost: no checkpoint of ours covers them any more, so releasing it could repeat what their new owner
        emits). Returns how many records were dropped."""
        return len(self.scope.sink.take_held())

    def abandon(self) -> None:
        """The worker is failing: let the I/O in flight finish, its outcome no longer matters."""
        if self.inflight is not None:
            self.inflight[0].abandon()
            self._serve_until_done(self.inflight[1])
            self.inflight = None

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An asynchronous offsets commit answered (served by consume() on the worker thread)."""
        if self.inflight is not None:
            self.inflight[0].committed(err, partitions)

    def close(self) -> None:
        self.executor.shutdown(wait=True)

    def _serve_until_done(self, future: Future[None]) -> None:
        """Wait for the checkpoint thread while serving the producers' delivery reports, which its
        `emit` and `transaction` steps wait for (stylus/runtime/sink.py, wait_until_served)."""
        while not future.done():
            self.serve(0.005)

    def _complete(self, pending: PendingCheckpoint) -> None:
        """Back on the worker thread once the steps are done: output flows again. After a failure the
        partitions are forgotten first, to be replayed from their last commit, and the output held meanwhile
        goes with them: it came from records that are replayed, and the failed transaction takes no records."""
        failure = pending.failure
        if failure is not None:
            self.listener.checkpoint_failed(failure[0], fenced=failure[1])
        for sink in self.sinks():
            sink.resume()
        if failure is not None:
            return
        for task in pending.tasks:
            task.committed_offset = pending.offsets[task.key]
            if isinstance(task.state, StateMap):
                task.state.evict()
        self.count += 1
        self.stats.checkpoint.observe(time.monotonic() - pending.started)
        self.listener.completed(pending)
