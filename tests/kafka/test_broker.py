"""`stylus broker` serves Apache Kafka itself: what the product's exactly-once and time-range reads rest on."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker, free_port, free_ports
from stylus.kafka.offsets import end_offsets, offsets_for_times
from stylus.kafka.reader import read_topic
from tests.support.cli import stylus_cmd, stylus_env
from tests.support.kafka import produce

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cli_broker() -> Iterator[str]:
    """`stylus broker --port N` as a user starts it; its first line on stdout is the bootstrap address."""
    port = free_port()
    proc = subprocess.Popen(stylus_cmd("broker", "--port", str(port)), env=stylus_env(None),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"127.0.0.1:{port}", proc.stderr.read() if proc.stderr else line
        yield line
    finally:
        proc.terminate()
        assert proc.wait(60) == 0


def test_aborted_transaction_is_invisible_to_read_committed(cli_broker: str) -> None:
    create_topics(cli_broker, {"txn": TopicSpec(partitions=1)})
    producer = Producer({"bootstrap.servers": cli_broker, "transactional.id": "abort-check"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn", b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("txn", b"committed")
    producer.commit_transaction(30)
    assert [m.value() for m in read_topic(cli_broker, "txn", isolation="read_committed")] == [b"committed"]
    assert [m.value() for m in read_topic(cli_broker, "txn", isolation="read_uncommitted")] == \
        [b"aborted", b"committed"]


def test_list_offsets_latest_equals_records_produced(cli_broker: str) -> None:
    create_topics(cli_broker, {"ends": TopicSpec(partitions=3)})
    produce(cli_broker, "ends", [(f"k{i}", {"i": i}) for i in range(1000)])  # lingered: multi-record batches
    ends = end_offsets(cli_broker, [("ends", p) for p in range(3)])
    assert all(low == 0 for low, _ in ends.values())
    assert sum(high for _, high in ends.values()) == 1000
    consumer = Consumer({"bootstrap.servers": cli_broker, "group.id": "ends-check"})
    try:  # the client's own ListOffsets, uncached, says the same
        listed = [consumer.get_watermark_offsets(TopicPartition("ends", p), timeout=10, cached=False)[1]
                  for p in range(3)]
    finally:
        consumer.close()
    assert sum(listed) == 1000


def test_offsets_for_times_finds_a_record_by_its_timestamp(cli_broker: str) -> None:
    create_topics(cli_broker, {"times": TopicSpec(partitions=1)})
    produce(cli_broker, "times", [(None, {"i": i}) for i in range(500)],
            timestamps=[BASE_TS + i * 1000 for i in range(500)])
    found = offsets_for_times(cli_broker, {("times", 0): BASE_TS + 321_000})
    assert found == {("times", 0): 321}
    assert offsets_for_times(cli_broker, {("times", 0): BASE_TS + 321_500}) == {("times", 0): 322}  # between
    assert offsets_for_times(cli_broker, {("times", 0): BASE_TS + 10**9}) == {("times", 0): None}  # after all


def test_a_broker_restarted_on_its_data_keeps_records_and_committed_offsets(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path / "kafka") as broker:
        create_topics(broker.bootstrap, {"kept": TopicSpec(partitions=2)})
        produce(broker.bootstrap, "kept", [(f"k{i}", {"i": i}) for i in range(300)])
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kept-group"})
        consumer.commit(offsets=[TopicPartition("kept", 0, 7)], asynchronous=False)
        consumer.close()
        port = broker.port
        broker.restart(crash=True)  # SIGKILL: what the log recovers is what was acknowledged
        assert broker.port == port
        assert len(read_topic(broker.bootstrap, "kept")) == 300
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kept-group"})
        try:
            assert consumer.committed([TopicPartition("kept", 0)], timeout=30)[0].offset == 7
        finally:
            consumer.close()


def test_free_ports_are_distinct_and_avoid_the_ports_given() -> None:
    """Ports are chosen with every socket still open, so the kernel cannot hand one out twice (a broker once
    got the same port for two listeners and did not start); a given port is never chosen again."""
    taken = free_port()
    ports = free_ports(40, avoid={taken})
    assert len(set(ports)) == 40 and taken not in ports
    broker = EmbeddedBroker(port=taken, advertised_port=taken + 1 if taken < 65535 else taken - 1)
    try:
        listeners = {broker.port, broker.controller_port, broker.internal_port}
        assert len(listeners) == 3 and broker.advertised_port not in {broker.controller_port, broker.internal_port}
    finally:
        broker.stop()
