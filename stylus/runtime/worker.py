"""One processor instance: a consumer-group member that consumes, processes, produces and checkpoints.

Single-threaded by design: the consumer, the producer, the rebalance callbacks and the checkpoint
all run on the worker's own thread, so there are no queues between threads to stall silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_STORED, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.api import Processor, import_processor_class
from stylus.config.model import Pipeline
from stylus.core.engine import Engine, StopProcessing
from stylus.core.task import PartitionTask
from stylus.eventtime.driver import WorkerEventTime
from stylus.kafka.batching import BatchSizer
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config
from stylus.monoid.backend import remote_state_for
from stylus.runtime.checkpoint import Ordering, PendingCheckpoint, ordering_for
from stylus.runtime.failures import FailurePolicy
from stylus.runtime.faults import FaultInjector
from stylus.runtime.gctune import tune_for_streaming
from stylus.runtime.sink import KafkaSink, message_max_bytes
from stylus.runtime.stats import WorkerStats
from stylus.runtime.transactions import TransactionalPartition, marks_client, record_ids_wanted
from stylus.state.backup import BackupManager
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore, StateMap

log = logging.getLogger(__name__)

#: Held output past this waits for the checkpoint in flight (backpressure), and a checkpoint is taken early.
MAX_HELD_OUTPUT = 200_000
#: At-most-once output waits in memory for the checkpoint that releases it: it takes the place of
#: MAX_HELD_OUTPUT for a worker whose output is held so (a checkpoint as soon as this many records are held,
#: and the worker waits for the one in flight past it). Kept small: held records released in bulk hand their
#: memory back to the kernel, and the next ones fault it in again page by page (1M-record Counter Node runs:
#: 134-146k records/s and 3.0-3.3 s of kernel time at 200,000; 222-224k records/s and 0.5 s at 20,000.
#: BENCHMARKS.md, issue 3). It also bounds what a crash loses and how long output waits.
AT_MOST_ONCE_BATCH = 20_000
#: Producers report failed deliveries only (`delivery.report.only.error`): serving them this often, not after
#: every batch, spares the worker a GIL release and reacquire per producer per loop.
POLL_INTERVAL = 0.05


class WorkerFailed(RuntimeError):
    """The processor stopped on an error (on_error: stop, a delivery failure, a broken store)."""


class Worker:
    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        bootstrap: str,
        *,
        stop: threading.Event | None = None,
        exit_when_idle: float | None = None,
        upstream_done: Callable[[], bool] = lambda: True,
        ordering: Ordering | None = None,
        instance: str = "0",
    ) -> None:
        self.pipeline = pipeline
        self.name = name
        self.spec = pipeline.processors[name]
        self.bootstrap = bootstrap
        self.stop_event = stop or threading.Event()
        self.exit_when_idle = exit_when_idle
        self.upstream_done = upstream_done
        self.ordering = ordering or ordering_for(self.spec.semantics.state, self.spec.semantics.output)
        self.instance = instance
        self.group_id = pipeline.group_id(name)
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.txns: dict[tuple[str, int], TransactionalPartition] = {}  # exactly-once output only
        self.faults = FaultInjector()
        self._rejoin = False  # a transaction failed: rejoin the group after this batch (see `_aborted`)
        # partitions whose task was dropped (`_forget`) while still assigned: until the group assigns them
        # again, records of theirs already fetched must not reach the engine (there is no task for them)
        self._forgotten: set[tuple[str, int]] = set()
        self.checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stylus-{name}-checkpoint")
        self.inflight: tuple[PendingCheckpoint, Future[None]] | None = None
        self.processed = 0
        self.stats = WorkerStats()  # timings read by stylus.monitoring at scrape time
        self.checkpoints = 0
        self.last_checkpoint_seconds = 0.0
        self.rebalances = 0
        self.assigned_once = False
        # the last rebalance callback was an assignment: the group is not moving partitions (an empty task
        # set means "none of them are ours", not "ours are on their way back")
        self._assignment_settled = False
        self.finished = False
        self._idle_since: float | None = None
        consumer_config = client_config("consumer", bootstrap, pipeline, name)
        self._cooperative = "cooperative" in str(consumer_config.get("partition.assignment.strategy", ""))
        self.batches = BatchSizer.for_consumer(self.spec.batch_size, consumer_config)  # fewer when records are big

        self.sink: KafkaSink
        producer_config = client_config(
            "producer", bootstrap, pipeline, name,
            **{"client.id": f"{self.group_id}-{instance}", "delivery.report.only.error": True},
        )
        self.producer = Producer(producer_config | {"on_delivery": lambda err, msg: self.sink.on_delivery(err, msg)})
        self.sink = KafkaSink(self.producer, pipeline, self.spec.outputs, hold=self.ordering.holds_output,
                              max_bytes=message_max_bytes(producer_config))
        self.failures = FailurePolicy(self.spec.on_error, name, pipeline.dlq_topic(name), self.sink)
        cls = import_processor_class(self.spec.class_)
        self.processor: Processor = cls(config=self.spec.config, name=name)
        self.remote_state = remote_state_for(pipeline, name, self.processor)  # None: local RocksDB state
        # remote monoid state saves in its own database transaction on the worker thread: no overlap there
        self.overlap = self.spec.checkpoint.overlap and self.remote_state is None
        self.engine = Engine(self.processor, name, self.spec, pipeline, self.sink, self.failures)
        self.event_time = WorkerEventTime(  # watermarks, timers, late-record counters (stylus/eventtime)
            pipeline, name, instance, self.producer, self.engine,
            eager=not (self.ordering.holds_output or self.ordering.transactional))
        self.backups = BackupManager.for_worker(pipeline, name)  # None: no state.backup configured
        # exactly-once output: do outputs carry `stylus.id` (semantics.output_ids)? Where they do, each commit
        # also saves where the output partitions end (for a backup restore's timeline): a group-less consumer
        # asks, since the checkpoint thread must not call the worker's consumer
        self.record_ids = self.ordering.transactional and record_ids_wanted(
            pipeline, name, timers=type(self.processor).on_timer is not Processor.on_timer)
        self.marks_client = marks_client(bootstrap, pipeline, name) if self.record_ids else None
        self.consumer = Consumer(
            client_config(
                "consumer", bootstrap, pipeline, name,
                **{"group.id": self.group_id, "client.id": f"{self.group_id}-{instance}"},
            )
            | {"error_cb": self._on_client_error, "on_commit": self._on_commit}
        )

    # ---------------------------------------------------------------- lifecycle
    def run(self) -> None:
        """Consume until stopped or idle, then take a final checkpoint. Raises WorkerFailed on error."""
        self.engine.start()
        tune_for_streaming()
        self._subscribe()
        interval = self.spec.checkpoint.interval
        next_checkpoint = time.monotonic() + interval
        next_poll = 0.0
        error: BaseException | None = None
        try:
            while not self.stop_event.is_set():
                msgs = self.consumer.consume(num_messages=self.batches.size, timeout=0.1)
                if msgs:
                    self.batches.observe(msgs)
                    self._handle(msgs)
                if self._rejoin:
                    self._rejoin_group()
                now = time.monotonic()
                if now >= next_poll or self.inflight is not None:  # a checkpoint awaits these reports
                    next_poll = now + POLL_INTERVAL
                    self.producer.poll(0)
                    for txn in self.txns.values():  # exactly-once: serve their delivery reports too
                        txn.poll()
                if self.engine.track_time and self.tasks:
                    self.event_time.tick(self.tasks.values())
                held = sum(sink.held_count for sink in self._sinks())
                limit = AT_MOST_ONCE_BATCH if self.sink.hold else MAX_HELD_OUTPUT
                if self.inflight is not None:  # too much held output waits for the checkpoint (backpressure)
                    self._await_inflight(block=held > limit)
                if self.inflight is None and (now >= next_checkpoint or held > limit or self._release_now(held)):
                    if self.overlap:
                        self._checkpoint_in_background()
                    else:
                        self.checkpoint()
                    next_checkpoint = now + interval
                    if self.inflight is None and self.backups is not None:  # no progress: failed rounds retry
                        self.backups.after_checkpoint(self.tasks.values())
                if self.exit_when_idle is not None and self._idle(now):
                    log.info("%s: inputs consumed and idle for %.1fs; stopping", self.name, self.exit_when_idle)
                    break
        except StopProcessing as exc:
            error = exc
        except BaseException as exc:  # a bug or a broken store: save nothing more, exit loudly
            self._close(checkpoint=False)
            raise WorkerFailed(f"processor `{self.name}` failed: {type(exc).__name__}: {exc}") from exc
        self._close(checkpoint=True)
        if error is not None:
            raise WorkerFailed(str(error)) from error

    def _handle(self, msgs: list[Any]) -> None:
        good = [msg for msg in msgs if msg.error() is None]  # events (EOF, errors) are rare: one fast pass
        eofs = []
        if len(good) != len(msgs):
            for msg in msgs:
                err = msg.error()
                if err is None:
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    eofs.append(msg)
                else:
                    log.warning("%s: consumer error: %s", self.name, err)
        if self._forgotten:  # rare (a failed transaction, until the rejoin): the check costs nothing otherwise
            good = [msg for msg in good if (msg.topic(), msg.partition()) not in self._forgotten]
        if good:
            self._idle_since = None  # idle means: every partition reached its end once, then silence
            started = time.monotonic()
            self.processed += self.engine.process_messages(good, self._task_for)  # clears at_eof
            self.stats.batch.observe(time.monotonic() - started)
        for msg in eofs:  # after the records: an EOF followed by newer records in the batch is stale
            task = self.tasks.get((msg.topic(), msg.partition()))
            if task is not None and (task.next_offset is None or msg.offset() >= task.next_offset):
                task.at_eof = True

    def _task_for(self, topic: str, partition: int) -> PartitionTask:
        return self.tasks[(topic, partition)]

    @property
    def duplicates(self) -> int:
        """Input records dropped as repeats by `dedup` (stylus/core/dedup.py); they count in `processed`."""
        return self.engine.dedup.dropped if self.engine.dedup is not None else 0

    def _release_now(self, held: int) -> bool:
        """At-most-once output is held while every partition is at its end: nothing more is coming to share
        its checkpoint, so the checkpoint that releases it does not wait for the interval."""
        return bool(held) and self.sink.hold and bool(self.tasks) and all(t.at_eof for t in self.tasks.values())

    def _idle(self, now: float) -> bool:
        assert self.exit_when_idle is not None
        # while partitions move (revoked or lost, not yet assigned again, or a rejoin after a failed
        # transaction), no task is left to be at EOF: that is not idleness (it once ended runs mid-input)
        settled = self._assignment_settled and not self._rejoin
        caught_up = (settled and self.assigned_once and all(t.at_eof for t in self.tasks.values())
                     and self.upstream_done())
        if not caught_up or self.sink.held_count:
            self._idle_since = None
            return False
        if self.inflight is not None:  # a checkpoint still landing: not idle yet, but no new work either
            return False
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= self.exit_when_idle

    def _close(self, *, checkpoint: bool) -> None:
        try:
            if not checkpoint and self.inflight is not None:
                self.inflight[0].abandon()
                self._serve_until_done(self.inflight[1])  # let the I/O finish; its outcome no longer matters
                self.inflight = None
            if checkpoint:
                self.checkpoint()
            self.consumer.close()  # leaves the group; revocation callbacks checkpoint what is left
        except Exception:
            log.exception("%s: error while closing", self.name)
        finally:
            for txn in self.txns.values():
                txn.abort()  # after a final checkpoint the open transaction is empty
            self._drop(list(self.tasks.values()))
            self.producer.flush(10)
            close_producer(self.producer)
            if self.backups is not None:
                self.backups.close()
            self.checkpointer.shutdown(wait=True)
            if self.marks_client is not None:
                self.marks_client.close()
            self.processor.close()
            self.finished = True

    # ---------------------------------------------------------------- checkpoints
    def checkpoint(self, tasks: Iterable[PartitionTask] | None = None) -> None:
        """Checkpoint `tasks` (all by default) and wait for it. Raises on any failure."""
        self._await_inflight()
        pending = self._begin_checkpoint(tasks)
        if pending is not None:
            pending.run()
            self._complete(pending)

    def _begin_checkpoint(self, tasks: Iterable[PartitionTask] | None = None) -> PendingCheckpoint | None:
        chosen = [t for t in (self.tasks.values() if tasks is None else tasks) if t.next_offset is not None]
        if not any(t.has_progress for t in chosen) and not self.sink.held_count:
            return None
        return PendingCheckpoint(self, chosen)

    def _checkpoint_in_background(self) -> None:
        """Start a checkpoint whose I/O runs on the checkpoint thread; until it is done, output is held
        and processing goes on (side-effect-free work overlapped with the checkpoint)."""
        pending = self._begin_checkpoint()
        if pending is None:
            return
        pending.run_prefix(overlapped=True)  # its consumer commit is only sent: see PendingCheckpoint
        if not pending.middle:
            pending.run_suffix()
            self._complete(pending)
            return
        for sink in self._sinks():
            sink.paused = True
        self.inflight = (pending, self.checkpointer.submit(pending.run_background))

    def _await_inflight(self, *, block: bool = True) -> None:
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

    def _serve_until_done(self, future: Future[None]) -> None:
        """Wait for the checkpoint thread while serving the producers' delivery reports, which its
        `emit` and `transaction` steps wait for (stylus/runtime/sink.py, wait_until_served)."""
        while not future.done():
            self.producer.poll(0.005)
            for txn in self.txns.values():
                txn.poll()

    def _complete(self, pending: PendingCheckpoint) -> None:
        """Back on the worker thread once the steps are done."""
        for task, exc in pending.fenced:
            self._fenced(task, exc)
        for task, exc in pending.aborted:
            self._aborted(task, exc)
        for task in pending.tasks:
            task.committed_offset = pending.offsets[task.key]
            if isinstance(task.state, StateMap):
                task.state.evict()
        for sink in self._sinks():
            sink.resume()
        self.event_time.after_checkpoint(pending.watermark, self.tasks.values())
        self.checkpoints += 1
        self.last_checkpoint_seconds = time.monotonic() - pending.started
        self.stats.checkpoint.observe(self.last_checkpoint_seconds)
        if self.backups is not None:  # a RocksDB checkpoint now, uploaded in the background
            self.backups.after_checkpoint(self.tasks.values())

    def _sinks(self) -> list[KafkaSink]:
        return [self.sink, *(txn.sink for txn in self.txns.values())]

    def _forget(self, task: PartitionTask, *, keep_staged: bool) -> None:
        """Drop a partition's uncommitted state and its store. Its staged checkpoint goes too when its
        transaction certainly did not commit (fenced); when the outcome is unknown (`Aborted` after a
        timeout), it stays for recovery to apply or discard by the group's committed offset."""
        if task.state is not None:
            task.state.discard_changes()
        if task.store is not None and not keep_staged:
            task.store.discard_staged()
        self._drop([task])
        self._forgotten.add(task.key)

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            list(self.spec.inputs), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _rejoin_group(self) -> None:
        """Leave the group and join again (after a failed transaction, see `_aborted`)."""
        self._rejoin = False
        self._assignment_settled = False  # until the group assigns again (`_idle`)
        log.warning("%s: rejoining the consumer group", self.name)
        self.consumer.unsubscribe()
        self._subscribe()

    def _aborted(self, task: PartitionTask, exc: Exception) -> None:
        """The partition's transaction failed but nobody else owns it: forget its uncommitted work, then
        rejoin the group (after this batch), so the partition comes back through the group protocol (here
        or elsewhere) and is fenced, settled and replayed from its last commit like any new assignment.
        Reopening it in place could fence a rightful new owner if this instance were a zombie whose group
        membership had already lapsed."""
        log.warning("%s: %s; replaying %s[%d] from its last commit", self.name, exc, task.topic, task.partition)
        txn = self.txns.get(task.key)
        if txn is not None:
            txn.abandon()
        self._forget(task, keep_staged=True)
        self._rejoin = True  # leaving the group unassigns the partition

    def _fenced(self, task: PartitionTask, exc: Exception) -> None:
        """A newer instance owns the partition: forget our uncommitted work and let go of it."""
        log.error("%s: %s; giving up %s[%d]", self.name, exc, task.topic, task.partition)
        self._forget(task, keep_staged=False)
        # only what is still assigned can be unassigned (for a partition already revoked the client raised
        # an error no `except` caught, in the dropped-connections test)
        if (task.topic, task.partition) not in {(tp.topic, tp.partition) for tp in self.consumer.assignment()}:
            return
        try:
            tp = [TopicPartition(task.topic, task.partition)]
            self.consumer.incremental_unassign(tp) if self._cooperative else self.consumer.unassign()
        except KafkaException as unassign_error:  # already being revoked
            log.debug("%s: unassign after fencing: %s", self.name, unassign_error)

    # ---------------------------------------------------------------- rebalances
    def _store_path(self, topic: str, partition: int) -> Path:
        return Path(self.spec.state.dir) / self.pipeline.pipeline / self.name / f"{topic}-{partition}"

    def _open_task(self, topic: str, partition: int) -> PartitionTask:
        store = None
        if self.remote_state is not None:  # monoid state in PostgreSQL: resume offset from its offsets table
            store = self.remote_state.open(topic, partition)
        elif self.spec.stateful or self.ordering.transactional:  # exactly-once stages its checkpoints there
            if self.backups is not None:  # missing or older than the newest backup: restore it first
                self.backups.restore_if_newer(topic, partition, self._store_path(topic, partition), self.consumer)
            kv = RocksKV(self._store_path(topic, partition))
            store = PartitionStore(kv, cache_entries=self.spec.state.cache_entries)
        task = PartitionTask(topic, partition, store)
        if self.ordering.transactional:  # fence the old owner now; settle once every partition is fenced
            txn = TransactionalPartition(task, self.pipeline, self.name, self.bootstrap, self.consumer,
                                         self.engine.ctx, self.instance, record_ids=self.record_ids)
            txn.fence()
            task.sink = txn.sink
            self.txns[task.key] = txn
        return task

    def _prepare_task(self, task: PartitionTask) -> None:
        """After every assigned partition was opened (and fenced): settle, catch up, choose the offset."""
        txn = self.txns.get(task.key)
        committed = txn.settle() if txn is not None else None
        if self.backups is not None:  # group committed past the state: replay the gap, output suppressed
            self.backups.catch_up(task, self.engine, self.consumer, self.bootstrap)
        if committed is not None:
            task.next_offset = task.committed_offset = committed

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.assigned_once = True
        self._assignment_settled = True  # called at the end of every rebalance, with an empty list too
        self._idle_since = None
        self._unassigned(partitions)  # ours again, from the offset chosen below
        opened = [self._open_task(tp.topic, tp.partition) for tp in partitions]
        for tp, task in zip(partitions, opened, strict=True):
            self._prepare_task(task)
            self.tasks[task.key] = task
            tp.offset = task.next_offset if task.next_offset is not None else OFFSET_STORED
        if partitions:
            log.info("%s: assigned %s", self.name,
                     ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions))
        self._assign(consumer, partitions)

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._assignment_settled = False
        self._idle_since = None
        if partitions:
            log.info("%s: revoking %s", self.name, ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        self._await_inflight()  # it may cover these partitions: let it land first
        revoked = [self.tasks[k] for k in ((tp.topic, tp.partition) for tp in partitions) if k in self.tasks]
        try:
            self.checkpoint(revoked)
        finally:
            self._drop(revoked)
            if self._cooperative:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()
            self._unassigned(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions already belong to someone else: save nothing, forget buffered work."""
        self.rebalances += 1
        self._assignment_settled = False
        self._idle_since = None
        self._await_inflight()
        lost = [self.tasks[k] for k in ((tp.topic, tp.partition) for tp in partitions) if k in self.tasks]
        log.warning("%s: lost %d partitions without a clean hand-over", self.name, len(lost))
        for task in lost:
            txn = self.txns.get(task.key)
            if txn is not None:
                txn.let_go()
            if task.state is not None:
                task.state.discard_changes()
        self._drop(lost)
        self._unassigned(partitions)

    def _unassigned(self, partitions: list[TopicPartition]) -> None:
        """No record of these comes any more: they need no filtering (see `_forgotten`)."""
        self._forgotten.difference_update((tp.topic, tp.partition) for tp in partitions)

    def _drop(self, tasks: list[PartitionTask]) -> None:
        for task in tasks:
            if self.tasks.get(task.key) is not task:
                continue
            txn = self.txns.pop(task.key, None)
            if txn is not None:
                txn.close()
            if task.store is not None:
                task.store.close()
            self.tasks.pop(task.key, None)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An asynchronous offsets commit answered (served by consume() on this thread)."""
        if self.inflight is not None:
            self.inflight[0].committed(err, partitions)

    def _on_client_error(self, err: KafkaError) -> None:
        log.warning("%s: kafka: %s", self.name, err)
