"""Opening an assigned partition: its state, its transaction, and the offset it resumes from.

The numbered contract (docs/semantics.md, "Recovery"), per assigned partition:
  R1. exactly-once output: the worker's producer is initialised (once per producer), and every previous
      owner that did not release the partitions is fenced by the transactional.id their last commits name
      (its unfinished transaction, with the offsets commit pending in it, is aborted); then the group's
      committed offset C is read (None: the group never committed this partition).
  R2. state: remote monoid state opens its own offsets table; local state is restored from the newest
      backup when the local copy is missing or older than C (docs/backups.md).
  R3. exactly-once output: a staged checkpoint is applied if C carries its checkpoint id, discarded
      otherwise.
  R4. local state behind C (a backup, or state left behind when the partition moved away) is caught up by
      replaying the input up to C with output suppressed; local state that is *missing* while C exists
      is rebuilt the same way from the input's first offset when the input still holds offset 0, and
      the partition is refused (RecoveryRefused) when retention has deleted records the state needs.
  R5. exactly-once output resumes at C. Otherwise the partition resumes at its local state's offset (which a
      checkpoint saves before it commits C, so it may be ahead of C), or at C when there is no local state
      (the consumer's stored position), or per auto.offset.reset when the group has none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.engine import Engine
from stylus.core.task import NO_TIME, PartitionTask
from stylus.kafka.offsets import committed_offsets, end_offsets
from stylus.kafka.settings import client_config
from stylus.monoid.backend import PostgresBackend
from stylus.runtime.changelog import restore as restore_changelog
from stylus.runtime.replay import replay_suppressed
from stylus.runtime.timeline import FiredTimer, fired_timers
from stylus.runtime.transactions import MARKS_META, TXN_TIMEOUT, WorkerTransaction, empty_state_at
from stylus.state.backup import BackupManager
from stylus.state.backup.manager import PIN_META
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)


class RecoveryRefused(RuntimeError):
    """A partition's state cannot be made exact: the worker stops rather than run it on wrong state."""


@dataclass(frozen=True)
class Opened:
    task: PartitionTask
    committed: TopicPartition  # the group's committed offset (offset < 0: none) and its metadata


class PartitionOpener:
    """R1-R5 for one processor's partitions, on the worker thread inside the assignment callback."""

    def __init__(self, pipeline: Pipeline, name: str, bootstrap: str, consumer: Consumer, engine: Engine,
                 *, transaction: WorkerTransaction | None, record_ids: bool, backups: BackupManager | None,
                 remote_state: PostgresBackend | None) -> None:
        self.pipeline = pipeline
        self.name = name
        self.spec = pipeline.processors[name]
        self.bootstrap = bootstrap
        self.consumer = consumer
        self.engine = engine
        self.transaction = transaction  # exactly-once output: the worker's transactional producer
        self.record_ids = record_ids
        self.backups = backups
        self.remote_state = remote_state

    def restart_time(self) -> None:
        """Every partition held now was just opened from its committed state: the processor's watermark starts
        again from their saved floors, not from where this process had taken it before (work past the last
        commit, timers fired and records judged late at that watermark included, went with the partitions)."""
        self.engine.watermark = NO_TIME

    def store_path(self, topic: str, partition: int) -> Path:
        return Path(self.spec.state.dir) / self.pipeline.pipeline / self.name / f"{topic}-{partition}"

    def open(self, topic: str, partition: int) -> Opened:
        """R1-R2: every assigned partition is opened (and its committed offset made stable) before any is
        settled."""
        txn = self.transaction
        if txn is not None:  # its previous owners are fenced already (Assignment.on_assign)
            committed_tp = txn.committed(topic, partition)
        else:
            committed_tp = committed_offsets(self.consumer, [TopicPartition(topic, partition)], TXN_TIMEOUT)[0]
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        store = None
        if self.remote_state is not None:
            store = self.remote_state.open(topic, partition)
        elif self.spec.stateful or txn is not None:  # exactly-once stages its checkpoints there
            path = self.store_path(topic, partition)
            kv = None
            if self.spec.state.changelog:
                kv = RocksKV(path)
                self._restore_changelog(kv, topic, partition, committed)
            elif self.backups is not None:
                self.backups.restore_if_newer(topic, partition, path, committed)
            store = PartitionStore(kv or RocksKV(path), cache_entries=self.spec.state.cache_entries)
        task = PartitionTask(topic, partition, store)
        if txn is not None:
            txn.bind(task)
        return Opened(task, committed_tp)

    def _restore_changelog(self, kv: RocksKV, topic: str, partition: int, committed: int | None) -> None:
        """R2 with `state.changelog`: local state that is missing while the group has committed C is read
        back from the partition's changelog, whose committed records are exactly the state changes of the
        transactions up to C (their previous owner is fenced already, so none is left open): the state is
        then at C, with nothing to replay. The read stops at the first offset mark past C: when the partition
        moved on to another owner during the restore (this instance frozen, or a zombie), its later
        transactions would otherwise be taken as part of C, and applied again by the replay past C."""
        if not committed or kv.get(PartitionStore.OFFSET_KEY) is not None:  # nothing committed: nothing to read
            return
        changelog = self.pipeline.changelog_topic(self.name, topic)
        log.info("%s: local state of %s[%d] is missing; restoring it from %s (the group committed %d)",
                 self.name, topic, partition, changelog, committed)
        result = restore_changelog(client_config("consumer", self.bootstrap, self.pipeline, self.name), changelog,
                                   partition, kv, upto=committed)
        kv.write(PartitionStore.offset_change(committed))
        log.info("%s: restored %s[%d] from %s: %d records (%.1f MB) in %.2fs, at offset %d", self.name, topic,
                 partition, changelog, result.records, result.bytes / 1e6, result.seconds, committed)

    def prepare(self, opened: Opened) -> None:
        """R3-R5."""
        task, txn = opened.task, self.transaction
        if txn is not None:
            committed = txn.settle(task, opened.committed)
            if task.store is not None:  # settling may have applied a staged checkpoint
                task.next_offset = task.committed_offset = task.store.stored_offset()
        else:
            committed = opened.committed.offset if opened.committed.offset >= 0 else None
        if self.spec.stateful and isinstance(task.store, PartitionStore) and isinstance(task.store.kv, RocksKV):
            self._catch_up(task, committed, empty=empty_state_at(opened.committed.metadata))
        if txn is not None and committed is not None:  # the transaction moved C; nothing local is ahead of it
            task.next_offset = task.committed_offset = committed
        elif task.next_offset is not None and (committed is None or committed < task.next_offset):
            # local state ahead of the group (its offsets commit failed in a rebalance): the next checkpoint
            # commits the local offset, or the group would lag the state until new input arrived
            task.committed_offset = committed

    def _catch_up(self, task: PartitionTask, committed: int | None, *, empty: bool = False) -> None:
        """R4. `empty`: the committed offset is the partition's start (a `start@` claim), whose state is empty."""
        store = task.store
        assert isinstance(store, PartitionStore)
        if store.meta(PIN_META) is not None:  # a state chosen by hand (`stylus backup restore`): honoured once
            store.set_meta(PIN_META, None)
        if committed is None or empty or (task.next_offset is not None and committed <= task.next_offset):
            return
        key = (task.topic, task.partition)
        if task.next_offset is None:  # no state at all, though the group has moved on: rebuild it
            low = end_offsets(self.bootstrap, [key])[key][0]
            if low > 0:
                raise RecoveryRefused(
                    f"{self.name}: {task.topic}[{task.partition}] has committed offset {committed} but no local "
                    f"state and no usable backup{'' if self.backups else ' (no state.backup configured)'}, and "
                    f"the input no longer holds offsets 0..{low - 1} (retention) to rebuild it from: configure "
                    "`state.backup` or restore the state directory; starting it empty would be wrong")
            log.warning("%s: %s[%d] has no local state and no backup, but the group committed offset %d: "
                        "rebuilding its state from the input's start with output suppressed", self.name,
                        task.topic, task.partition, committed)
            task.next_offset = 0
            if self.record_ids:  # the timers its old owners fired are found among all of the outputs
                outputs = [(t, p) for t in self.spec.outputs for p in range(self.pipeline.topics[t].partitions)]
                starts = {f"{t}:{p}": low for (t, p), (low, _) in end_offsets(self.bootstrap, outputs).items()}
                store.kv.write(PartitionStore.meta_change(MARKS_META, starts))
        fired: list[FiredTimer] = []
        if self.engine.track_time:  # outputs with record ids tell which timers the old owner fired, and when
            try:
                fired = fired_timers(self.bootstrap, store, task.topic, task.partition)
            except Exception as exc:  # then they fire again later (docs/backups.md, "Known limits")
                log.warning("%s: cannot read the outputs of %s[%d] to find the timers already fired (%s)",
                            self.name, task.topic, task.partition, exc)
        replay_suppressed(task, self.engine, self.bootstrap, committed, fired=fired,
                          fire_due=self.engine.track_time and self.spec.semantics.output == "at_most_once")
