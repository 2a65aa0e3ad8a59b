"""One processor instance: a consumer-group member that consumes, processes, produces and checkpoints.

Single-threaded by design: the consumer, the producer, the rebalance callbacks and checkpoint completion all
run on the worker's own thread, so there are no queues between threads to stall silently. The worker wires
its collaborators: `assignment` (the partitions held, the group's callbacks), `recovery` (opening a
partition), `checkpointing` (when checkpoints run and how they are waited for) and `checkpoint` (what one
does, by the ordering of the processor's semantics).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.api import Processor, import_processor_class
from stylus.config.model import Pipeline
from stylus.core.concurrent import SHORT_WAIT, ConcurrentEngine, concurrency_problem
from stylus.core.engine import StopProcessing
from stylus.core.engines import engine_for
from stylus.core.task import PartitionTask
from stylus.eventtime.driver import WorkerEventTime
from stylus.kafka.batching import OVERHEAD_BYTES, BatchSizer
from stylus.kafka.callbacks import surfacing
from stylus.kafka.columnar import PartitionReader
from stylus.kafka.errors import client_failed
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import AT_MOST_ONCE_PRODUCER, client_config
from stylus.monoid.backend import remote_state_for
from stylus.runtime.assignment import Assignment
from stylus.runtime.checkpoint import CheckpointScope, Ordering, PendingCheckpoint, ordering_for
from stylus.runtime.checkpointing import Checkpointer
from stylus.runtime.failures import FailurePolicy
from stylus.runtime.faults import FaultInjector
from stylus.runtime.gctune import tune_for_streaming
from stylus.runtime.recovery import PartitionOpener
from stylus.runtime.sink import KafkaSink, message_max_bytes
from stylus.runtime.stats import WorkerStats
from stylus.runtime.transactions import Fenced, WorkerTransaction, marks_client, output_marks, record_ids_wanted
from stylus.state.backup import BackupManager
from stylus.tables.registry import TableRegistry

log = logging.getLogger(__name__)

#: Held output past this waits for the checkpoint in flight (backpressure), and a checkpoint is taken early.
MAX_HELD_OUTPUT = 200_000
#: At-most-once output waits in memory for the checkpoint that releases it: it takes the place of
#: MAX_HELD_OUTPUT for a worker whose output is held so (a checkpoint as soon as this many records are held,
#: and the worker waits for the one in flight past it). Kept small: held records released in bulk hand their
#: memory back to the kernel, and the next ones fault it in again page by page, which costs far more kernel
#: time than a small batch does. It also bounds what a crash loses and how long output waits.
AT_MOST_ONCE_BATCH = 20_000
HANDOVER_SLACK = 2.0  # seconds for a rebalance to complete once the group has noticed a member is gone
#: Producers report failed deliveries only (`delivery.report.only.error`): serving them this often, not after
#: every batch, spares the worker a GIL release and reacquire per producer per loop.
POLL_INTERVAL = 0.05
#: `concurrency`: how long a loop waits for work in flight to complete when every partition is full
FULL_WAIT = 0.05
#: `concurrency`: while every partition is full the consumer is not asked for records, except this often (one
#: record), so that rebalance callbacks and consumer events are still served
KEEPALIVE = 1.0


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
        self.spec = spec = pipeline.processors[name]
        self.stop_event = stop or threading.Event()
        self.exit_when_idle = exit_when_idle
        self.upstream_done = upstream_done
        self.ordering = ordering or ordering_for(spec.semantics.state, spec.semantics.output)
        self.group_id = pipeline.group_id(name)
        self.faults = FaultInjector()
        self.processed = 0
        self.stats = WorkerStats()  # timings read by stylus.monitoring at scrape time
        self.finished = False
        self._idle_since: float | None = None
        # called after each round's consumed records are handled (benchmarks time batches by it)
        self.on_batch: Callable[[], None] | None = None
        consumer_config = client_config("consumer", bootstrap, pipeline, name, self._consumer_defaults())
        self.batches = BatchSizer.for_consumer(spec.batch_size, consumer_config)  # fewer when records are big
        # `--exit-when-idle` with partitions of the inputs held elsewhere waits this long after the last rebalance
        # (see `_idle`): the group's session timeout, a heartbeat to learn of the rebalance, and the rebalance
        self.handover_wait = (int(consumer_config.get("session.timeout.ms", 45_000))
                              + int(consumer_config.get("heartbeat.interval.ms", 3_000))) / 1000 + HANDOVER_SLACK
        self.input_partitions = sum(pipeline.topics[t].partitions for t in spec.inputs)

        producer_config = client_config(
            "producer", bootstrap, pipeline, name,
            AT_MOST_ONCE_PRODUCER if spec.semantics.output == "at_most_once" else None,
            **{"client.id": f"{self.group_id}-{instance}", "delivery.report.only.error": True},
        )
        self.producer_config = producer_config
        self.sink: KafkaSink
        self.producer = Producer(producer_config | {"on_delivery": self._delivered})
        self.sink = KafkaSink(self.producer, pipeline, spec.outputs, hold=self.ordering.holds_output,
                              max_bytes=message_max_bytes(producer_config), on_delivery=self._delivered)
        self.failures = FailurePolicy(spec.on_error, name, pipeline.dlq_topic(name), self.sink)
        self.processor: Processor = import_processor_class(spec.class_)(config=spec.config, name=name)
        remote_state = remote_state_for(pipeline, name, self.processor)  # None: local RocksDB state
        self.engine = engine_for(self.processor, name, spec, pipeline, self.sink, self.failures)  # or batch
        # `concurrency`: up to N records of each partition in flight, tracked by an acker (docs/acker.md)
        self.concurrent: ConcurrentEngine | None = None
        self._consumed_at = 0.0  # the last consume under `concurrency`
        self._next_checkpoint = 0.0  # when the loop (`_step`) starts the next checkpoint, and serves reports
        self._next_poll = 0.0
        if spec.concurrency is not None:
            refused = concurrency_problem(pipeline, name, type(self.processor))
            if refused:
                raise ValueError(f"processor `{name}`: `concurrency` cannot apply: {refused}")
            self.concurrent = ConcurrentEngine(self.engine, spec.concurrency, spec.work_timeout, spec.work_attempts,
                                               pause=self._pause, resume=self._resume)
        self.event_time = WorkerEventTime(  # watermarks, timers, late-record counters (stylus/eventtime)
            pipeline, name, instance, self.producer, self.engine,
            eager=not (self.ordering.holds_output or self.ordering.transactional))
        self.backups = BackupManager.for_worker(pipeline, name)  # None: no state.backup configured
        # exactly-once output: do outputs carry `stylus.id` (semantics.output_ids)? Where they do, each commit
        # also saves where the output partitions end (for a backup restore's timeline): a group-less consumer
        # asks, since the checkpoint thread must not call the worker's consumer
        record_ids = self.ordering.transactional and record_ids_wanted(
            pipeline, name, timers=type(self.processor).on_timer is not Processor.on_timer)
        self.marks_client = marks_client(bootstrap, pipeline, name) if record_ids else None
        self.checkpointer: Checkpointer
        self.consumer = Consumer(
            client_config("consumer", bootstrap, pipeline, name, self._consumer_defaults(),
                          **{"group.id": self.group_id, "client.id": f"{self.group_id}-{instance}"})
            | {"error_cb": self._on_client_error,
               "on_commit": surfacing(lambda err, tps: self.checkpointer.on_commit(err, tps))}
        )
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.transaction = (  # exactly-once output only
            WorkerTransaction(pipeline, name, bootstrap, self.consumer, self.engine.ctx, instance,
                              record_ids=record_ids, faults=self.faults) if self.ordering.transactional else None)
        marks_client_ = self.marks_client
        scope = CheckpointScope(
            name, self.ordering, self.consumer, self.sink, self.transaction, self.faults, self.stats.commit,
            (lambda: output_marks(marks_client_, pipeline, spec.outputs)) if marks_client_ is not None else None,
            lease=int(consumer_config.get("session.timeout.ms", 45_000)) / 1000 if self.ordering.holds_output
            else None)
        # remote monoid state saves in its own database transaction on the worker thread: no overlap there
        self.checkpointer = Checkpointer(
            scope, self, overlap=spec.checkpoint.overlap and remote_state is None, serve=self._serve,
            sinks=self._sinks, watermark=lambda: self.engine.watermark, stats=self.stats)
        opener = PartitionOpener(pipeline, name, bootstrap, self.consumer, self.engine,
                                 transaction=self.transaction, record_ids=record_ids,
                                 backups=self.backups, remote_state=remote_state)
        self.assignment = Assignment(name, self.consumer, opener, self.checkpointer, self.tasks, self.transaction,
                                     cooperative="cooperative" in str(consumer_config.get(
                                         "partition.assignment.strategy", "")),
                                     released=self.concurrent.drop if self.concurrent is not None else None)
        # `tables:` (docs/tables.md): caught up in the assignment path, then followed from this worker's loop
        self.tables = TableRegistry.for_worker(pipeline, name, bootstrap)
        self.engine.tables = self.assignment.tables = self.tables
        # a batch processor's records read as columns per partition (stylus/kafka/columnar.py), no Message each
        self.reader = PartitionReader.for_consumer(self.consumer) if (
            self.engine.takes_columns and self.engine.dedup is None and self.concurrent is None) else None
        self.assignment.reader = self.reader

    def _consumer_defaults(self) -> dict[str, str]:
        """Exactly-once output rebalances eagerly unless the YAML says otherwise: every partition is revoked,
        and its transaction committed, before the member rejoins, while its group generation is still the
        current one. In a cooperative rebalance the revocation comes after the generation moved on, so the
        offsets of the transactions in flight are refused (ILLEGAL_GENERATION) and their work is replayed."""
        return {"partition.assignment.strategy": "roundrobin"} if self.ordering.transactional else {}

    # ---------------------------------------------------------------- lifecycle
    def run(self) -> None:
        """Consume until stopped or idle, then take a final checkpoint. Raises WorkerFailed on error."""
        self.engine.start()
        tune_for_streaming()
        self.assignment.subscribe(list(self.spec.inputs))
        self._next_checkpoint = time.monotonic() + self.spec.checkpoint.interval
        self._next_poll = 0.0
        error: BaseException | None = None
        try:
            while not self.stop_event.is_set():
                try:
                    if self._step():
                        break
                except (KafkaException, SystemError) as exc:  # a client's fatal error (kafka/errors.py): only
                    # a fenced output producer is survived
                    if not self._drop_if_fenced(exc):
                        raise
            if self.concurrent is not None:
                self._drain(self.concurrent)
        except StopProcessing as exc:
            error = exc
        except BaseException as exc:  # a bug or a broken store: save nothing more, exit loudly
            self._close(checkpoint=False)
            raise WorkerFailed(f"processor `{self.name}` failed: {type(exc).__name__}: {exc}") from exc
        self._close(checkpoint=True)
        if error is not None:
            raise WorkerFailed(str(error)) from error

    def _step(self) -> bool:
        """One round of the loop: a batch, the work in flight, delivery reports, timers, a checkpoint when due.
        True when the inputs are consumed and idle (`exit_when_idle`)."""
        if self.reader is not None:  # the consumer serves its events, the reader returns the records
            msgs = self.consumer.consume(num_messages=self.batches.size, timeout=0)
            self._read(self.reader, 0.0 if msgs else 0.1)
        elif self.concurrent is None:
            msgs = self.consumer.consume(num_messages=self.batches.size, timeout=0.1)
        else:
            msgs = self._consume_concurrently(self.concurrent)
        if msgs:
            self.batches.observe(msgs)
            self._handle(msgs)
        if self.on_batch is not None:
            self.on_batch()
        if self.concurrent is not None and self.concurrent.active:  # drive the work in flight, a slice
            self.processed += self.concurrent.run(
                0.0 if msgs else FULL_WAIT if self.concurrent.full(self.tasks.values()) else SHORT_WAIT)
        if self.tables is not None:  # table records that arrived: applied between batches
            self.tables.poll()
        if self.assignment.rejoin and not self.stop_event.is_set():  # stopping: close() leaves the group; a
            # subscribe still on its way when the consumer closes trips librdkafka's assertion at destroy
            self.assignment.rejoin_group(list(self.spec.inputs))
        now = time.monotonic()
        if now >= self._next_poll or self.checkpointer.inflight is not None:  # a checkpoint awaits reports
            self._next_poll = now + POLL_INTERVAL
            self._serve(0)
            if self.transaction is not None and self.transaction.fenced and self.tasks:  # served a fence
                self._drop_fenced(f"{self.transaction.transactional_id} was fenced")
        if self.engine.track_time and self.tasks:
            self.event_time.tick(self.tasks.values())
        held = sum(sink.held_count for sink in self._sinks())
        limit = AT_MOST_ONCE_BATCH if self.sink.hold else MAX_HELD_OUTPUT
        if self.checkpointer.inflight is not None:  # too much held output waits for it (backpressure)
            self.checkpointer.await_inflight(block=held > limit)
        if self.checkpointer.inflight is None and (
                now >= self._next_checkpoint or held > limit or self._release_now(held)):
            self.checkpointer.start(self.tasks.values())
            self._next_checkpoint = now + self.spec.checkpoint.interval
            if self.checkpointer.inflight is None and self.backups is not None:  # failed rounds retry
                self.backups.after_checkpoint(self.tasks.values())
        if self.exit_when_idle is not None and self._idle(now):
            log.info("%s: inputs consumed and idle for %.1fs; stopping", self.name, self.exit_when_idle)
            return True
        return False

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        """The producer's delivery reports (only failed ones: `delivery.report.only.error`), to the sink."""
        self.sink.on_delivery(err, msg)

    def _drop_if_fenced(self, exc: Exception) -> bool:
        """A fatal error out of the loop (a `produce` refused, most often): if it is the transactional
        producer's, fenced by the partitions' next owner before a commit of ours found out, this instance is a
        zombie, and it goes on as after a failed checkpoint (`_drop_fenced`). False: another client's fatal
        error, which fails the worker."""
        txn = self.transaction
        if txn is None or not client_failed(exc):
            return False
        self.checkpointer.await_inflight()  # a commit in flight meets the same fence, and fails first
        txn.poll()  # the fence not served yet: served now, and the producer marked fenced
        if not txn.fenced:
            return False
        self._drop_fenced(f"{txn.transactional_id} was fenced: {exc.__cause__ or exc}")
        return True

    def _drop_fenced(self, why: str) -> None:
        """The transactional producer was fenced before a checkpoint of ours failed on it: its open transaction
        is aborted, and nothing since the last commit counts. As for a failed checkpoint: the partitions are
        forgotten and replayed from their last commit, after a rejoin, on a new producer (docs/semantics.md,
        "Failures")."""
        self.checkpointer.await_inflight()  # its failure forgets the partitions itself
        if self.tasks:
            self.assignment.checkpoint_failed(Fenced(why), fenced=True)

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
        forgotten = self.assignment.forgotten
        if forgotten:  # rare (a failed transaction, until the rejoin): the check costs nothing otherwise
            good = [msg for msg in good if (msg.topic(), msg.partition()) not in forgotten]
        if good:
            self._idle_since = None  # idle means: every partition reached its end once, then silence
            started = time.monotonic()
            if self.concurrent is None:
                self.processed += self.engine.process_messages(good, self.assignment.task_for)  # clears at_eof
            else:  # begun in the acker, started as slots free up; counted as they complete
                self.processed += self.concurrent.admit(good, self.assignment.task_for)
            self.stats.batch.observe(time.monotonic() - started)
        for msg in eofs:  # after the records: an EOF followed by newer records in the batch is stale
            self._reached_end(msg.topic(), msg.partition(), msg.offset())

    def _reached_end(self, topic: str, partition: int, offset: int) -> None:
        task = self.tasks.get((topic, partition))
        if task is not None and (task.next_offset is None or offset >= task.next_offset):
            task.at_eof = True

    def _read(self, reader: PartitionReader, timeout: float) -> None:
        """`_handle` for records read as columns per partition (a batch processor's `reader`)."""
        runs, events, size = reader.read(self.batches.size, timeout)
        forgotten = self.assignment.forgotten
        if forgotten:  # as in `_handle`
            runs = [run for run in runs if (run.topic, run.partition) not in forgotten]
        if runs:
            records = sum(len(run.values) for run in runs)
            self.batches.observe_total(size + OVERHEAD_BYTES * records, records)
            self._idle_since = None
            started = time.monotonic()
            task_for = self.assignment.task_for
            for run in runs:
                self.processed += self.engine.process_columns(*run, task_for)
            self.stats.batch.observe(time.monotonic() - started)
        for event in events:  # after the records, as in `_handle`
            if event.error.code() == KafkaError._PARTITION_EOF and event.topic is not None:
                self._reached_end(event.topic, event.partition, event.offset)
            else:
                log.warning("%s: consumer error: %s", self.name, event.error)

    def _consume_concurrently(self, concurrent: ConcurrentEngine) -> list[Any]:
        """Only as many records as the partitions can take, none while all are full (but for a keepalive); and no
        waiting in the consumer while work is in flight: the event loop waits instead (`ConcurrentEngine.run`)."""
        room = concurrent.room(self.tasks.values()) if self.tasks else concurrent.high  # (before an assignment)
        now = time.monotonic()
        if not room and concurrent.busy and now - self._consumed_at < KEEPALIVE:
            return []
        self._consumed_at = now
        return self.consumer.consume(num_messages=max(1, min(self.batches.size, room)),
                                     timeout=0 if concurrent.busy else 0.1)

    def _pause(self, task: PartitionTask) -> None:
        """A partition holds as many records as it may: the consumer stops fetching it until some complete."""
        self.consumer.pause([TopicPartition(task.topic, task.partition)])

    def _resume(self, task: PartitionTask) -> None:
        """Fetch the partition again, from the record after the last one taken. The seek is what restarts the
        fetching at once: after a plain `resume`, librdkafka 2.x waited about a second before its next fetch of
        the partition (measured: 0.86-0.97 s, against 5-30 ms with the seek)."""
        self.consumer.resume([TopicPartition(task.topic, task.partition)])
        if task.next_offset is not None:
            try:
                self.consumer.seek(TopicPartition(task.topic, task.partition, task.next_offset))
            except KafkaException as exc:  # not fetching yet (a rebalance under way): it restarts by itself
                log.debug("%s: seek on resuming %s[%d] failed: %s", self.name, task.topic, task.partition, exc)

    def _drain(self, concurrent: ConcurrentEngine) -> None:
        """A clean stop: let the work in flight complete (for `work_timeout` at most) before the final
        checkpoint, so that the checkpoint covers it and the next run does not do it again. Work still in flight
        after that is cancelled, and done again by the next run (its offsets were not committed)."""
        deadline = time.monotonic() + self.spec.work_timeout
        while concurrent.busy and time.monotonic() < deadline:
            self.processed += concurrent.run(FULL_WAIT)
            self._serve(0)
            if self.checkpointer.inflight is not None:
                self.checkpointer.await_inflight(block=False)
        if concurrent.busy:
            log.warning("%s: stopping with %d records still in flight after %gs; the next run does them again",
                        self.name, concurrent.incomplete, self.spec.work_timeout)

    def _serve(self, timeout: float) -> None:
        """Delivery reports of the worker's producer and, for exactly-once output, the partitions' ones."""
        self.producer.poll(timeout)
        if self.transaction is not None:
            self.transaction.poll()

    def _sinks(self) -> list[KafkaSink]:
        return [self.sink, *self.transaction.sinks.values()] if self.transaction is not None else [self.sink]

    @property
    def duplicates(self) -> int:
        """Input records dropped as repeats by `dedup` (stylus/core/dedup.py); they count in `processed`."""
        return self.engine.dedup.dropped if self.engine.dedup is not None else 0

    @property
    def checkpoints(self) -> int:
        return self.checkpointer.count

    @property
    def rebalances(self) -> int:
        return self.assignment.rebalances

    @property
    def assigned_once(self) -> bool:
        return self.assignment.assigned_once

    def checkpoint(self) -> None:
        """Checkpoint every partition now and wait for it."""
        self.checkpointer.checkpoint(self.tasks.values())

    def _release_now(self, held: int) -> bool:
        """At-most-once output is held while every partition is at its end: nothing more is coming to share
        its checkpoint, so the checkpoint that releases it does not wait for the interval."""
        return bool(held) and self.sink.hold and bool(self.tasks) and all(t.at_eof for t in self.tasks.values())

    def _idle(self, now: float) -> bool:
        assert self.exit_when_idle is not None
        # while partitions move (revoked or lost, not yet assigned again, or a rejoin after a failed
        # transaction), no task is left to be at EOF: that is not idleness (it once ended runs mid-input)
        assignment = self.assignment
        settled = assignment.settled and not assignment.rejoin
        caught_up = (settled and assignment.assigned_once and all(t.at_eof for t in self.tasks.values())
                     and self.upstream_done() and not (self.concurrent is not None and self.concurrent.busy))
        if not caught_up or self.sink.held_count:
            self._idle_since = None
            return False
        if self.checkpointer.inflight is not None:  # a checkpoint still landing: not idle yet, nor new work
            return False
        if self._idle_since is None or self._idle_since < assignment.moved_at:
            self._idle_since = now
        wait = self.exit_when_idle
        if len(self.tasks) < self.input_partitions:
            # Idle means every input consumed, not only the partitions this member has. The others may be on
            # their way here: a cooperative rebalance gives a joining member its partitions in a second round,
            # and a member that stopped answering (frozen, or gone without leaving the group) keeps its
            # partitions until its session times out. A member that waited this long is not getting them.
            wait = max(wait, self.handover_wait)
        return now - self._idle_since >= wait

    def _close(self, *, checkpoint: bool) -> None:
        """Leave the group and release everything, after a final checkpoint when `checkpoint`. Raises
        WorkerFailed (once closed) when that checkpoint fails: its outputs or offsets may not be saved."""
        final: Exception | None = None
        try:
            if checkpoint:
                try:
                    self.checkpoint()
                except Exception as exc:
                    final = exc
            if final is not None or not checkpoint:  # failing: nothing more is saved, by the revocation that
                self.checkpointer.abandon()  # leaving the group brings either
                self.assignment.abandon()
            if self.reader is not None:  # the partitions back to the consumer, or it cannot leave its group
                self.reader.close()
            self.consumer.close()  # leaves the group; revocation callbacks checkpoint what is left
        except Exception:
            log.exception("%s: error while closing", self.name)
        finally:
            if self.reader is not None:
                self.reader.close()
            if self.transaction is not None:
                self.transaction.abort()  # after a final checkpoint the open transaction is empty
            self.assignment.drop(list(self.tasks.values()))
            if self.transaction is not None:
                self.transaction.close()
            self.producer.flush(10)
            close_producer(self.producer)
            if self.backups is not None:
                self.backups.close()
            self.checkpointer.close()
            if self.marks_client is not None:
                self.marks_client.close()
            if self.tables is not None:
                self.tables.close()
            if self.concurrent is not None:
                self.concurrent.close()  # whatever is still in flight is cancelled: its offsets were not committed
            self.engine.in_order.close()
            self.processor.close()
            self.finished = True
        if final is not None:
            raise WorkerFailed(f"processor `{self.name}` failed: its final checkpoint: {type(final).__name__}: "
                               f"{final}") from final

    # ---------------------------------------------------------------- CheckpointListener
    def checkpoint_failed(self, exc: Exception, *, fenced: bool) -> None:
        self.assignment.checkpoint_failed(exc, fenced=fenced)

    def completed(self, pending: PendingCheckpoint) -> None:
        self.event_time.after_checkpoint(pending.watermark, self.tasks.values())
        if self.backups is not None:  # a RocksDB checkpoint now, uploaded in the background
            self.backups.after_checkpoint(self.tasks.values())

    def _on_client_error(self, err: KafkaError) -> None:
        log.warning("%s: kafka: %s", self.name, err)
