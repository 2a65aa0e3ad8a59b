"""Which Kafka errors are the client's own failure (stylus/kafka/errors.py), on errors the real broker causes."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from stylus.kafka.errors import client_failed
from tests.support.kafka import fenced_producer_errors


def test_a_fenced_producers_errors_are_the_clients_failure_and_a_records_are_not(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("errors")
    served, refused = fenced_producer_errors(bootstrap, topic)
    assert served.args[0].code() == KafkaError._FENCED and client_failed(served)
    assert refused.args[0].code() == KafkaError._FATAL and client_failed(refused)
    try:  # what a delivery-report callback raises when called with the fence pending (confluent-kafka)
        raise SystemError("<method 'topic'> returned a result with an exception set") from served
    except SystemError as exc:
        assert client_failed(exc)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1000})
    try:
        producer.produce(topic, b"x" * 2000)  # one record's error: the producer goes on
    except KafkaException as exc:
        too_large = exc
    else:
        raise AssertionError("an oversized record was taken")
    assert too_large.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE and not client_failed(too_large)
    assert not client_failed(SystemError("a bug")) and not client_failed(BufferError())
    producer.produce(topic, b"fine")
    assert producer.flush(10) == 0
