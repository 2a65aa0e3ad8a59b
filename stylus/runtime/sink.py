"""`ctx.emit` into a Kafka producer, either at once or held back until the checkpoint has been saved."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from stylus.config.model import Pipeline
from stylus.core.sink import DEFAULT_MESSAGE_MAX_BYTES, DirectOutput, refuse_oversized
from stylus.kafka.columnar import many_producer
from stylus.serde import encoder

#: A held output: the positional arguments of `produce` (topic, value, key, partition, callback, on_delivery,
#: timestamp[, headers]), as the engine's direct path builds them (DirectOutput), so it can hold them as they are.
Pending = tuple[Any, ...]

#: how long `await_delivery` leaves the serving of delivery reports to the worker's poll before doing it itself
SERVED_ELSEWHERE_GRACE = 1.0


#: Delivery errors of a passing cause (a cut connection, a broker restarting or moving a leader, a timeout):
#: the same record may go through later. Any other error (authorization, an unknown topic, a record the broker
#: refuses) would fail every output alike.
PASSING_DELIVERY_ERRORS = frozenset({
    KafkaError._TRANSPORT, KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.KAFKA_STORAGE_ERROR})


class DeliveryFailed(RuntimeError):
    """Records the broker did not acknowledge: `failed` reported failed (their error codes in `codes`),
    `unacknowledged` still unanswered when the wait ended."""

    def __init__(self, message: str, *, failed: int = 0, unacknowledged: int = 0,
                 codes: frozenset[int] = frozenset()) -> None:
        super().__init__(message)
        self.failed = failed
        self.unacknowledged = unacknowledged
        self.codes = codes

    @property
    def records(self) -> int:
        return self.failed + self.unacknowledged

    @property
    def passing(self) -> bool:
        """Whether every failure has a passing cause (PASSING_DELIVERY_ERRORS), so later records may go through."""
        return self.codes <= PASSING_DELIVERY_ERRORS


def message_max_bytes(config: Mapping[str, Any]) -> int:
    return int(config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))




def _utf8(text: str, repair: bool) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        if not repair:
            raise ValueError(f"header {text!r} is not valid UTF-8") from None
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _checked_headers(headers: Any) -> list[tuple[str, Any]]:
    return clean_headers(headers, repair=False)


def clean_headers(headers: Any, *, repair: bool) -> list[tuple[str, Any]]:
    """Header names (and str values) librdkafka can take. confluent-kafka crashes the process on a str it
    cannot encode as UTF-8 (a lone surrogate): an emitted one fails its record; a dead letter's is repaired."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(_utf8(str(name), repair), _utf8(value, repair) if isinstance(value, str) else value)
            for name, value in items]


def wait_until_served(producer: Producer, grace: float) -> bool:
    """Wait, without serving any, until every record `producer` took is acknowledged and its delivery
    report served by the thread that polls it (the worker); False if `grace` passes first (a slow broker,
    or a worker busy in one long record: the caller then serves the rest itself). confluent-kafka takes
    the GIL once per record to serve a report, even an unreported success: a second thread serving them
    while the worker runs Python would fight it for the GIL on every record, slowing both the flush and
    the worker."""
    deadline = time.monotonic() + grace
    pause = 0.001
    while len(producer):
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    return True


class KafkaSink:
    """Encodes by the output topic's serde and hands records to the producer.

    With `hold=True` (at-most-once output) encoded records wait in memory until `release()`,
    which the checkpoint calls after it has saved the offsets. The engine may bypass `__call__` (`direct()`),
    whether output flows straight to the producer or is held. `produce` is called positionally: confluent-kafka
    parses keyword arguments on every call, a sizeable part of the call's cost.
    """

    def __init__(self, producer: Producer, pipeline: Pipeline, outputs: tuple[str, ...], *, hold: bool,
                 max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES,
                 on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
        self.producer = producer
        # `on_delivery`: the callback `producer` was configured with; given, a batch's rows go out in one call
        self.produce_many = many_producer(producer, on_delivery) if on_delivery is not None else None
        self.max_bytes = max_bytes  # the producer's message.max.bytes: held output is checked against it
        self.encoders = {t: encoder(pipeline.topics[t].serde) for t in outputs}
        self.hold = hold  # at-most-once output: always held until its checkpoint is saved
        self.paused = False  # held while a checkpoint is in flight on another thread
        self.held: list[Pending] = []
        self.failures: list[tuple[str, KafkaError]] = []  # (topic, error) of each failed delivery report
        self.emitted = 0
        self.given_up = 0  # at-most-once outputs not sent (stylus/runtime/checkpoint.py: _emit, _refuse)

    def __call__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None,
        partition: int = -1,
    ) -> None:
        encode = self.encoders.get(topic)
        if encode is None:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        data = encode(value)
        raw_key: bytes | None = (
            None if key is None else key if type(key) is bytes else str(key).encode("utf-8", "surrogateescape")
        )
        checked = clean_headers(headers, repair=False) if headers else None
        self.emitted += 1
        if self.hold or self.paused:
            self._hold((topic, data, raw_key, partition, None, None, timestamp, checked))
            return
        try:  # one produce call (topic, value, key, partition, callback, on_delivery, timestamp, headers)
            self.producer.produce(topic, data, raw_key, partition, None, None, timestamp, checked)
        except BufferError:  # the retry loop only when the queue is full
            self._produce(topic, data, raw_key, timestamp, checked, partition)

    def direct(self) -> DirectOutput | None:
        """The engine's hot path (stylus/core/engine.py): it encodes in `ctx.emit` and produces a record's
        outputs itself once the record succeeded, exactly as `__call__` would, or appends them to `held`
        while output is held. None for a subclass that stamps or routes its output (TransactionalSink)."""
        plain = type(self).__call__ is KafkaSink.__call__ and type(self).send is KafkaSink.send
        if not plain:
            return None
        return DirectOutput(self.encoders, _checked_headers, self.producer.produce, self._produce_item, self,
                            hold=self.held if self.hold or self.paused else None, max_bytes=self.max_bytes,
                            produce_many=self.produce_many)

    def _hold(self, item: Pending) -> None:
        """Keep an output for the checkpoint's release, failing its record now if the producer would refuse
        it then (refuse_oversized)."""
        refuse_oversized([item], self.max_bytes)
        self.held.append(item)

    def _produce_item(self, item: Pending) -> None:
        """A direct or held item (the positional arguments of `produce`) whose produce met a full queue."""
        topic, value, key, partition, _callback, _on_delivery, timestamp, *headers = item
        self._produce(topic, value, key, timestamp, headers[0] if headers else None, partition)

    def send(
        self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None
    ) -> None:
        """Raw bytes to a topic (also the dead-letter path); obeys the same holding rule."""
        if headers:
            headers = clean_headers(headers, repair=True)
        self.emitted += 1
        if self.hold or self.paused:
            self.held.append((topic, value, key, -1, None, None, timestamp, headers or None))
            return
        self._produce(topic, value, key, timestamp, headers)

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any,
                 partition: int = -1) -> None:
        produce = self.producer.produce
        while True:
            try:
                produce(topic, value, key, partition, None, None, timestamp, headers or None)
                return
            except BufferError:  # the producer's queue is full: wait for the broker (backpressure)
                self.producer.poll(0.05)

    @property
    def held_count(self) -> int:
        return len(self.held)

    def take_held(self) -> list[Pending]:
        """The held records a checkpoint is about to cover (snapshot, on the worker thread)."""
        held, self.held = self.held, []
        return held

    def produce_all(self, records: list[Pending]) -> None:
        """Held records, in order: one produce call each, the retry loop only when the queue is full."""
        produce = self.producer.produce
        for item in records:
            try:
                produce(*item)
            except BufferError:
                self._produce_item(item)

    def release(self) -> None:
        """Produce everything held back."""
        self.produce_all(self.take_held())

    def resume(self) -> None:
        """The checkpoint in flight is done: output flows again (at-most-once output stays held)."""
        self.paused = False
        if not self.hold:
            self.release()

    def drop_held(self) -> int:
        return len(self.take_held())

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until the broker acknowledged every record produced so far, or raise."""
        remaining = self.producer.flush(timeout)
        if remaining:
            failures, self.failures = self.failures, []
            raise DeliveryFailed(f"{remaining} records still unacknowledged after {timeout}s",
                                 failed=len(failures), unacknowledged=remaining,
                                 codes=frozenset(err.code() for _, err in failures))
        self._raise_failures()

    def await_delivery(self, timeout: float = 60.0, *, grace: float = SERVED_ELSEWHERE_GRACE) -> None:
        """`flush` for a thread other than the one that polls the producer (an overlapped checkpoint's):
        wait until every record produced so far is acknowledged and its report served, leaving the
        serving to the poller (`wait_until_served`); after `grace`, serve the rest here."""
        started = time.monotonic()
        if not wait_until_served(self.producer, grace):
            self.flush(max(0.0, timeout - (time.monotonic() - started)))
            return
        self._raise_failures()

    def _raise_failures(self) -> None:
        if self.failures:
            failures, self.failures = self.failures, []
            topic, first = failures[0]
            raise DeliveryFailed(f"{len(failures)} records failed delivery; first: {topic}: {first}",
                                 failed=len(failures), codes=frozenset(err.code() for _, err in failures))

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failures.append((msg.topic(), err))

