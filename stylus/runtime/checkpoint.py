"""Checkpoint orderings: which of the three steps (state, offsets, output) happens first decides the
processor's semantics. The numbered contract and its crash cases are in docs/semantics.md.

Each ordering is data (a tuple of steps), so a test can build a wrong one and watch it fail.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from stylus.core.task import PartitionTask
from stylus.runtime.sink import DeliveryFailed
from stylus.state.ownership import OwnershipLost

if TYPE_CHECKING:
    from stylus.runtime.faults import FaultInjector
    from stylus.runtime.sink import KafkaSink
    from stylus.runtime.stats import Timing
    from stylus.runtime.transactions import WorkerTransaction

log = logging.getLogger(__name__)

COMMIT_TIMEOUT = 60.0  # the longest an overlapped checkpoint waits for its offsets commit to be answered

#: Commit errors that mean "the group's coordinator is away for now" (a broker restarting, the coordinator moving
#: to another broker): librdkafka holds a commit back for `session.timeout.ms` while it looks for the
#: coordinator, then fails it. Committing the same offsets again is harmless, so the commit is tried again until
#: COMMIT_TIMEOUT; a group that moved on meanwhile answers with one of `_REBALANCING`.
_COORDINATOR_AWAY = frozenset({KafkaError._WAIT_COORD, KafkaError.COORDINATOR_NOT_AVAILABLE,
                               KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                               KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT})
COMMIT_RETRY_PAUSE = 0.5  # between commits while the coordinator is away

#: Commit errors that mean "the group is rebalancing", not "the broker lost the offsets".
_REBALANCING = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS,
                          KafkaError.UNKNOWN_MEMBER_ID})


class Step(StrEnum):
    EMIT = "emit"  # release held output, then wait until the broker acknowledged all of it
    STATE = "state"  # write buffered state (and timers) to RocksDB
    OFFSETS = "offsets"  # write the next input offsets to RocksDB, then commit them to Kafka
    STATE_AND_OFFSETS = "state+offsets"  # both in one RocksDB write batch, then commit to Kafka
    TRANSACTION = "transaction"  # outputs and offsets in one Kafka transaction; state staged around it


@dataclass(frozen=True)
class Ordering:
    name: str
    steps: tuple[Step, ...]

    @property
    def holds_output(self) -> bool:
        """Output waits in memory when it must not reach Kafka before the checkpoint is saved."""
        if Step.EMIT not in self.steps:
            return False
        emit_at = self.steps.index(Step.EMIT)
        return any(s in self.steps[:emit_at] for s in (Step.OFFSETS, Step.STATE_AND_OFFSETS))

    @property
    def transactional(self) -> bool:
        return Step.TRANSACTION in self.steps


S, O, SO, E, T = Step.STATE, Step.OFFSETS, Step.STATE_AND_OFFSETS, Step.EMIT, Step.TRANSACTION

ORDERINGS: dict[tuple[str | None, str], Ordering] = {
    ("at_least_once", "at_least_once"): Ordering("at-least-once state, at-least-once output", (E, S, O)),
    ("exactly_once", "at_least_once"): Ordering("exactly-once state, at-least-once output", (E, SO)),
    ("at_most_once", "at_most_once"): Ordering("at-most-once state, at-most-once output", (O, S, E)),
    ("exactly_once", "at_most_once"): Ordering("exactly-once state, at-most-once output", (SO, E)),
    ("exactly_once", "exactly_once"): Ordering("exactly-once state, exactly-once output", (T,)),
    (None, "at_least_once"): Ordering("stateless, at-least-once output", (E, O)),
    (None, "at_most_once"): Ordering("stateless, at-most-once output", (O, E)),
    (None, "exactly_once"): Ordering("stateless, exactly-once output", (T,)),
}


def ordering_for(state: str | None, output: str) -> Ordering:
    return ORDERINGS[(state, output)]


# Steps that commit the consumer's offsets. librdkafka holds a consumer commit back while a rebalance
# is in progress, and rebalance callbacks run on the worker thread: a commit waited for on another
# thread while the worker sits in a callback would never finish. So these steps always run on the
# worker thread, and only the steps between them go to the background.
_CONSUMER_STEPS = frozenset({Step.OFFSETS, Step.STATE_AND_OFFSETS})


def split_steps(steps: tuple[Step, ...]) -> tuple[tuple[Step, ...], tuple[Step, ...], tuple[Step, ...]]:
    """(leading consumer steps, the steps that may run in the background, the rest). Order is kept."""
    i = 0
    while i < len(steps) and steps[i] in _CONSUMER_STEPS:
        i += 1
    j = i
    while j < len(steps) and steps[j] not in _CONSUMER_STEPS:
        j += 1
    return steps[:i], steps[i:j], steps[j:]


@dataclass(frozen=True)
class CheckpointScope:
    """What a checkpoint works with: the processor's clients and bookkeeping (not the worker itself)."""

    name: str
    ordering: Ordering
    consumer: Consumer
    sink: KafkaSink
    transaction: WorkerTransaction | None  # exactly-once output: the worker's transactional producer
    faults: FaultInjector
    commit_timing: Timing
    #: where each output partition ends now (exactly-once output with record ids: saved at T4), or None
    output_marks: Callable[[], dict[str, int]] | None = None
    #: seconds the group keeps a silent member (`session.timeout.ms`): held at-most-once output is released only
    #: within it of the checkpoint's snapshot (see `_emit`); None: no limit
    lease: float | None = None


class PendingCheckpoint:
    """One checkpoint: a snapshot taken on the worker thread (offsets, state changes, held output), then
    the ordering's steps as pure I/O over that snapshot, which may run on a background thread while
    the worker goes on consuming and processing into held output (the paper's Figure 9)."""

    def __init__(self, scope: CheckpointScope, tasks: list[PartitionTask], watermark: int) -> None:
        self.scope = scope
        self.tasks = tasks
        self.steps = scope.ordering.steps
        self.prefix, self.middle, self.suffix = split_steps(self.steps)
        # where each partition resumes: past every record whose work is complete, never past one in flight
        self.offsets = {task.key: task.checkpoint_offset for task in tasks}
        self.watermark = watermark  # what the output saved by this checkpoint covers
        #: the checkpoint failed (the exception, and whether it was fenced): its transaction did not commit, or
        #: the group refused the offsets of held output; its remaining steps are skipped, and the worker
        #: replays its partitions from their last commit
        self.failure: tuple[Exception, bool] | None = None
        self._gate: threading.Event | None = None  # set once an overlapped prefix's commit is settled
        self._gate_error: BaseException | None = None
        self.started = time.monotonic()
        self.overlapped = False  # the middle steps run on the checkpoint thread while the worker goes on
        self.held = scope.sink.take_held()  # at-most-once output this checkpoint releases
        self.writes: dict[Step, list[Callable[[], None]]] = {}
        for step in self.steps:
            if step in (Step.STATE, Step.OFFSETS, Step.STATE_AND_OFFSETS):
                self.writes[step] = [
                    task.store.prepare_save(
                        None if step is Step.STATE else self.offsets[task.key],
                        state=step is not Step.OFFSETS,
                    )
                    for task in tasks
                    if task.store is not None
                    and (step is not Step.OFFSETS or self.offsets[task.key] != task.committed_offset)
                ]
        self.commits = [
            TopicPartition(task.topic, task.partition, offset)
            for task in tasks
            if (offset := self.offsets[task.key]) is not None and offset != task.committed_offset
        ]
        txn = scope.transaction
        self.txn_snapshots = (
            [snap for task in tasks if (snap := txn.snapshot(task)) is not None]
            if txn is not None and Step.TRANSACTION in self.steps else []
        )
        self._commit_keys = {(tp.topic, tp.partition, tp.offset) for tp in self.commits}
        # taken here, on the worker thread: another thread's consumer calls wait behind `consume()`
        self.group_metadata = scope.consumer.consumer_group_metadata() if self.txn_snapshots else None

    def run(self) -> None:
        """All the steps, in order, on this thread."""
        self.run_prefix()
        self.run_background()
        self.run_suffix()

    def run_prefix(self, *, overlapped: bool = False) -> None:
        """Leading offset steps: on the worker thread, before any background work. Overlapped, their
        consumer commit is only sent here (asynchronously): the background waits for its result
        (`committed`, from the worker's consume loop) before the steps that must follow it, so the
        worker does not sit out the round trip. Whenever the worker itself must wait for the background,
        it first commits the same offsets synchronously (`commit_here`): a rebalance callback would
        otherwise keep the answer from ever arriving."""
        self.overlapped = overlapped
        if not overlapped or not self.prefix or not self.middle:
            self._run(self.prefix)
            return
        for step in self.prefix:
            for write in self.writes[step]:
                write()
        self._gate = threading.Event()
        if not self.commits:
            self._gate.set()
            return
        try:
            self.scope.consumer.commit(offsets=self.commits, asynchronous=True)
        except KafkaException as exc:  # not even sent: decide now, as a synchronous commit would
            self._gate.set()
            self._commit_failed(exc)

    def committed(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The consumer's answer to a commit (on the worker thread): ours if it names our offsets."""
        gate = self._gate
        if gate is None or gate.is_set():
            return
        if {(tp.topic, tp.partition, tp.offset) for tp in partitions} != self._commit_keys:
            return
        error = err if err is not None else next((tp.error for tp in partitions if tp.error is not None), None)
        if error is not None and self._try_again(error, self.started + COMMIT_TIMEOUT - COMMIT_RETRY_PAUSE):
            try:  # answered through consume() again; the background goes on waiting
                self.scope.consumer.commit(offsets=self.commits, asynchronous=True)
                return
            except KafkaException as exc:
                error = exc.args[0]
        self._gate_error = KafkaException(error) if error is not None else None
        gate.set()

    def commit_here(self) -> None:
        """On the worker thread, before it waits for the background: settle the prefix commit now."""
        gate = self._gate
        if gate is None or gate.is_set():
            return
        try:
            self._commit_kafka()  # refused: `failure` is set, and the background stops on it
        except BaseException as exc:
            self._gate_error = exc
            raise
        finally:
            gate.set()

    def abandon(self) -> None:
        """The worker gives up on this checkpoint (it is failing): the background stops waiting."""
        gate = self._gate
        if gate is not None and not gate.is_set():
            self._gate_error = RuntimeError("checkpoint abandoned before its offsets commit was confirmed")
            gate.set()

    def run_background(self) -> None:
        """The middle steps: only producer and RocksDB I/O on the snapshot, safe on another thread."""
        gate = self._gate
        if gate is not None:  # an overlapped prefix: its commit must have landed before anything follows
            if not gate.wait(COMMIT_TIMEOUT):
                raise RuntimeError(f"offsets commit unanswered after {COMMIT_TIMEOUT:.0f}s")
            error = self._gate_error
            if isinstance(error, KafkaException):
                self._commit_failed(error)
            elif error is not None:
                raise error
            if self.failure is not None:
                return
            for step in self.prefix:
                self.scope.faults.passed(step.value)
        self._run(self.middle)

    def run_suffix(self) -> None:
        """Trailing offset steps: on the worker thread, once the background steps are done."""
        self._run(self.suffix)

    def _run(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            if self.failure is not None:  # nothing after a failed step
                return
            if step is Step.EMIT:
                self._emit()
            elif step is Step.TRANSACTION:
                self._transactions()
            else:
                try:
                    for write in self.writes[step]:
                        write()
                except OwnershipLost as exc:  # a remote store's offset moved on: another instance owns it now
                    self._give_up(exc, str(exc))
                    return
                if step is not Step.STATE:
                    self._commit_kafka()
                    if self.failure is not None:  # refused
                        return
            self.scope.faults.passed(step.value)

    def _emit(self) -> None:
        """Release the held output and wait until the broker acknowledged everything produced so far.

        A delivery that fails fails the checkpoint, except for at-most-once output failed by a passing cause (a
        cut connection, a broker restarting, a timeout: `DeliveryFailed.passing`). Its offsets and state are
        saved by then, and its producer never sends a record twice (AT_MOST_ONCE_PRODUCER), so the output is
        given up: counted (`stylus_outputs_given_up`), logged, and the worker goes on, as the promise allows.
        A cause that would fail every output (authorization, an unknown topic) still stops the worker."""
        sink = self.scope.sink
        sink.produce_all(self._releasable())
        try:
            if self.overlapped:  # on the checkpoint thread: the worker serves the delivery reports
                sink.await_delivery()
            else:
                sink.flush()
        except DeliveryFailed as exc:
            if not self.scope.ordering.holds_output or not exc.passing:
                raise
            sink.given_up += exc.records
            log.warning("%s: %d at-most-once outputs given up, their delivery failed (%s); the offsets and state "
                        "they came from are saved, so they are not sent again", self.scope.name, exc.records, exc)

    def _releasable(self) -> list[Any]:
        """The held output to release, unless the checkpoint outlived the group's lease on its partitions. A
        member the group has not heard from for `session.timeout.ms` (a frozen process, a long pause) is
        evicted and its partitions go to another member, which starts from the committed offsets with the
        state saved before them: it fires again the timers this checkpoint's held output came from. A
        successful offsets commit does not tell it apart (the commit may have landed before the pause), so
        after the lease the held output is dropped, as at-most-once output may be, rather than written twice."""
        lease = self.scope.lease
        elapsed = time.monotonic() - self.started
        if lease is None or not self.held or elapsed <= lease:
            return self.held
        log.warning("%s: %d held outputs dropped: the checkpoint took %.1fs, longer than the group keeps a silent "
                    "member (session.timeout.ms %.1fs), so its partitions may belong to another member now",
                    self.scope.name, len(self.held), elapsed, lease)
        self.scope.sink.given_up += len(self.held)
        return []

    def _commit_kafka(self) -> None:
        """The synchronous offsets commit of a step (on the worker thread), tried again while the group's
        coordinator is away (`_COORDINATOR_AWAY`)."""
        if not self.commits:
            return
        deadline = time.monotonic() + COMMIT_TIMEOUT
        while True:
            try:
                self.scope.consumer.commit(offsets=self.commits, asynchronous=False)
                return
            except KafkaException as exc:
                if not self._try_again(exc.args[0], deadline):
                    self._commit_failed(exc)
                    return
                time.sleep(COMMIT_RETRY_PAUSE)  # a backoff: the next commit is answered at once while it is away

    def _try_again(self, error: KafkaError, deadline: float) -> bool:
        """Whether a failed offsets commit is sent again: the coordinator is away and `deadline` not past."""
        if error.code() not in _COORDINATOR_AWAY or time.monotonic() >= deadline:
            return False
        log.warning("%s: offsets commit not answered, the group's coordinator is away (%s); trying again",
                    self.scope.name, error.str())
        return True

    def _commit_failed(self, exc: KafkaException) -> None:
        """Decide about a failed offsets commit: harmless (return), refused under held output (`_refuse`: the
        checkpoint stops), or fatal (raise)."""
        code = exc.args[0].code()
        if code == KafkaError._NO_OFFSET:
            return
        if code not in _REBALANCING:
            raise exc
        # A rebalance started between the state write and this commit (docs/faults.md). The offsets are
        # already in RocksDB; the Kafka commit only lags, so a new owner replays a little: harmless for
        # at-least-once output. Held (at-most-once) output must not go out on a refused commit.
        if self.held or self.scope.ordering.holds_output:
            self._refuse(exc)
            return
        log.warning("%s: offset commit skipped, the group is rebalancing (%s); the next owner may replay "
                    "records since the previous commit", self.scope.name, exc.args[0].str())

    def _refuse(self, exc: KafkaException) -> None:
        """The group moved on before the offsets of held output were committed: whoever owns the partitions
        next replays them from the group's last commit. The held output is dropped (at-most-once allows it;
        released, it would be written again by that replay), the steps after the commit are skipped, and
        `failure` tells the worker to forget the partitions' uncommitted work and rejoin the group, as after
        a failed transaction (`Assignment.checkpoint_failed`)."""
        self._give_up(exc, f"offsets commit refused, the group moved on ({exc.args[0].str()})")

    def _give_up(self, exc: Exception, why: str) -> None:
        """The checkpoint stops at a step refused because the partitions moved on (a refused commit, a remote
        store's `OwnershipLost`): what earlier steps saved stays, its held output is dropped, and the worker
        replays the partitions from their last commit after a rejoin (`failure`)."""
        self.failure = (exc, False)
        dropped, self.held = len(self.held), []
        self.scope.sink.given_up += dropped
        log.warning("%s: %s: %d held outputs dropped", self.scope.name, why, dropped)

    def _transactions(self) -> None:
        """T1-T5 of stylus/runtime/transactions.py: one transaction for every partition with progress."""
        from stylus.runtime.transactions import Aborted, Fenced

        txn, snaps, faults = self.scope.transaction, self.txn_snapshots, self.scope.faults
        if txn is None or not snaps:
            return
        try:
            for snap in snaps:
                txn.stage(snap)
                faults.passed("txn.stage", on_abort=txn.end_open_transaction)
                if snap.offset == snap.task.committed_offset:  # timers only (no input consumed): its own point
                    faults.passed("txn.stage.no-input")
            txn.send_offsets(snaps, self.group_metadata)
            started = time.monotonic()
            txn.commit(served_elsewhere=self.overlapped)
        except Fenced as exc:
            self.failure = (exc, True)
            return
        except Aborted as exc:
            self.failure = (exc, False)
            return
        self.scope.commit_timing.observe(time.monotonic() - started)
        faults.passed("txn.commit")
        marks = self.scope.output_marks() if self.scope.output_marks is not None else None
        for snap in snaps:
            txn.apply(snap, marks)
            faults.passed("txn.apply")
        txn.begin()
