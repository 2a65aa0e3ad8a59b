"""The partitions a worker holds: the group's rebalance callbacks, and letting a partition go after its
transaction failed. Opening a partition is `recovery.PartitionOpener`; checkpointing `checkpointing`."""

from __future__ import annotations

import logging
import time

from confluent_kafka import OFFSET_STORED, Consumer, KafkaException, TopicPartition

from stylus.core.task import PartitionTask
from stylus.runtime.checkpointing import Checkpointer
from stylus.runtime.recovery import PartitionOpener
from stylus.runtime.transactions import TransactionalPartition

log = logging.getLogger(__name__)


class Assignment:
    def __init__(self, name: str, consumer: Consumer, opener: PartitionOpener, checkpointer: Checkpointer,
                 tasks: dict[tuple[str, int], PartitionTask], txns: dict[tuple[str, int], TransactionalPartition],
                 *, cooperative: bool) -> None:
        """`tasks` and `txns` are the worker's: the engine and the checkpoints read the same mappings."""
        self.name = name
        self.consumer = consumer
        self.opener = opener
        self.checkpointer = checkpointer
        self.cooperative = cooperative
        self.tasks = tasks
        self.txns = txns  # exactly-once output only
        # partitions whose task was dropped (`forget`) while still assigned: until the group assigns them
        # again, records of theirs already fetched must not reach the engine (there is no task for them)
        self.forgotten: set[tuple[str, int]] = set()
        self.rejoin = False  # a transaction failed: rejoin the group after this batch (see `aborted`)
        self.rebalances = 0
        self.assigned_once = False
        # the last rebalance callback was an assignment: the group is not moving partitions (an empty task
        # set means "none of them are ours", not "ours are on their way back")
        self.settled = False
        self.moved_at = time.monotonic()  # the last rebalance callback (idleness restarts from it)

    def task_for(self, topic: str, partition: int) -> PartitionTask:
        return self.tasks[(topic, partition)]

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)

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
        fresh = not self.tasks  # nothing kept from before (an eager rebalance, a rejoin, the first assignment)
        opened = [self.opener.open(tp.topic, tp.partition) for tp in partitions]
        for one in opened:  # each keeps its task as soon as it has one: a failure below drops it cleanly
            self.tasks[one.task.key] = one.task
            if one.txn is not None:
                self.txns[one.task.key] = one.txn
        for tp, one in zip(partitions, opened, strict=True):
            self.opener.prepare(one)
            tp.offset = one.task.next_offset if one.task.next_offset is not None else OFFSET_STORED
        if fresh and partitions:
            self.opener.restart_time()
        if partitions:
            log.info("%s: assigned %s", self.name,
                     ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions))
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._moved()
        if partitions:
            log.info("%s: revoking %s", self.name, ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        self.checkpointer.await_inflight()  # it may cover these partitions: let it land first
        revoked = self._held(partitions)
        try:
            self.checkpointer.checkpoint(revoked)
        finally:
            self.drop(revoked)
            if self.cooperative:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()
            self._unassigned(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions already belong to someone else: save nothing, forget buffered work."""
        self._moved()
        self.checkpointer.await_inflight()
        lost = self._held(partitions)
        # held (at-most-once) output is not kept per partition: all of it goes, which at-most-once allows; the
        # part that belongs to the lost partitions must never be released after their new owner took over
        dropped = self.checkpointer.drop_held() if lost else 0
        log.warning("%s: lost %d partitions without a clean hand-over (%d held outputs dropped)", self.name,
                    len(lost), dropped)
        for task in lost:
            txn = self.txns.get(task.key)
            if txn is not None:
                txn.let_go()
            if task.state is not None:
                task.state.discard_changes()
        self.drop(lost)
        self._unassigned(partitions)

    def _moved(self) -> None:
        self.rebalances += 1
        self.settled = False
        self.moved_at = time.monotonic()

    def _held(self, partitions: list[TopicPartition]) -> list[PartitionTask]:
        return [self.tasks[k] for k in ((tp.topic, tp.partition) for tp in partitions) if k in self.tasks]

    def _unassigned(self, partitions: list[TopicPartition]) -> None:
        """No record of these comes any more: they need no filtering (see `forgotten`)."""
        self.forgotten.difference_update((tp.topic, tp.partition) for tp in partitions)

    # ---------------------------------------------------------------- failed transactions
    def aborted(self, task: PartitionTask, exc: Exception) -> None:
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
        self.rejoin = True  # leaving the group unassigns the partition

    def fenced(self, task: PartitionTask, exc: Exception) -> None:
        """A newer instance owns the partition: forget our uncommitted work and let go of it."""
        log.error("%s: %s; giving up %s[%d]", self.name, exc, task.topic, task.partition)
        self._forget(task, keep_staged=False)
        # only what is still assigned can be unassigned (for a partition already revoked the client raised
        # an error no `except` caught, in the dropped-connections test)
        if (task.topic, task.partition) not in {(tp.topic, tp.partition) for tp in self.consumer.assignment()}:
            return
        try:
            tp = [TopicPartition(task.topic, task.partition)]
            self.consumer.incremental_unassign(tp) if self.cooperative else self.consumer.unassign()
        except KafkaException as unassign_error:  # already being revoked
            log.debug("%s: unassign after fencing: %s", self.name, unassign_error)

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
            txn = self.txns.pop(task.key, None)
            if txn is not None:
                txn.close()
            if task.store is not None:
                task.store.close()
            self.tasks.pop(task.key, None)
