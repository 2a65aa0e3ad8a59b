"""The partitions a worker holds: the group's rebalance callbacks, and letting a partition go after its
transaction failed. Opening a partition is `recovery.PartitionOpener`; checkpointing `checkpointing`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

from stylus.core.task import PartitionTask
from stylus.kafka.callbacks import subscribe
from stylus.kafka.columnar import PartitionReader
from stylus.runtime.checkpointing import Checkpointer
from stylus.runtime.recovery import PartitionOpener
from stylus.runtime.transactions import Aborted, Fenced, WorkerTransaction

if TYPE_CHECKING:
    from stylus.tables.registry import TableRegistry

log = logging.getLogger(__name__)


class Assignment:
    def __init__(self, name: str, consumer: Consumer, opener: PartitionOpener, checkpointer: Checkpointer,
                 tasks: dict[tuple[str, int], PartitionTask], transaction: WorkerTransaction | None,
                 *, cooperative: bool, released: Callable[[list[PartitionTask]], None] | None = None) -> None:
        """`tasks` is the worker's: the engine and the checkpoints read the same mapping. `released` is told of
        partitions let go (after their checkpoint, if any): `concurrency` cancels their work in flight."""
        self.name = name
        self.consumer = consumer
        self.opener = opener
        self.checkpointer = checkpointer
        self.cooperative = cooperative
        self.tasks = tasks
        self.transaction = transaction  # exactly-once output only
        self.released = released
        # `ctx.table` lookups (stylus/tables/registry.py): caught up before any record of an assigned partition
        self.tables: TableRegistry | None = None
        # reads the partitions' records as columns (a batch processor's): takes each before it is assigned
        self.reader: PartitionReader | None = None
        # partitions whose task was dropped (`forget`) while still assigned: until the group assigns them
        # again, records of theirs already fetched must not reach the engine (there is no task for them)
        self.forgotten: set[tuple[str, int]] = set()
        self.rejoin = False  # a transaction failed: rejoin the group after this batch (see `aborted`)
        self.rebalances = 0
        self.failing = False  # the worker stops on an error: revocations save nothing more (`abandon`)
        self.assigned_once = False
        # the last rebalance callback was an assignment: the group is not moving partitions (an empty task
        # set means "none of them are ours", not "ours are on their way back")
        self.settled = False
        self.moved_at = time.monotonic()  # the last rebalance callback (idleness restarts from it)

    def task_for(self, topic: str, partition: int) -> PartitionTask:
        return self.tasks[(topic, partition)]

    def subscribe(self, topics: list[str]) -> None:
        subscribe(self.consumer, topics, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)

    def rejoin_group(self, topics: list[str]) -> None:
        """Leave the group and join again (after a failed transaction, see `aborted`)."""
        self.rejoin = False
        self.settled = False
        log.warning("%s: rejoining the consumer group", self.name)
        self.consumer.unsubscribe()
        self.subscribe(topics)

    # ---------------------------------------------------------------- rebalance callbacks (worker thread)
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._moved()
        self.assigned_once = True
        self.settled = True  # called at the end of every rebalance, with an empty list too
        self._unassigned(partitions)  # ours again, from the offset chosen below
        again = self._held(partitions)
        if again:  # assigned anew with no revocation before (a membership that lapsed while the process was
            # frozen): the old tasks' unsaved work and held output may be their other owner's by now
            self._lose(again)
        fresh = not self.tasks  # nothing kept from before (an eager rebalance, a rejoin, the first assignment)
        if self.transaction is not None:
            self.transaction.start()
            self.transaction.fence_previous_owners(partitions)
        if self.tables is not None:  # before the opener: a catch-up replay (R4) already looks tables up
            self.tables.assigned([(tp.topic, tp.partition) for tp in partitions])
        opened = [self.opener.open(tp.topic, tp.partition) for tp in partitions]
        for one in opened:  # each keeps its task as soon as it has one: a failure below drops it cleanly
            self.tasks[one.task.key] = one.task
        for one in opened:
            self.opener.prepare(one)
        if fresh and partitions:
            self.opener.restart_time()
            if self.transaction is not None:  # no partition names this producer yet: claim them before output
                try:
                    self.transaction.claim([(one.task, one.committed) for one in opened])
                except (Aborted, Fenced) as exc:  # its transaction failed (a broker restarting): as a checkpoint's
                    self.checkpoint_failed(exc, fenced=isinstance(exc, Fenced))
        for tp, one in zip(partitions, opened, strict=True):
            tp.offset = one.task.next_offset if one.task.next_offset is not None else OFFSET_STORED
        if partitions:
            log.info("%s: assigned %s", self.name,
                     ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions))
        if self.reader is not None:
            self.reader.take((tp.topic, tp.partition) for tp in partitions)
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def abandon(self) -> None:
        """The worker is stopping on an error (a failed checkpoint, a bug): the revocation that leaving the
        group brings must not checkpoint. Its outputs may be undelivered (the failure may be theirs), and a
        checkpoint would save the offsets past them; the partitions are let go as lost ones are."""
        self.failing = True

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._moved()
        if partitions:
            log.info("%s: revoking %s", self.name, ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        if self.failing:
            self.on_lost(consumer, partitions)
            self._unassign(consumer, partitions)
            return
        self.checkpointer.await_inflight()  # it may cover these partitions: let it land first
        revoked = self._held(partitions)
        try:
            # one transaction holds every partition's output: it commits with all their offsets, or the
            # outputs of the partitions kept would become visible without theirs. Held at-most-once output is
            # not kept per partition either: the checkpoint that releases it commits every partition's offset,
            # or a kept partition's output would go out with its offset uncommitted, and be written again by
            # whoever next replays it from the older offset (chaos seed 86387)
            whole = self.transaction is not None or self.checkpointer.scope.ordering.holds_output
            self.checkpointer.checkpoint(list(self.tasks.values()) if whole else revoked)
            if self.transaction is not None:  # handed over cleanly: their next owner need not fence this producer
                try:
                    self.transaction.release([task for task in revoked if self.tasks.get(task.key) is task])
                except (Aborted, Fenced) as exc:  # the next owner fences this producer: as a failed checkpoint
                    self.checkpoint_failed(exc, fenced=isinstance(exc, Fenced))
        finally:
            self.drop(revoked)
            self._unassign(consumer, partitions)
            self._unassigned(partitions)
            if self.tables is not None:
                self.tables.revoked([(tp.topic, tp.partition) for tp in partitions])

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions already belong to someone else: save nothing, forget buffered work."""
        self._moved()
        self._lose(self._held(partitions))
        self._unassigned(partitions)
        if self.tables is not None:
            self.tables.revoked([(tp.topic, tp.partition) for tp in partitions])

    def _lose(self, lost: list[PartitionTask]) -> None:
        self.checkpointer.await_inflight()
        # held (at-most-once) output is not kept per partition: all of it goes, which at-most-once allows; the
        # part that belongs to the lost partitions must never be released after their new owner took over
        dropped = self.checkpointer.drop_held() if lost else 0
        log.warning("%s: lost %d partitions without a clean hand-over (%d held outputs dropped)", self.name,
                    len(lost), dropped)
        if self.transaction is not None and lost:  # its transaction holds their output: none of it may commit
            self.transaction.abandon()
            kept = [task for task in self.tasks.values() if all(task is not t for t in lost)]
            for task in kept:  # their output went with the transaction: they come back through the group
                self._forget(task, keep_staged=True)
            self.rejoin = self.rejoin or bool(kept)
        for task in lost:
            if task.state is not None:
                task.state.discard_changes()
        self.drop(lost)

    def _moved(self) -> None:
        self.rebalances += 1
        self.settled = False
        self.moved_at = time.monotonic()

    def _held(self, partitions: list[TopicPartition]) -> list[PartitionTask]:
        return [self.tasks[k] for k in ((tp.topic, tp.partition) for tp in partitions) if k in self.tasks]

    def _unassigned(self, partitions: list[TopicPartition]) -> None:
        """No record of these comes any more: they need no filtering (see `forgotten`)."""
        self.forgotten.difference_update((tp.topic, tp.partition) for tp in partitions)

    # ---------------------------------------------------------------- failed checkpoints
    def checkpoint_failed(self, exc: Exception, *, fenced: bool) -> None:
        """A checkpoint failed: the worker's transaction did not commit, or the group refused the offsets of
        held at-most-once output (its output was dropped). Forget every partition's uncommitted work, give
        the producer up, then rejoin the group (after this batch), so the partitions come back through the
        group protocol (here or elsewhere) and are settled and replayed from their last commit like any new
        assignment, on a new producer. Reopening them in place could take them from a rightful new owner if
        this instance were a zombie whose group membership had already lapsed. Staged checkpoints stay when
        the outcome is unknown (`Aborted` after a timeout: recovery settles them by the group's committed
        offsets) and go when the transaction certainly did not commit (fenced)."""
        log.warning("%s: %s; replaying %s from their last commit", self.name, exc,
                    ", ".join(f"{t.topic}[{t.partition}]" for t in self.tasks.values()) or "no partitions")
        # output held since the failed checkpoint's snapshot (at-most-once output, or any output while an
        # overlapped checkpoint was in flight) came from records that will be replayed too: released, it would
        # be written twice, or produced into a transaction that failed
        dropped = self.checkpointer.drop_held()
        if dropped:
            log.warning("%s: %d held outputs of records processed since that checkpoint dropped", self.name, dropped)
        if self.transaction is not None:
            self.transaction.abandon()
        for task in list(self.tasks.values()):
            self._forget(task, keep_staged=not fenced)
        self.rejoin = True  # leaving the group unassigns the partitions

    def _forget(self, task: PartitionTask, *, keep_staged: bool) -> None:
        """Drop a partition's uncommitted state and its store. Its staged checkpoint goes too when its
        transaction certainly did not commit (fenced); when the outcome is unknown (`Aborted` after a
        timeout), it stays for recovery to apply or discard by the group's committed offset."""
        if task.state is not None:
            task.state.discard_changes()
        if task.store is not None and not keep_staged:
            task.store.discard_staged()
        self.drop([task])
        self.forgotten.add(task.key)

    def drop(self, tasks: list[PartitionTask]) -> None:
        for task in tasks:
            if self.tasks.get(task.key) is not task:
                continue
            if self.released is not None:
                self.released([task])
            if self.transaction is not None:
                self.transaction.unbind(task)
            if task.store is not None:
                task.store.close()
            self.tasks.pop(task.key, None)
