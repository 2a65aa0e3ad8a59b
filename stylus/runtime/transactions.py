"""Exactly-once output: one Kafka transaction per input partition, state staged around it.

Contract (docs/semantics.md, "exactly-once output"), per input partition, at every checkpoint:
  T1. stage: the buffered state changes and the next input offset are written to RocksDB as one staged
      record (nothing is applied yet).
  T2. the input offset is added to the partition's open transaction (send_offsets_to_transaction).
  T3. commit_transaction: outputs and input offset become visible together, or not at all.
  T4. apply: state changes + offset + output marks in one RocksDB batch, staged record deleted.
  T5. begin the next transaction.
Recovery (on assignment): init_transactions with the partition's own transactional.id fences any
older instance (a zombie can no longer commit), then the staged record is applied if the group's
committed offset reached it (T3 happened) or discarded if not. Resume from the committed offset.

The embedded broker does not hide the records of an abandoned transaction: they become visible when
the transactional.id is initialised again. There every output therefore carries a deterministic id
(`stylus.id` = input topic:partition:offset:emit-index, or :T<ts>:<key>: for timers); on recovery
the instance reads the output partitions from the marks saved at its last commit and does not emit
again the outputs already there. On real Kafka the aborted records are invisible to the
read_committed scan, so nothing is skipped, and the outputs of input records go without the id
(`record_ids_needed`, `semantics.output_ids`); timer outputs keep it (a rolled-forward checkpoint's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.engine import EngineContext
from stylus.core.sink import DEFAULT_MESSAGE_MAX_BYTES, DirectOutput
from stylus.core.task import PartitionTask
from stylus.kafka.endtxn import EndTxnTurns
from stylus.kafka.offsets import end_offsets
from stylus.kafka.producer import close_producer
from stylus.kafka.reader import read_range
from stylus.kafka.settings import client_config
from stylus.kafka.txnprobe import hides_aborted_records
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


class OutputsBlocked(RuntimeError):
    """Settling could not read the outputs it must check: a transaction another producer left open holds
    back every read_committed reader of an output partition (on the embedded broker until its transactional
    id is initialised again, on Kafka until the coordinator times it out). Not this partition's fault: the
    worker hands its assignment back and joins the group again (Worker._give_back), by which time whoever
    is assigned the blocking transaction's input partition (perhaps this worker) has fenced it."""


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
#: How long settling waits to read the outputs since the last checkpoint (OutputsBlocked past it).
SETTLE_READ_TIMEOUT = 30.0


class TransactionalSink(KafkaSink):
    """A KafkaSink that stamps each output with its deterministic id and skips ids already visible."""

    def __init__(self, producer: Producer, pipeline: Pipeline, outputs: tuple[str, ...], ctx: EngineContext,
                 prefix: str, max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES) -> None:
        super().__init__(producer, pipeline, outputs, hold=False, max_bytes=max_bytes)
        self.ctx = ctx
        self.prefix = prefix
        self.skip: set[bytes] = set()  # ids (header bytes) of outputs an abandoned transaction already showed
        self.skipped = 0
        # outputs produced outside the record hot path (timers, held output) since the last snapshot: kept in
        # case this checkpoint makes no input progress and must be staged with its outputs (TxnSnapshot)
        self.journal: list[tuple[str, bytes | None, bytes | None, int, list[tuple[str, Any]]]] = []
        self._record_id = prefix.encode().replace(b"%", b"%%") + b"%d:%d"  # one bytes % per record output
        # whether outputs of input records carry their id (`record_ids_needed`); timer, dead-letter and late
        # outputs always do (they go through `_stamped`)
        self.stamp_records = True
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
        """The emit hot path (once per output): encode, stamp the id, one produce call. Our own header
        needs no cleaning; only a processor's headers go through `clean_headers`."""
        encode = self.encoders.get(topic)
        if encode is None:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self._stamped(topic, encode(value), encode_key(key), timestamp, headers)

    def send(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None) -> None:
        self._stamped(topic, value, key, timestamp, headers)

    def _stamped(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any) -> None:
        out_id = self._next_id()
        if self.skip and out_id in self.skip:
            self.skip.discard(out_id)
            self.skipped += 1
            return
        stamped: list[tuple[str, Any]] = [(ID_HEADER, out_id)]
        if headers:
            stamped.extend(clean_headers(headers, repair=True))
        self.emitted += 1
        self.journal.append((topic, value, key, timestamp, stamped))
        if self.paused:  # a checkpoint (this transaction's commit) is in flight: wait for the next one
            self._hold((topic, value, key, -1, None, None, timestamp, stamped))
            return
        try:  # positional: (topic, value, key, partition, callback, on_delivery, timestamp, headers)
            self.producer.produce(topic, value, key, -1, None, None, timestamp, stamped)
        except BufferError:
            self._produce(topic, value, key, timestamp, stamped)

    def direct(self) -> DirectOutput | None:
        """The engine's hot path (KafkaSink.direct): the engine encodes, stamps the id (`_record_id` % (offset,
        emit index), DirectOutput.stamp) and calls the producer itself once a record succeeded, or appends the
        items to `held` while this transaction's commit is in flight: no Python call per output. Not while
        ids are to be skipped. A record's outputs are not journaled (`journal`): the checkpoint that commits
        them has input progress (the record's own offset), so its snapshot never needs them."""
        if self.skip:
            return None
        return DirectOutput(self.encoders, _repaired_headers, self.producer.produce, self._produce_item, self,
                            (ID_HEADER, self._record_id) if self.stamp_records else None,
                            self.held if self.paused else None, self.max_bytes)

    def take_journal(self) -> list[tuple[str, bytes | None, bytes | None, int, list[tuple[str, Any]]]]:
        journal, self.journal = self.journal, []
        return journal

    def reemit(self, outputs: list[Any]) -> int:
        """Recovery: produce the outputs of a rolled-forward checkpoint that are not visible yet (already
        stamped with their ids), into the open transaction. Returns how many were produced."""
        produced = 0
        for topic, value, key, timestamp, stamped in outputs:
            out_id = next((v for name, v in stamped if name == ID_HEADER), None)
            if out_id is not None and out_id in self.skip:
                self.skip.discard(out_id)  # visible already; no timer will make it again
                continue
            self.journal.append((topic, value, key, timestamp, stamped))
            self._produce(topic, value, key, timestamp, stamped)
            produced += 1
        return produced


def record_ids_needed(pipeline: Pipeline, processor: str, bootstrap: str, *, timers: bool) -> bool:
    """Whether the outputs of input records must carry `stylus.id` (`semantics.output_ids`). `auto`: where the
    cluster shows aborted transactional records (a restarted owner must recognise its predecessor's abandoned
    outputs: `settle`), and where a restore from a state backup places fired timers between the input records
    by these ids (stylus/state/backup/timeline.py). Elsewhere an aborted transaction leaves nothing to
    recognise and the header would cost ~25% of the processor's CPU per record (BENCHMARKS.md, issue 3)."""
    spec = pipeline.processors[processor]
    mode = spec.semantics.output_ids
    placed_by_ids = timers and spec.state.backup is not None
    if mode == "never" and placed_by_ids:
        log.warning("%s: output_ids: never with timers and a state backup: a restore from the backup cannot tell "
                    "where the old owner fired its timers, so their state changes may be applied at the wrong "
                    "point; use `auto`", processor)
    if mode != "auto":
        return mode == "always"
    if placed_by_ids:
        return True
    return not hides_aborted_records(bootstrap, pipeline, processor)


def _still_reachable(ids: set[bytes], prefix: bytes, resume: int | None) -> set[bytes]:
    """The visible ids that processing from `resume` can emit again: timer ids, and ids of records at or
    after `resume`. The others (outputs of a transaction that committed, seen because its checkpoint was
    applied at recovery rather than at T4) would only keep the skip set, and the slow output path, alive."""
    if resume is None or not ids:
        return ids
    start = len(prefix)
    kept = set()
    for out_id in ids:
        origin = out_id[start:].split(b":", 1)[0]
        if origin[:1] == b"T" or not origin.isdigit() or int(origin) >= resume:
            kept.add(out_id)
    return kept


def _repaired_headers(headers: Any) -> list[tuple[str, Any]]:
    """A processor's headers on exactly-once output, as `send` has always treated them."""
    return clean_headers(headers, repair=True)


@dataclass(frozen=True)
class TxnSnapshot:
    txn: TransactionalPartition
    offset: int
    changes: dict[bytes, bytes | None]
    #: the transaction's outputs when it consumed no input (timers only): the committed offset cannot tell
    #: whether it won, so it is staged with its outputs and recovery rolls it forward (docs/semantics.md)
    outputs: list[Any] | None = None


class TransactionalPartition:
    """The transactional producer and checkpoint protocol of one input partition."""

    def __init__(self, task: PartitionTask, pipeline: Pipeline, processor: str, bootstrap: str,
                 consumer: Consumer, ctx: EngineContext, instance: str, turns: EndTxnTurns | None = None) -> None:
        self.task = task
        #: where transactions must end one at a time (the embedded broker): every call that ends one takes a turn
        self.turns = turns
        self.pipeline = pipeline
        self.processor = processor
        self.bootstrap = bootstrap
        self.consumer = consumer
        self.transactional_id = f"{pipeline.group_id(processor)}.{task.topic}.{task.partition}"
        self.sink: TransactionalSink
        config = client_config(
            "producer", bootstrap, pipeline, processor, {"linger.ms": TXN_LINGER_MS},
            **{"transactional.id": self.transactional_id, "client.id": f"{self.transactional_id}-{instance}",
               "transaction.timeout.ms": int(TXN_TIMEOUT * 1000), "delivery.report.only.error": True},
        )
        self.producer = Producer(config | {"on_delivery": lambda err, msg: self.sink.on_delivery(err, msg)})
        spec = pipeline.processors[processor]
        self.sink = TransactionalSink(self.producer, pipeline, spec.outputs, ctx, f"{task.topic}:{task.partition}:",
                                      message_max_bytes(config))
        self.outputs = spec.outputs
        self.open = False
        self.stuck = False  # a call of ours hangs inside librdkafka: never touch the producer again
        self.fenced = False  # a newer producer owns the transactional id: nothing of ours can commit or abort
        self.abandoned = False  # given up after `Aborted`: the next producer of the id fences this one

    # ------------------------------------------------------------------ recovery
    def fence(self) -> None:
        """init_transactions: an older owner of this partition can no longer commit, and (on the embedded
        broker) its abandoned transaction stops blocking read_committed readers. Fence every assigned
        partition before settling any: settling reads outputs, which another abandoned transaction blocks."""
        with self._turn():  # on the embedded broker this ends the old owner's open transaction
            self.producer.init_transactions(TXN_TIMEOUT)

    def recover(self) -> int | None:
        self.fence()
        return self.settle()

    def settle(self) -> int | None:
        """Settle a staged checkpoint and find the outputs already visible. Returns the offset to resume
        from (None: the group has none; start per auto.offset.reset)."""
        tp = TopicPartition(self.task.topic, self.task.partition)
        committed_tp = self.consumer.committed([tp], timeout=TXN_TIMEOUT)[0]
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        store = self.task.store
        if store is not None:
            self._settle_staged(store, committed)
            local = store.stored_offset()
            if committed is not None and local is not None and local < committed:
                log.warning("%s: local state of %s[%d] is at offset %d but the group committed %d: with a "
                            "state backup the records in between are replayed (output suppressed), without one "
                            "their effect on the state is missing", self.processor, tp.topic, tp.partition,
                            local, committed)
        self.sink.skip = _still_reachable(self._visible_ids(store), self.sink.prefix.encode(), committed)
        pending = store.pending_outputs() if store is not None else []
        if store is not None and not store.meta(MARKS_META):
            # the first transaction of this partition: remember where its output can start, so that if it is
            # abandoned, the next owner knows where to look for its already-visible records
            marks = output_marks(self.consumer, self.pipeline, self.outputs)
            store.kv.write(PartitionStore.meta_change(MARKS_META, marks))
        if self.sink.skip:
            log.warning("%s: %s[%d]: %d outputs of an unfinished transaction are already visible; they will not "
                        "be emitted again", self.processor, tp.topic, tp.partition, len(self.sink.skip))
        self.producer.begin_transaction()
        self.open = True
        if pending:
            produced = self.sink.reemit(pending)
            log.warning("%s: %s[%d]: re-emitting %d of the %d outputs of a rolled-forward checkpoint (the rest "
                        "are visible)", self.processor, tp.topic, tp.partition, produced, len(pending))
        return committed

    def _settle_staged(self, store: PartitionStore, committed: int | None) -> None:
        staged = store.staged()
        if staged is None:
            return
        offset, changes, outputs = staged
        if outputs is not None:  # no input progress: whether it committed is unknowable, so make it so
            log.info("%s: rolling the staged checkpoint at offset %d forward (it consumed no input; its %d "
                     "outputs are re-emitted unless visible)", self.processor, offset, len(outputs))
            store.roll_forward(offset, changes, outputs)
        elif committed is not None and committed >= offset:
            log.info("%s: applying the staged checkpoint at offset %d (its transaction committed)",
                     self.processor, offset)
            store.apply_staged(offset, changes)
        else:
            log.info("%s: discarding the staged checkpoint at offset %d (its transaction did not commit)",
                     self.processor, offset)
            store.discard_staged()

    def _visible_ids(self, store: PartitionStore | None) -> set[bytes]:
        marks: dict[str, int] = (store.meta(MARKS_META) if store is not None else None) or {}
        if not marks:
            return set()
        parts = [tuple(k.rsplit(":", 1)) for k in marks]
        ranges = {}
        ends = end_offsets(self.bootstrap, [(t, int(p)) for t, p in parts])
        for (topic, partition), (_, high) in ends.items():
            start = marks.get(f"{topic}:{partition}", high)
            if high > start:
                ranges[(topic, partition)] = (start, high)
        prefix = self.sink.prefix.encode()
        found: set[bytes] = set()
        try:
            for msg in read_range(self.bootstrap, ranges, isolation="read_committed", timeout=SETTLE_READ_TIMEOUT):
                for name, value in msg.headers() or []:
                    if name == ID_HEADER and value is not None and value.startswith(prefix):
                        found.add(value)
        except TimeoutError as exc:
            raise OutputsBlocked(f"{self.transactional_id}: settling could not read its outputs ({exc}): a "
                                 "transaction another producer left open holds back read_committed readers") from exc
        return found

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> TxnSnapshot | None:
        """What this checkpoint commits, taken on the worker thread (None: nothing to commit)."""
        task = self.task
        if task.next_offset is None or not task.has_progress:
            return None
        journal = self.sink.take_journal()
        changes = task.store.state_changes() if task.store is not None else {}
        no_input = task.next_offset == task.committed_offset
        return TxnSnapshot(self, task.next_offset, changes, journal if no_input else None)

    def stage_and_send_offsets(self, snap: TxnSnapshot, group_metadata: Any) -> None:
        """T1 + T2."""
        task = self.task
        if task.store is not None:
            task.store.stage(snap.offset, snap.changes, snap.outputs)
        self._guard(lambda: self.producer.send_offsets_to_transaction(
            [TopicPartition(task.topic, task.partition, snap.offset)],
            group_metadata, OFFSETS_TIMEOUT), "send_offsets_to_transaction", OFFSETS_DEADLINE)

    def commit(self, *, served_elsewhere: bool = False) -> None:
        """T3. The flush runs beside the other partitions'; only the EndTxn request waits for its turn.
        `served_elsewhere`: on a checkpoint thread while the worker polls this producer, whose delivery
        reports are then left to the worker (wait_until_served): the commit's own flush has none to serve."""
        if served_elsewhere:
            wait_until_served(self.producer, SERVED_ELSEWHERE_GRACE)
        if self.turns is not None:  # deliver the records first: only the EndTxn request is left to take turns
            self._guard(lambda: self.producer.flush(TXN_TIMEOUT), "flush")
        with self._turn():
            self._guard(lambda: self.producer.commit_transaction(TXN_TIMEOUT), "commit_transaction")
        self.open = False
        if self.sink.failures:
            failures, self.sink.failures = self.sink.failures, []
            raise RuntimeError(f"{len(failures)} transactional records failed delivery: {failures[0]}")

    def apply(self, snap: TxnSnapshot, marks: dict[str, int]) -> None:
        """T4."""
        if self.task.store is not None:
            self.task.store.apply_staged(snap.offset, snap.changes, PartitionStore.meta_change(MARKS_META, marks))

    def begin(self) -> None:
        """T5."""
        if not self.open:
            self.producer.begin_transaction()
            self.open = True

    def abort(self) -> None:
        self.sink.journal.clear()
        if self.open and not self.stuck and not self.fenced:  # a fenced producer's abort only times out
            try:
                with self._turn():
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
                with self._turn():
                    self.producer.abort_transaction(5)
            except KafkaException as exc:
                log.info("%s: abort after a failed transaction: %s", self.processor, exc)
        self.open = False
        self.abandoned = True

    def _turn(self) -> AbstractContextManager[Any]:
        return self.turns if self.turns is not None else nullcontext()

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
    """A lower bound of each output partition's end, taken right after a commit: where records of the
    next transaction can start. (ListOffsets(latest) may answer low on the embedded broker; low is safe.)"""
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
