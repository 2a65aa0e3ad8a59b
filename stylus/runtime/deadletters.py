"""Reading and re-injecting dead letters (`<pipeline>.<processor>.dlq`), for `stylus dlq`.

A dead letter is the failed input record unchanged (key, value, timestamp, its own headers) plus the
`stylus.error*` / `stylus.source.*` headers of stylus/runtime/failures.py. Re-injection produces it
back to its source topic without those headers, so the fixed processor sees the original record.
How far re-injection got is committed as the offset of the consumer group
`<pipeline>.<processor>.dlq-reinject`, so running it twice does not inject a letter twice.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from stylus.config.model import Pipeline
from stylus.core.message import RawMessage
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.reader import read_range
from stylus.kafka.settings import client_config
from stylus.runtime.failures import without_error_headers

#: Framework headers that belong to one delivery, not to the record (exactly-once output ids).
DROP_ON_REINJECT = ("stylus.id",)


@dataclass(frozen=True)
class DeadLetter:
    partition: int  # of the dead-letter topic
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]
    reinjected: bool  # already produced back by an earlier `--reinject`

    def header(self, name: str) -> str | None:
        found = None
        for key, value in self.headers:
            if key == name and value is not None:
                found = value.decode("utf-8", "replace")  # the newest wins
        return found

    @property
    def source_topic(self) -> str | None:
        return self.header("stylus.source.topic")

    @property
    def stage(self) -> str | None:
        return self.header("stylus.error.stage")

    @property
    def reinjectable(self) -> bool:
        """Records are; failed timers (stage `timer`) are not input and cannot go back."""
        return self.source_topic is not None and self.stage != "timer"

    def original_headers(self) -> list[tuple[str, bytes]]:
        return [h for h in without_error_headers(list(self.headers)) if h[0] not in DROP_ON_REINJECT]

    def as_dict(self) -> dict[str, Any]:
        text = None
        if self.value is not None:
            try:
                text = self.value.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        return {
            "partition": self.partition,
            "offset": self.offset,
            "key": None if self.key is None else self.key.decode("utf-8", "replace"),
            "value": text,
            "value_base64": None if self.value is None else base64.b64encode(self.value).decode(),
            "timestamp": self.timestamp,
            "error": self.header("stylus.error"),
            "stage": self.stage,
            "trace": self.header("stylus.error.trace"),
            "error_time": _int(self.header("stylus.error.time")),
            "source": {
                "topic": self.source_topic,
                "partition": _int(self.header("stylus.source.partition")),
                "offset": _int(self.header("stylus.source.offset")),
            },
            "headers": {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in self.headers},
            "reinjected": self.reinjected,
        }


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def reinject_group(pipeline: Pipeline, processor: str) -> str:
    return f"{pipeline.dlq_topic(processor)}-reinject"


def _progress_consumer(bootstrap: str, pipeline: Pipeline, processor: str) -> Consumer:
    config = client_config("consumer", bootstrap, pipeline, processor, **{"group.id": reinject_group(pipeline,
                                                                                                     processor)})
    return Consumer(config)


def read_dead_letters(bootstrap: str, pipeline: Pipeline, processor: str,
                      timeout: float = 30.0) -> list[DeadLetter]:
    """Every dead letter of a processor, oldest first per partition, flagged if already re-injected."""
    topic = pipeline.dlq_topic(processor)
    parts = topic_partitions(bootstrap, [topic])
    if not parts:
        return []
    ends = end_offsets(bootstrap, parts)
    done = _reinjected_upto(bootstrap, pipeline, processor, [p for _, p in parts])
    letters = []
    for msg in read_range(bootstrap, dict(ends), timeout=timeout):
        letters.append(_letter(msg, done))
    return letters


def _letter(msg: RawMessage, done: dict[int, int]) -> DeadLetter:
    return DeadLetter(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                      tuple(msg.headers() or ()), msg.offset() < done.get(msg.partition(), 0))


def _reinjected_upto(bootstrap: str, pipeline: Pipeline, processor: str, partitions: list[int]) -> dict[int, int]:
    consumer = _progress_consumer(bootstrap, pipeline, processor)
    try:
        topic = pipeline.dlq_topic(processor)
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
    finally:
        consumer.close()


@dataclass(frozen=True)
class ReinjectResult:
    reinjected: int
    skipped_done: int  # re-injected by an earlier run
    not_reinjectable: int  # failed timers, or letters without a source topic


def reinject(bootstrap: str, pipeline: Pipeline, processor: str, letters: list[DeadLetter],
             timeout: float = 30.0) -> ReinjectResult:
    """Produce each not-yet-re-injected letter back to its source topic, then record the progress.

    The progress is committed only after the broker acknowledged every record, so a crash in between
    re-injects again (at-least-once) rather than losing a letter.
    """
    failures: list[str] = []
    producer = Producer(
        client_config("producer", bootstrap, pipeline, processor)
        | {"on_delivery": lambda err, msg: failures.append(f"{msg.topic()}: {err}") if err else None}
    )
    sent = skipped = unusable = 0
    upto: dict[int, int] = {}
    for letter in letters:
        if letter.reinjected:
            skipped += 1
            continue
        if not letter.reinjectable:
            unusable += 1
        else:
            source = letter.source_topic
            assert source is not None
            while True:
                try:
                    producer.produce(source, letter.value, letter.key, timestamp=letter.timestamp,
                                     headers=letter.original_headers() or None)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        upto[letter.partition] = max(upto.get(letter.partition, 0), letter.offset + 1)
    remaining = producer.flush(timeout)
    if remaining or failures:
        raise RuntimeError(f"re-injection incomplete: {remaining} unacknowledged, {len(failures)} failed"
                           + (f"; first: {failures[0]}" if failures else ""))
    if upto:
        consumer = _progress_consumer(bootstrap, pipeline, processor)
        try:
            topic = pipeline.dlq_topic(processor)
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in upto.items()], asynchronous=False)
        finally:
            consumer.close()
    return ReinjectResult(sent, skipped, unusable)
