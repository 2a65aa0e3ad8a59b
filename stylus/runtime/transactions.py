"""Exactly-once output: one Kafka transaction per worker over all its partitions, state staged around it.

Contract (docs/semantics.md, "exactly-once output"), at every checkpoint:
  T1. stage: per partition with progress, the buffered state changes, the next input offset and a fresh
      checkpoint id are written to its RocksDB as one staged record (nothing is applied yet).
  T2. every such partition's input offset joins the worker's open transaction (send_offsets_to_transaction
      with the consumer's group metadata: KIP-447), carrying the checkpoint id as the offset's metadata.
  T3. commit_transaction: outputs, input offsets and checkpoint ids become visible together, or not at all.
  T4. apply: per partition, state changes + offset in one RocksDB batch, staged record deleted.
  T5. begin the next transaction.
Recovery (on assignment): init_transactions fences this worker's previous incarnation (same transactional.id);
the group's committed offset is read (an unfinished transaction of another owner holding it back is fenced by
the transactional.id its last commit names); the staged record is applied if the committed offset carries its
checkpoint id (T3 happened) and discarded otherwise. Resume from the committed offset.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.engine import EngineContext
from stylus.core.sink import DEFAULT_MESSAGE_MAX_BYTES, DirectOutput
from stylus.core.task import PartitionTask
from stylus.kafka.errors import FENCED_CODES, client_failed
from stylus.kafka.offsets import committed_offsets, watermarks
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config
from stylus.runtime.bounded import CallStuck, call_with_deadline
from stylus.runtime.changelog import write_changes
from stylus.runtime.faults import FaultInjector
from stylus.runtime.sink import (
    SERVED_ELSEWHERE_GRACE,
    KafkaSink,
    clean_headers,
    message_max_bytes,
    wait_until_served,
)
from stylus.serde import encode_key
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

ID_HEADER = "stylus.id"
#: beside the id of a timer's output: the input position of its partition when it fired (every record before it
#: processed, none after), so a replay fires it at exactly that point (stylus/runtime/timeline.py)
POSITION_HEADER = "stylus.at"
MARKS_META = "output_marks"
TXN_TIMEOUT = 30.0
#: linger of the transactional producer unless the pipeline sets one: its records are invisible to
#: read_committed readers until the commit anyway, so bigger batches cost no latency that anybody sees
TXN_LINGER_MS = 25



class Fenced(RuntimeError):
    """Another instance owns this partition now; this one must stop touching it."""


class Aborted(RuntimeError):
    """The transaction cannot complete, though nobody else owns the partition: an abortable error (a delivery
    or the transaction timed out, a connection was lost mid-request) or a client call that hung. The worker
    throws away the partition's uncommitted work and replays it from its last commit (Worker._aborted)."""


#: How long a transactional call may take before the producer is given up for a fresh one. Healthy calls
#: take milliseconds; `send_offsets_to_transaction` can hang forever in librdkafka (stylus/runtime/bounded.py).
CALL_DEADLINE = TXN_TIMEOUT + 5.0  # librdkafka returns by TXN_TIMEOUT itself unless it hangs
#: `send_offsets_to_transaction` delivers no records (two coordinator requests, milliseconds when healthy)
#: and is the call that hangs, typically when a connection drops while it runs: it gets a shorter timeout
#: and deadline of its own, so a hang costs OFFSETS_DEADLINE, not CALL_DEADLINE. A slow coordinator still
#: gets CALL_ATTEMPTS calls of OFFSETS_TIMEOUT each before the transaction is given up (and replayed).
OFFSETS_TIMEOUT = 5.0
OFFSETS_DEADLINE = OFFSETS_TIMEOUT + 3.0
#: How many times a transactional call that failed with a retriable error is made in all.
CALL_ATTEMPTS = 3


class TransactionalSink(KafkaSink):
    """One partition's KafkaSink into the worker's transaction; outputs carry `stylus.id` where `stamp` asks."""

    def __init__(self, producer: Producer, pipeline: Pipeline, outputs: tuple[str, ...], ctx: EngineContext,
                 prefix: str, max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES, *, stamp: bool = False) -> None:
        super().__init__(producer, pipeline, outputs, hold=False, max_bytes=max_bytes)
        self.ctx = ctx
        self.prefix = prefix
        self._record_id = prefix.encode().replace(b"%", b"%%") + b"%d:%d"  # one bytes % per record output
        #: MillWheel-style record ids for downstream deduplication (`semantics.output_ids`): not part of
        #: exactly-once, which rests on the transaction alone
        self.stamp = stamp
        self._origin: Any = None
        self._index = 0

    def _next_id(self) -> bytes:
        """`stylus.id` of the next output: prefix + input offset (or T<ts>:<key> for a timer) + emit index.
        Built as bytes with one `%`: this runs once per output record."""
        record = self.ctx.record
        if record is not None:
            origin: Any = record.offset
        else:
            timer = self.ctx._timer
            origin = f"T{timer[0]}:{timer[1]}" if timer else "?"
        if origin != self._origin:
            self._origin = origin
            self._index = 0
        else:
            self._index += 1
        if type(origin) is int:
            return self._record_id % (origin, self._index)
        return f"{self.prefix}{origin}:{self._index}".encode()

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None, partition: int = -1) -> None:
        """The emit path off the engine's direct output (timers, dead letters, late records)."""
        encode = self.encoders.get(topic)
        if encode is None:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self.send(topic, encode(value), encode_key(key), timestamp, headers, partition)

    def send(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None,
             partition: int = -1) -> None:
        stamped: list[tuple[str, Any]] = [(ID_HEADER, self._next_id())] if self.stamp else []
        if stamped and self.ctx.record is None and self.ctx._timer is not None and self.ctx._task is not None:
            stamped.append((POSITION_HEADER, str(self.ctx._task.next_offset).encode()))
        if headers:
            stamped.extend(clean_headers(headers, repair=True))
        self.emitted += 1
        if self.paused:  # a checkpoint (this transaction's commit) is in flight: wait for the next one
            self._hold((topic, value, key, partition, None, None, timestamp, stamped or None))
            return
        self._produce(topic, value, key, timestamp, stamped or None, partition)

    def direct(self) -> DirectOutput | None:
        """The engine's hot path (KafkaSink.direct): the engine encodes, stamps the id when asked
        (`_record_id` % (offset, emit index), DirectOutput.stamp) and calls the producer itself once a record
        succeeded, or appends the items to `held` while this transaction's commit is in flight."""
        return DirectOutput(self.encoders, _repaired_headers, self.producer.produce, self._produce_item, self,
                            (ID_HEADER, self._record_id) if self.stamp else None,
                            self.held if self.paused else None, self.max_bytes)


def record_ids_wanted(pipeline: Pipeline, processor: str, *, timers: bool) -> bool:
    """Whether outputs carry `stylus.id` (`semantics.output_ids`): `always`, for consumers that deduplicate
    by it; `auto` for a processor with timers, whose state rebuilt or restored elsewhere (a backup, or the
    input replayed from its start) must not fire again the timers its old owner fired: recovery finds them,
    and after which input record, by these ids (stylus/runtime/timeline.py); `never` otherwise."""
    spec = pipeline.processors[processor]
    mode = spec.semantics.output_ids
    if mode == "never" and timers:
        log.warning("%s: output_ids: never with timers: a partition whose state is restored from a backup or "
                    "rebuilt from its input cannot tell which timers its old owner fired, so they may fire again; "
                    "use `auto`", processor)
    return mode == "always" or (mode == "auto" and timers)


def _repaired_headers(headers: Any) -> list[tuple[str, Any]]:
    """A processor's headers on exactly-once output, as `send` has always treated them."""
    return clean_headers(headers, repair=True)


@dataclass(frozen=True)
class TxnSnapshot:
    task: PartitionTask
    offset: int
    changes: dict[bytes, bytes | None]
    #: committed as the offset's metadata: recovery applies the staged change only if the group shows it
    checkpoint_id: str


#: The offset metadata of a partition its owner handed over cleanly (`WorkerTransaction.release`).
RELEASED = "released"
#: The offset metadata an owner commits as soon as it is assigned a partition (`WorkerTransaction.claim`).
OWNED = "owned"
#: A claim of a partition whose state at the committed offset is empty: nothing was ever processed from it.
START = "start"


def empty_state_at(metadata: str | None) -> bool:
    """Whether the committed offset is a partition's start (its state there is empty, nothing to rebuild)."""
    return bool(metadata) and str(metadata).startswith(f"{START}@")


def owner_to_fence(metadata: str | None) -> str | None:
    """The transactional.id that may still hold an unfinished transaction with the partition's output or
    offsets: whoever committed its offset last (a checkpoint id `<token>-<seq>@<id>`, or a claim `owned@<id>`),
    unless that commit handed the partition over (`released@<id>`)."""
    if not metadata or "@" not in metadata:
        return None
    what, owner = metadata.split("@", 1)
    return None if what == RELEASED or not owner else owner


class WorkerTransaction:
    """The worker's one transactional producer (Kafka Streams' exactly-once v2) and the checkpoint protocol
    over every partition it holds: one transaction carries the outputs and input offsets of all of them."""

    def __init__(self, pipeline: Pipeline, processor: str, bootstrap: str, consumer: Consumer, ctx: EngineContext,
                 instance: str, *, record_ids: bool = False, faults: FaultInjector | None = None) -> None:
        self.pipeline = pipeline
        self.faults = faults or FaultInjector("", "", "")  # `txn.mark`: before each ownership mark's transaction
        self.processor = processor
        self.bootstrap = bootstrap
        self.consumer = consumer
        self.ctx = ctx
        self.instance = instance
        self.transactional_id = ""  # a new one per producer (`_new_producer`)
        self.outputs = pipeline.processors[processor].outputs
        #: a checkpoint id: this producer's token, a sequence number and the transactional.id, so the next owner
        #: of a partition knows whom to fence (`committed`)
        self._token = ""
        self._sequence = 0
        #: outputs carry `stylus.id`; output marks (where each output partition's next records can start) are
        #: saved at T4, for a restore from a backup to read the old owner's outputs from (timeline.py)
        self.record_ids = record_ids
        #: `state.changelog`: each checkpoint's state changes also go to the partition's changelog, in the
        #: same transaction (stylus/runtime/changelog.py)
        self.changelog = pipeline.processors[processor].state.changelog
        self.sinks: dict[tuple[str, int], TransactionalSink] = {}
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self._stable_reader: Consumer | None = None
        self._new_producer()

    def _new_producer(self) -> None:
        """Every producer gets a transactional.id of its own, never reused: fencing an id (`committed`) then
        stops exactly the producer that owned a partition, never a later one of the same worker."""
        self._token = uuid.uuid4().hex[:12]
        self.transactional_id = f"{self.pipeline.group_id(self.processor)}.{self._token}"
        self.config = client_config(
            "producer", self.bootstrap, self.pipeline, self.processor, {"linger.ms": TXN_LINGER_MS},
            **{"transactional.id": self.transactional_id, "client.id": f"{self.transactional_id}-{self.instance}",
               "transaction.timeout.ms": int(TXN_TIMEOUT * 1000), "delivery.report.only.error": True},
        )
        self.producer = Producer(self.config | {"on_delivery": partial(self._on_delivery, self._token)})
        self.ready = False  # init_transactions done
        self.open = False
        self.stuck = False  # a call of ours hangs inside librdkafka: never touch the producer again
        self.fenced = False  # a newer producer owns the transactional id, or the group generation moved on
        self.abandoned = False  # given up after `Aborted`: the next producer of the id fences this one
        self.failures: list[str] = []  # delivery failures of the open transaction's records

    def _on_delivery(self, token: str, err: KafkaError | None, msg: Any) -> None:
        """A record of the open transaction failed: its commit must not be taken for a success. Reports of a
        producer given up are not the open transaction's (its records were aborted with it)."""
        if err is not None and token == self._token:
            self.failures.append(f"{msg.topic()}: {err}")

    def _forget_failures(self) -> None:
        """After an abort: the aborted transaction's records fail as they are purged; their reports are served
        here, and none of them is a failure of the next transaction."""
        self.producer.poll(0)
        self.failures = []

    # ------------------------------------------------------------------ recovery
    def start(self) -> None:
        """R1: init_transactions, once per producer. A producer given up (fenced, stuck, abandoned) is
        replaced first; every partition was dropped with it."""
        if self.ready and not (self.stuck or self.fenced or self.abandoned):
            return
        if self.ready:
            self._retire()
            self._new_producer()
        self.producer.init_transactions(TXN_TIMEOUT)
        self.ready = True

    def fence_previous_owners(self, partitions: list[TopicPartition]) -> None:
        """R1, before any committed offset is read: fence every producer that may still hold an unfinished
        transaction with these partitions' outputs or offsets, named by the metadata of their last stable
        commits (a partition handed over cleanly names nobody). Fencing aborts that transaction now; left
        alone, a crashed owner's transaction would hold back the group's offsets (and every read_committed
        reader of the outputs) until it timed out."""
        if not partitions:
            return
        last = committed_offsets(self._stable(), [TopicPartition(tp.topic, tp.partition) for tp in partitions],
                                 TXN_TIMEOUT)
        owners = {owner for tp in last if (owner := owner_to_fence(tp.metadata)) not in (None, self.transactional_id)}
        for owner in sorted(owners):
            log.info("%s: fencing %s, a previous owner of partitions assigned here", self.processor, owner)
            fence_producer(self.bootstrap, self.pipeline, self.processor, owner)

    def committed(self, topic: str, partition: int) -> TopicPartition:
        """R1: the group's committed offset and its metadata (stable: no unfinished transaction holds it)."""
        return committed_offsets(self.consumer, [TopicPartition(topic, partition)], TXN_TIMEOUT + 15.0)[0]

    def _stable(self) -> Consumer:
        """A group-less reader of the group's last *stable* commits (read_uncommitted does not wait for
        pending ones); it never joins the group."""
        if self._stable_reader is None:
            self._stable_reader = Consumer(client_config(
                "consumer", self.bootstrap, self.pipeline, self.processor,
                **{"group.id": self.pipeline.group_id(self.processor), "isolation.level": "read_uncommitted"}))
        return self._stable_reader

    def bind(self, task: PartitionTask) -> None:
        """The partition's outputs go into this worker's transaction (with its own record-id prefix)."""
        sink = TransactionalSink(self.producer, self.pipeline, self.outputs, self.ctx,
                                 f"{task.topic}:{task.partition}:", message_max_bytes(self.config),
                                 stamp=self.record_ids)
        task.sink = sink
        self.sinks[task.key] = sink
        self.tasks[task.key] = task

    def unbind(self, task: PartitionTask) -> None:
        if self.tasks.get(task.key) is task:
            self.sinks.pop(task.key, None)
            self.tasks.pop(task.key, None)

    def settle(self, task: PartitionTask, committed_tp: TopicPartition) -> int | None:
        """R3: apply or discard the partition's staged checkpoint by the group's committed offset and
        metadata, then make sure a transaction is open. Returns the offset to resume from (None: the group
        has none; start per auto.offset.reset)."""
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        store = task.store
        if store is not None:
            self._settle_staged(store, committed, committed_tp.metadata)
            local = store.stored_offset()
            if committed is not None and local is not None and local < committed:
                log.warning("%s: local state of %s[%d] is at offset %d but the group committed %d: with a "
                            "state backup the records in between are replayed (output suppressed), without one "
                            "their effect on the state is missing", self.processor, task.topic, task.partition,
                            local, committed)
            if self.record_ids and not store.meta(MARKS_META):
                store.kv.write(PartitionStore.meta_change(MARKS_META, output_marks(
                    self.consumer, self.pipeline, self.outputs)))
        self.begin()
        return committed

    def claim(self, claims: list[tuple[PartitionTask, TopicPartition]]) -> None:
        """Commit `owned@<id>` as the metadata of each newly assigned partition's committed offset (given with
        its metadata), before any output of ours: whoever takes a partition from this producer next knows to
        fence it (`fence_previous_owners`). A partition the group never committed starts where
        auto.offset.reset says, and that start is committed as `start@<id>`, as is a start claimed before and
        not yet checkpointed: its next owner then knows the state there is empty, not missing."""
        starts: list[PartitionTask] = []
        owned: list[PartitionTask] = []
        for task, committed in claims:
            if task.committed_offset is None and task.next_offset is None:
                task.next_offset = task.committed_offset = self._reset_offset(task)
                starts.append(task)
            else:
                (starts if empty_state_at(committed.metadata) else owned).append(task)
        self._mark(starts, START)
        self._mark(owned, OWNED)

    def _reset_offset(self, task: PartitionTask) -> int | None:
        reset = str(client_config("consumer", self.bootstrap, self.pipeline, self.processor).get(
            "auto.offset.reset", "latest"))
        if reset not in ("earliest", "smallest", "beginning", "latest", "largest", "end"):
            return None  # `error`: the consumer decides, and fails
        low, high = watermarks(self.consumer, task.topic, task.partition)
        return low if reset in ("earliest", "smallest", "beginning") else high

    def release(self, tasks: list[PartitionTask]) -> None:
        """Commit `released@<id>` for partitions handed over cleanly (revoked after their last checkpoint):
        their next owner must not fence this producer, which goes on with the partitions it keeps."""
        self._mark(tasks, RELEASED)

    def _mark(self, tasks: list[PartitionTask], what: str) -> None:
        marks = [TopicPartition(t.topic, t.partition, t.committed_offset, f"{what}@{self.transactional_id}")
                 for t in tasks if t.committed_offset is not None]
        if not marks or self.stuck or self.fenced or self.abandoned:
            return
        self.faults.passed("txn.mark")
        self.begin()
        group_metadata = self.consumer.consumer_group_metadata()
        self._guard(lambda: self.producer.send_offsets_to_transaction(marks, group_metadata, OFFSETS_TIMEOUT),
                    "send_offsets_to_transaction", OFFSETS_DEADLINE)
        self._guard(lambda: self.producer.commit_transaction(TXN_TIMEOUT), "commit_transaction")
        self.open = False
        self.begin()

    def _settle_staged(self, store: PartitionStore, committed: int | None, metadata: str | None) -> None:
        staged = store.staged()
        if staged is None:
            return
        offset, changes, checkpoint_id = staged
        if committed == offset and metadata == checkpoint_id:
            log.info("%s: applying the staged checkpoint %s at offset %d (its transaction committed)",
                     self.processor, checkpoint_id, offset)
            store.apply_staged_on_open(offset, changes)
        else:
            log.info("%s: discarding the staged checkpoint %s at offset %d (the group committed %s with %r: its "
                     "transaction did not commit)", self.processor, checkpoint_id, offset, committed, metadata)
            store.discard_staged()

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self, task: PartitionTask) -> TxnSnapshot | None:
        """What this checkpoint commits for one partition, taken on the worker thread (None: nothing)."""
        if task.next_offset is None or not task.has_progress:
            return None
        changes = task.store.state_changes() if task.store is not None else {}
        self._sequence += 1
        return TxnSnapshot(task, task.next_offset, changes, f"{self._token}-{self._sequence}@{self.transactional_id}")

    def stage(self, snap: TxnSnapshot) -> None:
        """T1: state changes, next offset and checkpoint id staged in the partition's RocksDB; with a
        changelog, the changes produced to it in the transaction."""
        task = snap.task
        if task.store is not None:
            task.store.stage(snap.offset, snap.changes, snap.checkpoint_id)
        if self.changelog and snap.changes:
            write_changes(self.producer, self.pipeline.changelog_topic(self.processor, task.topic), task.partition,
                          snap.changes, offset=snap.offset)

    def send_offsets(self, snaps: list[TxnSnapshot], group_metadata: Any) -> None:
        """T2: every partition's next offset, with its checkpoint id, joins the transaction."""
        offsets = [TopicPartition(s.task.topic, s.task.partition, s.offset, s.checkpoint_id) for s in snaps]
        self._guard(lambda: self.producer.send_offsets_to_transaction(offsets, group_metadata, OFFSETS_TIMEOUT),
                    "send_offsets_to_transaction", OFFSETS_DEADLINE)

    def commit(self, *, served_elsewhere: bool = False) -> None:
        """T3. `served_elsewhere`: on a checkpoint thread while the worker polls this producer, whose delivery
        reports are then left to the worker (wait_until_served): the commit's own flush has none to serve."""
        if served_elsewhere:
            wait_until_served(self.producer, SERVED_ELSEWHERE_GRACE)
        self._guard(lambda: self.producer.commit_transaction(TXN_TIMEOUT), "commit_transaction")
        self.open = False
        if self.failures:
            failures, self.failures = self.failures, []
            raise RuntimeError(f"{len(failures)} transactional records failed delivery: {failures[0]}")

    @staticmethod
    def apply(snap: TxnSnapshot, marks: dict[str, int] | None) -> None:
        """T4."""
        if snap.task.store is not None:
            extra = PartitionStore.meta_change(MARKS_META, marks) if marks is not None else None
            snap.task.store.apply_staged(snap.offset, snap.changes, extra)

    def begin(self) -> None:
        """T5."""
        if not self.open:
            self.producer.begin_transaction()
            self.open = True

    def abort(self) -> None:
        """Throw away the open transaction and every partition's uncommitted state changes."""
        self.end_open_transaction()
        for task in self.tasks.values():
            if task.state is not None:
                task.state.discard_changes()

    def end_open_transaction(self) -> None:
        """Abort the client's open transaction, leaving the partitions' state alone: a record produced now is
        refused (`_STATE`) until the next one begins, as after a failed transactional call (which is how an
        injected fault's `Aborted` leaves the client too)."""
        if self.open and not self.stuck and not self.fenced:  # a fenced producer's abort only times out
            try:
                self.producer.abort_transaction(TXN_TIMEOUT)
            except KafkaException as exc:
                log.warning("%s: abort failed: %s", self.processor, exc)
            self._forget_failures()
        self.open = False

    def abandon(self) -> None:
        """Give the producer up after `Aborted` or `Fenced`: abort what can be aborted, never wait on a hung
        client. `start` replaces it (and the new producer of the same id fences it) at the next assignment."""
        if not self.stuck and not self.fenced and self.open:
            try:
                self.producer.abort_transaction(5)
            except KafkaException as exc:
                log.info("%s: abort after a failed transaction: %s", self.processor, exc)
        self.failures = []  # the next transaction is another producer's, whose reports alone count
        self.open = False
        self.abandoned = True

    def poll(self) -> None:
        """Serve delivery reports between commits, on the worker thread, as the worker does for its own
        producer: unserved, they would all wait for the commit's flush on the checkpoint thread. Not a producer
        given up: its reports are its aborted transaction's, a fenced one raises its fatal error again, and the
        next assignment replaces it (`start`). A fence served here first (a zombie's records refused before its
        commit) marks the producer fenced: the worker then drops its partitions (Worker._drop_if_fenced)."""
        if self.stuck or self.fenced or self.abandoned:
            return
        try:
            self.producer.poll(0)
        except (KafkaException, SystemError) as exc:
            # a SystemError out of this producer's poll is confluent-kafka serving a fatal error: with it as its
            # cause (a report callback ran while it was pending), or with none ("returned NULL without setting
            # an exception", seen from a flush that served the fence)
            if not client_failed(exc) and not isinstance(exc, SystemError):
                raise
            self.fenced = True
            log.warning("%s: %s was fenced: %s", self.processor, self.transactional_id, exc.__cause__ or exc)

    def close(self) -> None:
        """At the worker's end: the open transaction (empty after a final checkpoint) is aborted, never left
        open on the broker."""
        self.abort()
        self._retire()
        if self._stable_reader is not None:
            self._stable_reader.close()

    def _retire(self) -> None:
        if self.stuck or self.fenced:
            # a call of ours still hangs inside it, or it is fenced: its transaction is aborted already, and
            # serving it raises its fatal error again (then a SystemError from the delivery reports served after)
            return
        try:
            self.producer.flush(5)
        except KafkaException as exc:  # a fatal error it reports only now: it goes anyway
            log.info("%s: the producer given up: %s", self.processor, exc)
        if not self.abandoned:  # close() would try to abort a transaction that cannot end
            close_producer(self.producer)

    def _guard(self, call: Any, what: str, deadline: float = CALL_DEADLINE) -> None:
        """Run a transactional call. A retriable error (a timeout, a coordinator moving) means the call may
        still complete: librdkafka's contract is to call it again, never to abort then, since a commit that
        timed out may yet commit on the broker. Only an abortable error, or retries used up, is `Aborted`;
        the staged checkpoints then stay for recovery to settle against the group's committed offsets."""
        for attempt in range(1, CALL_ATTEMPTS + 1):
            try:
                call_with_deadline(call, deadline, what)
                return
            except CallStuck as exc:
                self.stuck = True
                raise Aborted(f"{self.transactional_id}: {exc} (librdkafka issue #5456); the producer is "
                              "replaced") from exc
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.code() in FENCED_CODES or err.fatal():
                    self.fenced = True
                    raise Fenced(f"{self.transactional_id} was fenced: {err}") from exc
                if err.retriable() and not err.txn_requires_abort() and attempt < CALL_ATTEMPTS:
                    log.warning("%s: %s failed (%s); calling it again (%d/%d)", self.transactional_id, what,
                                err.str(), attempt, CALL_ATTEMPTS - 1)
                    continue
                if err.txn_requires_abort() or err.retriable():
                    raise Aborted(f"{self.transactional_id}: {what} failed: {err}") from exc
                if err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
                    self.fenced = True
                    raise Fenced(f"{self.transactional_id} was fenced: {err}") from exc
                raise


def fence_producer(bootstrap: str, pipeline: Pipeline, processor: str, transactional_id: str) -> None:
    """init_transactions with another producer's transactional.id: that producer can no longer commit, and
    its open transaction (with the offsets commit pending in it) is aborted now rather than at its timeout."""
    producer = Producer(client_config("producer", bootstrap, pipeline, processor,
                                      **{"transactional.id": transactional_id}))
    try:
        producer.init_transactions(TXN_TIMEOUT)
    finally:
        close_producer(producer)


def marks_client(bootstrap: str, pipeline: Pipeline, processor: str) -> Consumer:
    """A consumer outside any group, only for ListOffsets: the checkpoint thread must not call the worker's
    consumer, whose calls wait behind the worker thread's back-to-back `consume()`."""
    return Consumer(client_config("consumer", bootstrap, pipeline, processor,
                                  **{"group.id": f"{pipeline.group_id(processor)}.marks"}))


def output_marks(consumer: Consumer, pipeline: Pipeline, outputs: tuple[str, ...]) -> dict[str, int]:
    """Each output partition's end, taken right after a commit: where records of the next transaction can
    start."""
    marks: dict[str, int] = {}
    for topic in outputs:
        for partition in range(pipeline.topics[topic].partitions):
            marks[f"{topic}:{partition}"] = max(0, watermarks(consumer, topic, partition, 60.0)[1])
    return marks
