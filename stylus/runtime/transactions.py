"""Exactly-once output: one Kafka transaction per input partition, state staged around it.

Contract (docs/semantics.md, "exactly-once output"), per input partition, at every checkpoint:
  T1. stage: the buffered state changes, the next input offset and a fresh checkpoint id are written to
      RocksDB as one staged record (nothing is applied yet).
  T2. the input offset joins the partition's open transaction (send_offsets_to_transaction with the
      consumer's group metadata), carrying the checkpoint id as the offset's metadata.
  T3. commit_transaction: outputs, input offset and checkpoint id become visible together, or not at all.
  T4. apply: state changes + offset in one RocksDB batch, staged record deleted.
  T5. begin the next transaction.
Recovery (on assignment): init_transactions with the partition's own transactional.id fences any older
instance (its open transaction is aborted, its records stay invisible to read_committed readers), then the
staged record is applied if the group's committed offset carries its checkpoint id (T3 happened) and
discarded otherwise. Resume from the committed offset.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.engine import EngineContext
from stylus.core.sink import DEFAULT_MESSAGE_MAX_BYTES, DirectOutput
from stylus.core.task import PartitionTask
from stylus.kafka.offsets import committed_offsets
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config
from stylus.runtime.bounded import CallStuck, call_with_deadline
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
MARKS_META = "output_marks"
TXN_TIMEOUT = 30.0
#: linger of the transactional producers unless the pipeline sets one: their records are invisible to
#: read_committed readers until the commit anyway, and one producer per input partition otherwise sends
#: many small batches (measured: ~0.5 us/record less CPU here and in the broker than with 5 ms)
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
    """A KafkaSink into one partition's transaction; outputs carry `stylus.id` where `stamp` asks for it."""

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
                 headers: Mapping[str, Any] | None) -> None:
        """The emit path off the engine's direct output (timers, dead letters, late records)."""
        encode = self.encoders.get(topic)
        if encode is None:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self.send(topic, encode(value), encode_key(key), timestamp, headers)

    def send(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None) -> None:
        stamped: list[tuple[str, Any]] = [(ID_HEADER, self._next_id())] if self.stamp else []
        if headers:
            stamped.extend(clean_headers(headers, repair=True))
        self.emitted += 1
        if self.paused:  # a checkpoint (this transaction's commit) is in flight: wait for the next one
            self._hold((topic, value, key, -1, None, None, timestamp, stamped or None))
            return
        self._produce(topic, value, key, timestamp, stamped or None)

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
    txn: TransactionalPartition
    offset: int
    changes: dict[bytes, bytes | None]
    #: committed as the offset's metadata: recovery applies the staged change only if the group shows it
    checkpoint_id: str


class TransactionalPartition:
    """The transactional producer and checkpoint protocol of one input partition."""

    def __init__(self, topic: str, partition: int, pipeline: Pipeline, processor: str, bootstrap: str,
                 consumer: Consumer, ctx: EngineContext, instance: str, *, record_ids: bool = False) -> None:
        """Fence (`fence`) before the partition's store is opened; `bind` its task before settling."""
        self.task: PartitionTask
        self.pipeline = pipeline
        self.processor = processor
        self.consumer = consumer
        self.transactional_id = f"{pipeline.group_id(processor)}.{topic}.{partition}"
        # a checkpoint id is this owner's token and a sequence number: unique across owners and restarts
        self._ids = f"{instance}-{uuid.uuid4().hex[:8]}-"
        self._sequence = 0
        self.sink: TransactionalSink
        config = client_config(
            "producer", bootstrap, pipeline, processor, {"linger.ms": TXN_LINGER_MS},
            **{"transactional.id": self.transactional_id, "client.id": f"{self.transactional_id}-{instance}",
               "transaction.timeout.ms": int(TXN_TIMEOUT * 1000), "delivery.report.only.error": True},
        )
        self.producer = Producer(config | {"on_delivery": lambda err, msg: self.sink.on_delivery(err, msg)})
        spec = pipeline.processors[processor]
        self.sink = TransactionalSink(self.producer, pipeline, spec.outputs, ctx, f"{topic}:{partition}:",
                                      message_max_bytes(config), stamp=record_ids)
        self.outputs = spec.outputs
        #: output marks (where each output partition's next records can start) saved at T4, only where the
        #: outputs carry ids: a restore from a backup reads the old owner's outputs from them (timeline.py)
        self.keep_marks = record_ids
        self.open = False
        self.stuck = False  # a call of ours hangs inside librdkafka: never touch the producer again
        self.fenced = False  # a newer producer owns the transactional id: nothing of ours can commit or abort
        self.abandoned = False  # given up after `Aborted`: the next producer of the id fences this one

    # ------------------------------------------------------------------ recovery
    def bind(self, task: PartitionTask) -> None:
        self.task = task
        task.sink = self.sink

    def fence(self) -> None:
        """init_transactions: an older owner of this partition can no longer commit, and its open transaction
        is aborted (its records never become visible to read_committed readers)."""
        self.producer.init_transactions(TXN_TIMEOUT)

    def settle(self) -> int | None:
        """Apply or discard a staged checkpoint by the group's committed offset and metadata, then open the
        first transaction. Returns the offset to resume from (None: the group has none; start per
        auto.offset.reset)."""
        tp = TopicPartition(self.task.topic, self.task.partition)
        committed_tp = committed_offsets(self.consumer, [tp], TXN_TIMEOUT)[0]
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        store = self.task.store
        if store is not None:
            self._settle_staged(store, committed, committed_tp.metadata)
            local = store.stored_offset()
            if committed is not None and local is not None and local < committed:
                log.warning("%s: local state of %s[%d] is at offset %d but the group committed %d: with a "
                            "state backup the records in between are replayed (output suppressed), without one "
                            "their effect on the state is missing", self.processor, tp.topic, tp.partition,
                            local, committed)
            if self.keep_marks and not store.meta(MARKS_META):
                store.kv.write(PartitionStore.meta_change(MARKS_META, output_marks(
                    self.consumer, self.pipeline, self.outputs)))
        self.producer.begin_transaction()
        self.open = True
        return committed

    def _settle_staged(self, store: PartitionStore, committed: int | None, metadata: str | None) -> None:
        staged = store.staged()
        if staged is None:
            return
        offset, changes, checkpoint_id = staged
        if committed == offset and metadata == checkpoint_id:
            log.info("%s: applying the staged checkpoint %s at offset %d (its transaction committed)",
                     self.processor, checkpoint_id, offset)
            store.apply_staged(offset, changes)
        else:
            log.info("%s: discarding the staged checkpoint %s at offset %d (the group committed %s with %r: its "
                     "transaction did not commit)", self.processor, checkpoint_id, offset, committed, metadata)
            store.discard_staged()

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> TxnSnapshot | None:
        """What this checkpoint commits, taken on the worker thread (None: nothing to commit)."""
        task = self.task
        if task.next_offset is None or not task.has_progress:
            return None
        changes = task.store.state_changes() if task.store is not None else {}
        self._sequence += 1
        return TxnSnapshot(self, task.next_offset, changes, f"{self._ids}{self._sequence}")

    def stage_and_send_offsets(self, snap: TxnSnapshot, group_metadata: Any) -> None:
        """T1 + T2."""
        task = self.task
        if task.store is not None:
            task.store.stage(snap.offset, snap.changes, snap.checkpoint_id)
        self._guard(lambda: self.producer.send_offsets_to_transaction(
            [TopicPartition(task.topic, task.partition, snap.offset, snap.checkpoint_id)],
            group_metadata, OFFSETS_TIMEOUT), "send_offsets_to_transaction", OFFSETS_DEADLINE)

    def commit(self, *, served_elsewhere: bool = False) -> None:
        """T3. `served_elsewhere`: on a checkpoint thread while the worker polls this producer, whose delivery
        reports are then left to the worker (wait_until_served): the commit's own flush has none to serve."""
        if served_elsewhere:
            wait_until_served(self.producer, SERVED_ELSEWHERE_GRACE)
        self._guard(lambda: self.producer.commit_transaction(TXN_TIMEOUT), "commit_transaction")
        self.open = False
        if self.sink.failures:
            failures, self.sink.failures = self.sink.failures, []
            raise RuntimeError(f"{len(failures)} transactional records failed delivery: {failures[0]}")

    def apply(self, snap: TxnSnapshot, marks: dict[str, int] | None) -> None:
        """T4."""
        if self.task.store is not None:
            extra = PartitionStore.meta_change(MARKS_META, marks) if marks is not None else None
            self.task.store.apply_staged(snap.offset, snap.changes, extra)

    def begin(self) -> None:
        """T5."""
        if not self.open:
            self.producer.begin_transaction()
            self.open = True

    def abort(self) -> None:
        if self.open and not self.stuck and not self.fenced:  # a fenced producer's abort only times out
            try:
                self.producer.abort_transaction(TXN_TIMEOUT)
            except KafkaException as exc:
                log.warning("%s: abort failed: %s", self.processor, exc)
            self.open = False
        if self.task.state is not None:
            self.task.state.discard_changes()

    def poll(self) -> None:
        """Serve delivery reports between commits, on the worker thread, as the worker does for its own
        producer. Unserved, every record's report waits for the commit's flush, which then serves tens of
        thousands of Python callbacks on the checkpoint thread while the worker holds its output."""
        self.producer.poll(0)

    def close(self) -> None:
        """Let go of the partition: its open transaction is aborted, never left open on the broker (after a
        checkpoint it is empty; after a failed one, this is what hands the partition over cleanly)."""
        if self.stuck:
            return  # a call of ours still hangs inside this producer: leave it alone
        self.abort()
        self.producer.flush(5)
        if not (self.fenced or self.abandoned):  # close() would try to abort a transaction that cannot end
            close_producer(self.producer)

    def let_go(self) -> None:
        """The partition was lost (its new owner fences this transactional id, which aborts our transaction):
        drop what is uncommitted without asking the broker anything; an abort would only wait out its
        timeout, per partition, on a producer that is already fenced."""
        self.open = False  # so `abort` asks the broker nothing
        self.abandoned = True
        self.abort()

    def abandon(self) -> None:
        """Give the producer up after `Aborted`: abort what can be aborted, never wait on a hung client. The
        next producer of this transactional id fences it (and aborts its transaction) in `fence()`."""
        if not self.stuck and self.open:
            try:
                self.producer.abort_transaction(5)
            except KafkaException as exc:
                log.info("%s: abort after a failed transaction: %s", self.processor, exc)
        self.open = False
        self.abandoned = True

    def _guard(self, call: Any, what: str, deadline: float = CALL_DEADLINE) -> None:
        """Run a transactional call. A retriable error (a timeout, a coordinator moving) means the call may
        still complete: librdkafka's contract is to call it again, never to abort then, since a commit that
        timed out may yet commit on the broker. Only an abortable error, or retries used up, is `Aborted`;
        the staged checkpoint then stays for recovery to settle against the group's committed offset."""
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
                if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) or err.fatal():
                    self.fenced = True
                    raise Fenced(f"{self.transactional_id} was fenced by a newer instance: {err}") from exc
                if err.retriable() and not err.txn_requires_abort() and attempt < CALL_ATTEMPTS:
                    log.warning("%s: %s failed (%s); calling it again (%d/%d)", self.transactional_id, what,
                                err.str(), attempt, CALL_ATTEMPTS - 1)
                    continue
                if err.txn_requires_abort() or err.retriable():
                    raise Aborted(f"{self.transactional_id}: {what} failed: {err}") from exc
                if err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
                    self.fenced = True
                    raise Fenced(f"{self.transactional_id} was fenced by a newer instance: {err}") from exc
                raise


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
            marks[f"{topic}:{partition}"] = max(0, _high_watermark(consumer, topic, partition))
    return marks


#: Errors of a lost connection or of metadata not yet refreshed after one: worth asking again.
_TRANSIENT = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                        KafkaError._ALL_BROKERS_DOWN, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT})


def _high_watermark(consumer: Consumer, topic: str, partition: int, attempts: int = 20) -> int:
    """ListOffsets(latest), asked again for a while when the connection was just lost (docs/faults.md)."""
    for attempt in range(attempts):
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
            return int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _TRANSIENT or attempt == attempts - 1:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")
