"""Where `ctx.emit` goes: a Kafka producer in streaming, a list in backfill and tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol


class Sink(Protocol):
    """`partition`: -1 for the producer's choice (by key, or spread); else the one a grouping or
    `ctx.emit(partition=n)` chose (stylus/core/groupings.py), passed only then, by name.

    A sink that encodes when it is called may also have `check(topic, value)`, raising for a value the topic's
    serde cannot encode: `ctx.emit` calls it when it holds an output until its record (or batch) succeeds, so
    such a value fails its own record, with nothing emitted, rather than the release after it."""

    def __call__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None,
        partition: int = -1,
    ) -> None: ...


#: librdkafka's own default for the producer's `message.max.bytes`
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: what a record takes beyond its value, key and headers when librdkafka sizes it (~40 bytes measured); a
#: little more here, so the check below is never more lenient than the producer
FRAMING_BYTES = 128


def refuse_oversized(items: list[tuple[Any, ...]], limit: int) -> None:
    """Held output is produced later, outside the record that made it, where librdkafka's refusal of a record
    over `message.max.bytes` (MSG_SIZE_TOO_LARGE) would fail the checkpoint and stop the processor: such bad
    input must fail its own record instead (on_error: dead letter, skip or stop). Output produced at once
    needs no check: `produce` raises inside the record."""
    for item in items:
        value, key = item[1], item[2]
        size = FRAMING_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
        if len(item) > 7 and item[7]:
            for name, header in item[7]:  # str or bytes; a str counts by characters (UTF-8: at least that)
                size += len(name) + (len(header) if header else 0)
        if size > limit:
            raise ValueError(f"an output of {size:,} bytes to `{item[0]}` is too large for the producer "
                             f"(message.max.bytes {limit:,}): raise `message.max.bytes` (producer and broker) "
                             "or emit less")


class DirectOutput(NamedTuple):
    """A sink's offer to skip its own `__call__` on the hot path (KafkaSink.direct): `ctx.emit` encodes at
    once (a value that cannot be encoded fails its record before anything is produced) and the engine
    passes each item, the positional arguments of `produce`, to `produce` once the record has succeeded,
    or, while the sink holds its output (`hold`), appends the items to that list for the sink to produce
    later: held output costs no more per record than output produced at once."""

    encoders: Mapping[str, Callable[[Any], bytes]]  # by output topic
    headers: Callable[[Any], Any]  # checks emitted headers (raises for ones the client cannot take)
    produce: Callable[..., None]  # (topic, value, key, partition, callback, on_delivery, timestamp[, headers])
    retry: Callable[[tuple[Any, ...]], None]  # an item whose produce raised BufferError: waits for room
    owner: Any  # the sink: its `emitted` counter is kept by the engine
    # exactly-once output (TransactionalSink): (header name, bytes format of `<prefix><offset>:<index>`).
    # `ctx.emit` stamps each output as it is held and the engine hands it to `produce` (then the raw
    # producer's): no Python call per output. The engine leaves the owner's `_origin`/`_index` as the sink's
    # own stamping would have (a dead letter or late record stamped by the sink continues from there).
    stamp: tuple[str, bytes] | None = None
    # the sink's held output (a checkpoint in flight, or at-most-once output): items go here, not to `produce`
    hold: list[tuple[Any, ...]] | None = None
    # the producer's message.max.bytes: held items are checked against it as they are held (refuse_oversized)
    max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    # (topic, values, keys, timestamps, start) -> the index of the first record not produced (queue full): a
    # batch's rows produced in one call (stylus.kafka.columnar.ProduceMany), where the sink offers it
    produce_many: Callable[..., int] | None = None


class Output:
    __slots__ = ("headers", "key", "partition", "timestamp", "topic", "value")

    def __init__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None,
        partition: int = -1,
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.partition = partition  # -1: the producer's choice

    def __repr__(self) -> str:
        where = f"[{self.partition}]" if self.partition >= 0 else ""
        return f"Output({self.topic!r}{where}, key={self.key!r}, value={self.value!r}, ts={self.timestamp})"


class CollectingSink:
    """Keeps decoded outputs in memory, checking the topic is a declared output."""

    def __init__(self, outputs: tuple[str, ...] | list[str]) -> None:
        self.allowed = set(outputs)
        self.outputs: list[Output] = []

    def __call__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None,
        partition: int = -1,
    ) -> None:
        if topic not in self.allowed:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self.outputs.append(Output(topic, key, value, timestamp, headers, partition))
