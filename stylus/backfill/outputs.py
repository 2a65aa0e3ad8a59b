"""Where a backfill task puts what the processor emits: nowhere (count only), back to the driver,
Parquet files (columns key, value as JSON text, timestamp, topic) or a Kafka topic."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from stylus.config.model import Pipeline
from stylus.core.sink import DirectOutput
from stylus.serde import Encoder, encode_key, encoder

JSON_ENCODER = encoder("json")

OUTPUT_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("timestamp", pa.int64()),
                           ("topic", pa.string())])
SHADOW_HEADER = "stylus.topic"  # the topic a shadowed record was emitted to
#: A backfill's producer batches more than a stream's (5 ms): its records keep no one waiting, and fewer,
#: larger produce requests cost the broker less CPU. The YAML's own settings win.
BULK_PRODUCER: dict[str, Any] = {"linger.ms": 50, "batch.num.messages": 100_000}


class OutputTarget(BaseModel):
    """kind: none (count only), collect (to the driver), parquet (dir `path`), topic (everything into
    `topic`, the original topic in header `stylus.topic`), outputs (each record to the topic it was
    emitted to: the processor's real outputs)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["none", "collect", "parquet", "topic", "outputs"] = "none"
    path: str | None = None
    topic: str | None = None
    collect: bool = False  # also return what was written to the driver (replay --diff)
    # topics only: the task's watermark written behind its outputs as control records, as a streaming stage
    # publishes it, for the next stage of a chained backfill to read (stylus/backfill/chain.py)
    marks: bool = False


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class TaskOutput:
    """The engine's sink in a backfill task (called per emit, like the stream's KafkaSink): counts per
    topic, keeps records for the driver when `collect`; subclasses also write. `close` finishes the part."""

    collect = False

    def __init__(self, encoders: Mapping[str, Encoder]) -> None:
        self.encoders = encoders  # by output topic: the stream's serde encoders
        self.counts: Counter[str] = Counter()
        self.collected: list[tuple[str, str | None, bytes, int]] = []

    def check(self, topic: str, value: Any) -> None:
        """Raises for a value the stream could not encode (the engine asks before it holds an output), so
        the backfill fails, and dead-letters, the records the stream would."""
        self.encoders[topic](value)

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None, partition: int = -1) -> None:
        """`partition` (a grouping's or `emit(partition=n)`'s) matters only to topics: elsewhere an `all`
        output is one row per partition's copy, as the topic would hold it."""
        self._count(topic, key, value, timestamp)

    def _count(self, topic: str, key: str | None, value: Any, timestamp: int) -> bytes:
        """Counts the output (and keeps it when collecting); returns it encoded as the stream would encode it,
        even where nothing is written: a value the stream refuses fails here too."""
        data = self.encoders[topic](value)
        self.counts[topic] += 1
        if self.collect:
            self.collected.append((topic, key, _json(value), timestamp))
        return data

    def serve(self) -> None:
        """Between batches: hand back what the client is holding for us (delivery reports)."""

    def close(self) -> None:
        """The unit is done: finish what it wrote (files, counts)."""

    def wait(self) -> None:
        """Return once what this output wrote is delivered, or raise. Separate from `close`: a task's units
        share one producer (`open_output(previous=...)`) and wait for delivery once, at the task's end."""


class CollectOutput(TaskOutput):
    collect = True


class ParquetOutput(TaskOutput):
    """One file per task, `part-{unit:05d}.parquet`: a re-run writes the same names (no duplicates). Rows are
    written in the order emitted, `ROWS_PER_GROUP` at a time."""

    ROWS_PER_GROUP = 50_000

    def __init__(self, encoders: Mapping[str, Encoder], path: str, index: int) -> None:
        super().__init__(encoders)
        self.final = Path(path.removeprefix("file://")) / f"part-{index:05d}.parquet"
        self.final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=self.final.parent)
        os.close(fd)
        self.tmp = Path(tmp)
        # no dictionary for the values: nearly all distinct, the dictionary is built only to be dropped
        self.writer = pq.ParquetWriter(self.tmp, OUTPUT_SCHEMA, compression="zstd", use_dictionary=["key", "topic"])
        self.rows: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])  # emitted one by one
        self.tables: list[pa.Table] = []  # ready, not yet written
        self.staged = 0  # their rows

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None, partition: int = -1) -> None:
        data = self._count(topic, key, value, timestamp)
        keys, values, stamps, topics = self.rows
        keys.append(key)
        values.append(data.decode() if self.encoders[topic] is JSON_ENCODER else _json(value).decode())
        stamps.append(timestamp)
        topics.append(topic)
        if len(keys) >= self.ROWS_PER_GROUP:
            self._write()

    def rows_sink(self, topic: str) -> Callable[..., None] | None:
        """Where a batch processor's encoded outputs to `topic` go as columns, with no object per row:
        `(topic, keys, values, timestamps, headers)`, a JSON topic's value bytes being the JSON text the file
        holds. None when they must go row by row (another serde, or outputs collected for the driver)."""
        if self.collect or self.encoders[topic] is not JSON_ENCODER:
            return None
        return self._put_rows

    def _put_rows(self, topic: str, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                  stamps: Sequence[int], _headers: Any = None) -> None:
        try:
            key_column = pa.array(keys, pa.binary()).cast(pa.string())
            value_column = pa.array(values, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:  # a key that is not UTF-8: row by row, as the per-record path writes it
            for key, value, stamp in zip(keys, values, stamps, strict=True):
                self(topic, None if key is None else key.decode("utf-8", "surrogateescape"),
                     None if value is None else orjson.loads(value), stamp, None)
            return
        self.counts[topic] += len(values)
        self._stage()  # rows emitted one by one before these stay before them
        self.tables.append(pa.Table.from_arrays(
            [key_column, value_column.fill_null("null"), pa.array(stamps, pa.int64()),
             pa.array([topic] * len(values), pa.string())], schema=OUTPUT_SCHEMA))
        self.staged += len(values)
        if self.staged >= self.ROWS_PER_GROUP:
            self._write()

    def _stage(self) -> None:
        """The rows emitted one by one, as a table behind the staged ones."""
        keys, values, stamps, topics = self.rows
        if keys:
            self.tables.append(pa.Table.from_pydict(
                {"key": keys, "value": values, "timestamp": stamps, "topic": topics}, schema=OUTPUT_SCHEMA))
            self.staged += len(keys)
            self.rows = ([], [], [], [])

    def _write(self) -> None:
        self._stage()
        if self.tables:
            self.writer.write_table(pa.concat_tables(self.tables))
            self.tables, self.staged = [], 0

    def close(self) -> None:
        self._write()
        self.writer.close()
        os.replace(self.tmp, self.final)


class TopicOutput(TaskOutput):
    """Produces with the pipeline's producer settings, encoded by the emitting topic's serde."""

    def __init__(self, pipeline: Pipeline, processor: str, bootstrap: str, target: str | None,
                 previous: TopicOutput | None = None) -> None:
        from confluent_kafka import Producer

        super().__init__(output_encoders(pipeline, processor))
        self.target = target
        self.errors: list[str]
        self.producer: Producer
        if previous is not None:  # the task's earlier unit: same producer, same delivery errors
            self.errors, self.producer = previous.errors, previous.producer
        else:
            # A new idempotent producer sends nothing for its first ~0.5 s (librdkafka: "No brokers available
            # for Idempotent producer", PID timer restarted after 500 ms), so a task makes one, not one per unit
            self.errors = []
            self.producer = Producer(producer_settings(pipeline, processor, bootstrap)
                                     | {"on_delivery": _collect_errors(self.errors)})
        self.produce = self.producer.produce
        self.emitted = 0  # outputs the engine produced itself through `direct` (it keeps this count)

    def direct(self) -> DirectOutput | None:
        """The engine's hot path, as the stream's KafkaSink offers it: `ctx.emit` encodes, the engine calls
        `produce` itself, no Python call per output. Only where the
        per-topic counts can be told from the engine's one counter (a single output topic, written under
        its own name) and nothing goes back to the driver."""
        if self.target is not None or self.collect or len(self.encoders) != 1:
            return None
        return DirectOutput(self.encoders, _headers, self.produce, self._produce_item, self)

    def _produce_item(self, item: tuple[Any, ...]) -> None:
        """A direct item whose produce met a full queue: wait for room."""
        while True:
            self.producer.poll(0.05)
            try:
                self.produce(*item)
                return
            except BufferError:
                continue

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None, partition: int = -1) -> None:
        """Per emit, so kept lean: the common case (str key, no headers) is one encode and one produce.
        A chosen `partition` (grouping or direct) is kept, in the shadow topic too: `_prepare_output` makes
        it as wide as the widest output."""
        self.counts[topic] += 1
        data = self.encoders[topic](value)
        if self.collect:
            self.collected.append((topic, key, _json(value), timestamp))
        raw_key = key.encode("utf-8", "surrogateescape") if type(key) is str else encode_key(key)
        target = self.target
        try:
            if target is None and not headers:  # positional: confluent-kafka parses keywords on every call
                self.produce(topic, data, raw_key, partition, None, None, timestamp)
                return
        except BufferError:
            pass
        extra = _headers(headers)
        if target:
            extra.append((SHADOW_HEADER, topic.encode()))
        while True:
            try:
                if extra:
                    self.produce(target or topic, data, raw_key, partition=partition, timestamp=timestamp,
                                 headers=extra)
                else:
                    self.produce(target or topic, data, raw_key, partition=partition, timestamp=timestamp)
                return
            except BufferError:
                self.producer.poll(0.05)

    def serve(self) -> None:
        """librdkafka keeps every produced record until its delivery report is served, reported or not
        (`delivery.report.only.error` drops the successful ones only when served): unserved, a task would hold
        its whole output in memory, then meet a full queue and wait polling, and the bulk release would cost
        page faults. The stream's worker serves its producer the same way per batch."""
        self.producer.poll(0)

    def close(self) -> None:
        if self.emitted:
            self.counts[next(iter(self.encoders))] += self.emitted
            self.emitted = 0

    def wait(self) -> None:
        remaining = self.producer.flush(60)
        if remaining or self.errors:
            raise RuntimeError(f"output not delivered: {remaining} pending, errors: {self.errors[:3]}")


def producer_settings(pipeline: Pipeline, processor: str, bootstrap: str) -> dict[str, Any]:
    """The librdkafka settings of a task's output producer: the pipeline's, bulk-batched (`BULK_PRODUCER`)."""
    from stylus.kafka.settings import client_config

    return client_config("producer", bootstrap, pipeline, processor, BULK_PRODUCER,
                         **{"delivery.report.only.error": True})


def _collect_errors(errors: list[str]) -> Any:
    """A delivery callback that keeps failures in `errors`, shared by every unit on the producer."""

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    return delivered


def _headers(headers: Mapping[str, Any] | None) -> list[tuple[str, bytes]]:
    if not headers:
        return []
    return [(k, v if isinstance(v, bytes) else str(v).encode()) for k, v in headers.items()]


def open_output(target: OutputTarget, pipeline: Pipeline, processor: str, bootstrap: str, index: int,
                previous: TaskOutput | None = None) -> TaskOutput:
    """The output of unit `index`; `previous`, the output of the task's unit before it, lends its producer."""
    output = _open(target, pipeline, processor, bootstrap, index, previous)
    output.collect = output.collect or target.collect
    return output


def output_encoders(pipeline: Pipeline, processor: str) -> dict[str, Encoder]:
    return {t: encoder(pipeline.topics[t].serde) for t in pipeline.processors[processor].outputs}


def _open(target: OutputTarget, pipeline: Pipeline, processor: str, bootstrap: str, index: int,
          previous: TaskOutput | None) -> TaskOutput:
    if target.kind == "collect":
        return CollectOutput(output_encoders(pipeline, processor))
    if target.kind == "parquet":
        assert target.path is not None
        return ParquetOutput(output_encoders(pipeline, processor), target.path, index)
    if target.kind in ("topic", "outputs"):
        return TopicOutput(pipeline, processor, bootstrap, target.topic if target.kind == "topic" else None,
                           previous if isinstance(previous, TopicOutput) else None)
    return TaskOutput(output_encoders(pipeline, processor))
