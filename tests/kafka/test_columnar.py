"""Producing many records in one call (stylus/kafka/columnar.py) on the real broker: what arrives, a full
queue, a refused record, failed deliveries and transactions, as for records given to `produce`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from stylus.kafka import columnar
from stylus.kafka.columnar import many_producer
from stylus.kafka.reader import read_topic

Reports = list[tuple[Any, Any]]


def test_the_module_is_built_and_used() -> None:
    assert columnar.unavailable is None, columnar.unavailable  # `make install` builds it


def producer_with_reports(bootstrap: str, **config: Any) -> tuple[Producer, Reports, Callable[..., Any]]:
    """A producer whose delivery reports (failures only, as the worker's) are kept, and its produce-many."""
    reports: Reports = []

    def delivered(err: Any, msg: Any) -> None:
        reports.append((err, msg.topic()))

    producer = Producer({"bootstrap.servers": bootstrap, "delivery.report.only.error": True,
                         "on_delivery": delivered, **config})
    produce_many = many_producer(producer, delivered)
    assert produce_many is not None
    return producer, reports, produce_many


def test_records_arrive_as_given_keys_values_and_timestamps(bootstrap: str,
                                                            topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("many", partitions=3)
    producer, reports, produce_many = producer_with_reports(bootstrap, partitioner="murmur2_random")
    values: list[bytes | None] = [f"v{i}".encode() for i in range(500)] + [None]
    keys: list[bytes | None] = [f"k{i % 7}".encode() for i in range(500)] + [b"tombstone"]
    stamps = [1_700_000_000_000 + i for i in range(501)]
    assert produce_many(topic, tuple(values[:100]), keys[:100], stamps[:100], 0) == 100  # tuples too
    assert produce_many(topic, values, keys, stamps, 100) == 501  # from an index on
    producer.produce(topic, b"last", None, -1, None, None, 1)  # a plain produce after them, no key
    assert producer.flush(30) == 0 and reports == []
    got = read_topic(bootstrap, topic)
    assert sorted((m.key(), m.value(), m.timestamp()[1]) for m in got if m.value() != b"last") == \
        sorted(zip(keys, values, stamps, strict=True))
    for key in {m.key() for m in got}:  # one key, one partition, in the order produced
        mine = [m for m in got if m.key() == key]
        assert len({m.partition() for m in mine}) == 1
        assert [m.timestamp()[1] for m in mine] == sorted(m.timestamp()[1] for m in mine)
    assert [m.timestamp()[1] for m in got if m.value() == b"last"] == [1]
    producer.produce(topic, b"other", b"k0")  # the same key lands where produce_many put it
    assert producer.flush(30) == 0
    k0 = [m for m in read_topic(bootstrap, topic) if m.key() == b"k0"]
    assert len({m.partition() for m in k0}) == 1


def test_a_full_queue_stops_the_call_where_it_is(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("full")
    producer, reports, produce_many = producer_with_reports(bootstrap, **{"queue.buffering.max.messages": 10,
                                                                          "linger.ms": 1000})
    values = [str(i).encode() for i in range(35)]
    keys, stamps = [None] * 35, [0] * 35
    done, calls = 0, 0
    while done < len(values):
        now = produce_many(topic, values, keys, stamps, done)
        assert now - done <= 10, "more records queued than the queue holds"
        if now < len(values):
            producer.flush(30)  # room again
        done, calls = now, calls + 1
    assert calls >= 4 and producer.flush(30) == 0 and reports == []
    assert [m.value() for m in read_topic(bootstrap, topic)] == values


def test_a_refused_record_raises_as_produce_would_after_those_before_it(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("refused")
    producer, reports, produce_many = producer_with_reports(bootstrap, **{"message.max.bytes": 2000})
    values = [b"a", b"b", b"x" * 5000, b"d"]
    with pytest.raises(KafkaException) as raised:
        produce_many(topic, values, [None] * 4, [0] * 4, 0)
    assert raised.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(KafkaException) as by_produce:
        producer.produce(topic, b"x" * 5000)
    assert by_produce.value.args[0].code() == raised.value.args[0].code()
    assert produce_many(topic, values, [None] * 4, [0] * 4, 3) == 4  # the producer goes on
    assert producer.flush(30) == 0 and reports == []
    assert [m.value() for m in read_topic(bootstrap, topic)] == [b"a", b"b", b"d"]
    with pytest.raises(TypeError, match="record 1"):
        produce_many(topic, [b"ok", "text"], [None, None], [0, 0], 0)
    with pytest.raises(ValueError, match="differ in length"):
        produce_many(topic, [b"ok"], [], [0], 0)


def test_failed_deliveries_reach_the_producers_callback(bootstrap: str) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"  # the broker creates no topic on its own
    producer, reports, produce_many = producer_with_reports(bootstrap, **{"message.timeout.ms": 1500})
    assert produce_many(missing, [b"1", b"2", b"3"], [None] * 3, [0] * 3, 0) == 3
    producer.flush(30)
    assert len(reports) == 3 and all(err is not None and topic == missing for err, topic in reports)


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
def test_records_join_the_open_transaction(bootstrap: str, topic_factory: Callable[..., str], commit: bool) -> None:
    topic = topic_factory("txn")
    producer, reports, produce_many = producer_with_reports(
        bootstrap, **{"transactional.id": f"columnar-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    assert produce_many(topic, [b"1", b"2"], [b"k", b"k"], [5, 6], 0) == 2
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    purged = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}  # the abort's, as for `produce`'s records
    assert all(err.code() in purged for err, _ in reports) and (commit is False or reports == [])
    got = [m.value() for m in read_topic(bootstrap, topic)]
    assert got == ([b"1", b"2"] if commit else [])


def test_a_module_built_for_another_confluent_kafka_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    assert columnar._load()[0] is not None
    monkeypatch.setattr(columnar._module, "built_for", "0.0.1")
    module, why = columnar._load()
    assert module is None and why is not None and "rebuild" in why and "0.0.1" in why
    assert columnar._librdkafka_files() and len(columnar._librdkafka_files()) == 1
