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
the transactional.id is initialised again. Every output therefore carries a deterministic id
(`stylus.id` = input topic:partition:offset:emit-index, or :T<ts>:<key>: for timers); on recovery
the instance reads the output partitions from the marks saved at its last commit and does not emit
again the outputs already there. On real Kafka the aborted records are invisible to the
read_committed scan, so nothing is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.engine import EngineContext
from stylus.core.task import PartitionTask
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range
from stylus.kafka.settings import client_config
from stylus.runtime.sink import KafkaSink
from stylus.serde import encode_key
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

ID_HEADER = "stylus.id"
MARKS_META = "output_marks"
TXN_TIMEOUT = 30.0


class Fenced(RuntimeError):
    """Another instance owns this partition now; this one must stop touching it."""


class TransactionalSink(KafkaSink):
    """A KafkaSink that stamps each output with its deterministic id and skips ids already visible."""

    def __init__(self, producer: Producer, pipeline: Pipeline, outputs: tuple[str, ...], ctx: EngineContext,
                 prefix: str) -> None:
        super().__init__(producer, pipeline, outputs, hold=False)
        self.ctx = ctx
        self.prefix = prefix
        self.skip: set[str] = set()
        self.skipped = 0
        self._origin: Any = None
        self._index = 0

    def _next_id(self) -> str:
        record = self.ctx.record
        timer = self.ctx._timer
        origin: Any = record.offset if record is not None else (f"T{timer[0]}:{timer[1]}" if timer else "?")
        if origin != self._origin:
            self._origin = origin
            self._index = 0
        else:
            self._index += 1
        return f"{self.prefix}{origin}:{self._index}"

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None) -> None:
        encode = self.encoders.get(topic)
        if encode is None:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self.send(topic, encode(value), encode_key(key), timestamp, headers)

    def send(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None) -> None:
        out_id = self._next_id()
        if self.skip and out_id in self.skip:
            self.skip.discard(out_id)
            self.skipped += 1
            return
        stamped: list[tuple[str, Any]] = [(ID_HEADER, out_id.encode())]
        if headers:
            stamped.extend(headers.items() if isinstance(headers, Mapping) else headers)
        super().send(topic, value, key, timestamp, stamped)


@dataclass(frozen=True)
class TxnSnapshot:
    txn: TransactionalPartition
    offset: int
    changes: dict[bytes, bytes | None]


class TransactionalPartition:
    """The transactional producer and checkpoint protocol of one input partition."""

    def __init__(self, task: PartitionTask, pipeline: Pipeline, processor: str, bootstrap: str,
                 consumer: Consumer, ctx: EngineContext, instance: str) -> None:
        self.task = task
        self.pipeline = pipeline
        self.processor = processor
        self.bootstrap = bootstrap
        self.consumer = consumer
        self.transactional_id = f"{pipeline.group_id(processor)}.{task.topic}.{task.partition}"
        self.sink: TransactionalSink
        self.producer = Producer(
            client_config(
                "producer", bootstrap, pipeline, processor,
                **{"transactional.id": self.transactional_id, "client.id": f"{self.transactional_id}-{instance}",
                   "transaction.timeout.ms": int(TXN_TIMEOUT * 1000), "delivery.report.only.error": True},
            )
            | {"on_delivery": lambda err, msg: self.sink.on_delivery(err, msg)}
        )
        spec = pipeline.processors[processor]
        self.sink = TransactionalSink(self.producer, pipeline, spec.outputs, ctx, f"{task.topic}:{task.partition}:")
        self.outputs = spec.outputs
        self.open = False

    # ------------------------------------------------------------------ recovery
    def fence(self) -> None:
        """init_transactions: an older owner of this partition can no longer commit, and (on the embedded
        broker) its abandoned transaction stops blocking read_committed readers. Fence every assigned
        partition before settling any: settling reads outputs, which another abandoned transaction blocks."""
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
        self.sink.skip = self._visible_ids(store)
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
        return committed

    def _settle_staged(self, store: PartitionStore, committed: int | None) -> None:
        staged = store.staged()
        if staged is None:
            return
        offset, changes = staged
        if committed is not None and committed >= offset:
            log.info("%s: applying the staged checkpoint at offset %d (its transaction committed)",
                     self.processor, offset)
            store.apply_staged(offset, changes)
        else:
            log.info("%s: discarding the staged checkpoint at offset %d (its transaction did not commit)",
                     self.processor, offset)
            store.discard_staged()

    def _visible_ids(self, store: PartitionStore | None) -> set[str]:
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
        found: set[str] = set()
        for msg in read_range(self.bootstrap, ranges, isolation="read_committed"):
            for name, value in msg.headers() or []:
                if name == ID_HEADER and value is not None and value.startswith(prefix):
                    found.add(value.decode())
        return found

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> TxnSnapshot | None:
        """What this checkpoint commits, taken on the worker thread (None: nothing to commit)."""
        task = self.task
        if task.next_offset is None or not task.has_progress:
            return None
        changes = task.store.state_changes() if task.store is not None else {}
        return TxnSnapshot(self, task.next_offset, changes)

    def stage_and_send_offsets(self, snap: TxnSnapshot, group_metadata: Any) -> None:
        """T1 + T2."""
        task = self.task
        if task.store is not None:
            task.store.stage(snap.offset, snap.changes)
        self._guard(lambda: self.producer.send_offsets_to_transaction(
            [TopicPartition(task.topic, task.partition, snap.offset)],
            group_metadata, TXN_TIMEOUT))

    def commit(self) -> None:
        """T3."""
        self._guard(lambda: self.producer.commit_transaction(TXN_TIMEOUT))
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
        if self.open:
            try:
                self.producer.abort_transaction(TXN_TIMEOUT)
            except KafkaException as exc:
                log.warning("%s: abort failed: %s", self.processor, exc)
            self.open = False
        if self.task.state is not None:
            self.task.state.discard_changes()

    def close(self) -> None:
        self.producer.flush(5)

    def _guard(self, call: Any) -> None:
        try:
            call()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                              KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
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
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
            marks[f"{topic}:{partition}"] = max(0, high)
    return marks
