"""The Kafka sinks' own emit path (timers, and output held for the checkpoint) keeps a grouping's partition:
`KafkaSink.__call__(..., partition=n)` at once and held, `TransactionalSink` inside a transaction; the retry
after a full queue too. Every partition read back from the real broker (docs/groupings.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.runtime.sink import KafkaSink
from stylus.runtime.transactions import TransactionalSink
from tests.support.kafka import read_raw


def _pipeline(topic: str) -> Pipeline:
    return parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{partitions: 3}}}}\nprocessors:\n"
                          f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}]}}\n")


def _where(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    return sorted((m.partition(), m.value()) for m in read_raw(bootstrap, topic))


def test_kafka_sink_keeps_the_partition_at_once_held_and_on_retry(bootstrap: str,
                                                                  topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("grp-sink", partitions=3)
    pipeline = _pipeline(topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    sink = KafkaSink(producer, pipeline, (topic,), hold=False)
    sink(topic, "k", "now", 1000, None, partition=2)
    sink._produce_item((topic, b'"retried"', b"k", 1, None, None, 1000))  # after a full queue
    held = KafkaSink(producer, pipeline, (topic,), hold=True)  # at-most-once output
    held(topic, "k", "held", 1000, None, partition=0)
    assert held.held[0][3] == 0
    held.release()
    sink.flush(10)
    assert _where(bootstrap, topic) == [(0, b'"held"'), (1, b'"retried"'), (2, b'"now"')]


class _Task:
    next_offset = 7  # the timer's input partition had processed every record before offset 7


class _Ctx:
    record: Any = None
    _timer = (1000, "k")  # as while `on_timer` runs
    _task = _Task()


def test_transactional_sink_keeps_the_partition_and_stamps_each_copy(bootstrap: str,
                                                                     topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("grp-txn", partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"grp-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    sink = TransactionalSink(producer, _pipeline(topic), (topic,), _Ctx(), "x-", stamp=True)  # type: ignore[arg-type]
    for part in range(3):  # an `all` output's copies, from a timer
        sink(topic, "k", "t", 1000, None, partition=part)
    producer.commit_transaction(30)
    deadline = time.monotonic() + 30
    while len(got := read_raw(bootstrap, topic)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the commit markers reach the partitions just after commit_transaction returns
    assert sorted(m.partition() for m in got) == [0, 1, 2]
    assert sorted(dict(m.headers())["stylus.id"] for m in got) == [b"x-T1000:k:0", b"x-T1000:k:1", b"x-T1000:k:2"]
    assert {dict(m.headers())["stylus.at"] for m in got} == {b"7"}  # where the timer fired, on each copy
