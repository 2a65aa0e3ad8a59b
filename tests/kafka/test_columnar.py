"""Producing many records in one call (stylus/kafka/columnar.py) on the real broker: what arrives, a full
queue, a refused record, failed deliveries and transactions, as for records given to `produce`."""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.kafka import columnar
from stylus.kafka.columnar import PartitionReader, PartitionRecords, many_producer
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


def test_the_module_can_be_turned_off_and_a_wrong_switch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STYLUS_COLUMNAR", "off")
    assert columnar._load() == (None, "turned off (STYLUS_COLUMNAR=off)")
    monkeypatch.setenv("STYLUS_COLUMNAR", "maybe")
    with pytest.raises(ValueError, match="STYLUS_COLUMNAR='maybe': set it to `on`"):
        columnar._load()
    monkeypatch.setenv("STYLUS_COLUMNAR", "On")
    assert columnar._load()[0] is not None


def test_a_module_built_for_another_confluent_kafka_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    assert columnar._load()[0] is not None
    monkeypatch.setattr(columnar._module, "built_for", "0.0.1")
    module, why = columnar._load()
    assert module is None and why is not None and "rebuild" in why and "0.0.1" in why
    assert columnar._librdkafka_files() and len(columnar._librdkafka_files()) == 1


class Member:
    """A group member that reads through a PartitionReader, as the worker does: each partition taken before
    it is assigned, the consumer's own `consume` serving everything else."""

    def __init__(self, bootstrap: str, topic: str, group: str, isolation: str = "read_committed") -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                                  "partition.assignment.strategy": "cooperative-sticky",
                                  "isolation.level": isolation, "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 500})
        self.reader = PartitionReader(self.consumer)
        self.assigned: set[int] = set()
        self.records: dict[int, list[tuple[Any, ...]]] = {}  # partition -> (offset, key, value, ts, headers)
        self.ends: dict[int, int] = {}  # partition -> the offset its last end-of-partition event named

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.reader.take((tp.topic, tp.partition) for tp in partitions)
            consumer.incremental_assign(partitions)
            self.assigned |= {tp.partition for tp in partitions}

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            consumer.incremental_unassign(partitions)
            self.assigned -= {tp.partition for tp in partitions}

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def step(self, timeout: float = 0.05) -> list[PartitionRecords]:
        assert self.consumer.consume(100, timeout=0) == []  # records come only through the reader
        runs, events, size = self.reader.read(1000, timeout)
        assert size == sum(len(k or b"") + len(v or b"") for run in runs for k, v in zip(run.keys, run.values,
                                                                                          strict=True))
        for run in runs:
            assert len(run.offsets) == len(run.keys) == len(run.values) == len(run.timestamps) == len(run.headers)
            assert list(run.offsets) == sorted(run.offsets)
            self.records.setdefault(run.partition, []).extend(
                zip(run.offsets, run.keys, run.values, run.timestamps, run.headers, strict=True))
        for event in events:
            assert event.error.code() == KafkaError._PARTITION_EOF, event
            self.ends[event.partition] = event.offset
        return runs

    def read_to_end(self, ends: dict[int, int], *others: Member) -> None:
        """Step (with `others`, which the group's rebalances wait on) until each partition is read to its end."""
        deadline = time.monotonic() + 60
        while any(self.ends.get(p) != end for p, end in ends.items()):
            assert time.monotonic() < deadline, (self.ends, ends)
            self.step()
            for other in others:
                other.step()

    def close(self) -> None:
        self.reader.close()
        self.consumer.close()


def test_a_reader_gives_each_partitions_records_as_a_consumer_reads_them(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("reader", partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(3000):
        key = None if i % 11 == 0 else f"k{i % 13}".encode()
        value = None if i % 17 == 0 else f'{{"n": {i}}}'.encode()
        headers = [("h", str(i).encode()), ("empty", None), ("ü", b"\x00\xff")] if i % 5 == 0 else None
        producer.produce(topic, value, key, partition=i % 3, timestamp=1_700_000_000_000 + i, headers=headers)
    assert producer.flush(30) == 0
    expected: dict[int, list[tuple[Any, ...]]] = {}
    for m in read_topic(bootstrap, topic):
        expected.setdefault(m.partition(), []).append((m.offset(), m.key(), m.value(), m.timestamp()[1],
                                                       m.headers()))
    member = Member(bootstrap, topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        seen_range = False
        deadline = time.monotonic() + 60
        while any(member.ends.get(p) != 1000 for p in range(3)):
            assert time.monotonic() < deadline, member.ends
            seen_range |= any(isinstance(run.offsets, range) for run in member.step())
        assert seen_range  # offsets that follow each other come as a range
        assert member.records == expected
    finally:
        member.close()  # returns: the partitions given back first


def test_offsets_with_gaps_come_as_a_list(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("gaps")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gaps-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    for txn in range(2):  # each commit marker takes an offset: 0-2, marker 3, 4-6, marker 7
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{txn}-{i}".encode())
        producer.commit_transaction(30)
    member = Member(bootstrap, topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        member.read_to_end({0: 8})
        assert [r[0] for r in member.records[0]] == [0, 1, 2, 4, 5, 6]
        assert [r[2] for r in member.records[0]] == [b"0-0", b"0-1", b"0-2", b"1-0", b"1-1", b"1-2"]
    finally:
        member.close()


def test_partitions_moved_to_a_new_member_are_read_there_and_only_there(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("moved", partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(first: int) -> None:
        for i in range(first, first + 400):
            producer.produce(topic, str(i).encode(), partition=i % 4)
        assert producer.flush(30) == 0

    produce(0)
    first = Member(bootstrap, topic, group)
    second: Member | None = None
    try:
        first.read_to_end({p: 100 for p in range(4)})
        second = Member(bootstrap, topic, group)
        deadline = time.monotonic() + 60
        while not (first.assigned and second.assigned and first.assigned | second.assigned == set(range(4))
                   and not first.assigned & second.assigned):
            assert time.monotonic() < deadline, (first.assigned, second.assigned)
            first.step()
            second.step()
        produce(400)
        first.read_to_end({p: 200 for p in first.assigned}, second)
        second.read_to_end({p: 200 for p in second.assigned}, first)
        new = {id(member): [(p, r[2]) for p, rows in member.records.items() for r in rows if int(r[2]) >= 400]
               for member in (first, second)}
        every = [record for records in new.values() for record in records]
        assert len(every) == len(set(every)) == 400  # each new record read once
        for member in (first, second):  # by its partition's owner
            assert {p for p, _ in new[id(member)]} == member.assigned
    finally:
        first.close()
        if second is not None:
            second.close()


def test_an_event_on_the_consumers_queue_ends_a_waiting_read(bootstrap: str,
                                                             topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("wake")
    member = Member(bootstrap, topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        member.read_to_end({0: 0})
        member.consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=True)
        started = time.monotonic()
        runs, events, _ = member.reader.read(10, 20.0)  # the commit's answer arrives on the consumer's queue
        assert runs == [] and events == [] and time.monotonic() - started < 10
        member.consumer.consume(10, timeout=0)  # ... where the consumer serves it
        assert member.consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 0
    finally:
        member.close()


def test_a_reader_outliving_its_closed_consumer_is_released_safely(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    reader = PartitionReader(consumer)
    consumer.close()  # the reader not closed first: its queues go with the consumer
    with pytest.raises(RuntimeError, match="closed"):
        reader.read(10, 0.0)
    reader.close()  # releasing it then neither crashes nor hangs
    del reader
    gc.collect()
