"""Rebalance callbacks subscribed through stylus.kafka.callbacks: what they raise, `consume()` raises as an
exception the caller can catch."""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.kafka.callbacks import subscribe
from stylus.kafka.producer import close_producer
from tests.support.kafka import produce


def test_a_fatal_client_error_raised_in_a_rebalance_callback_reaches_the_caller_as_an_exception(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A fenced transactional producer flushed inside `on_assign` raises its fatal error there. Subscribed
    directly, confluent-kafka (Python < 3.12) would raise it from `consume()` as a `KafkaError`, which no
    `except` clause catches (the worker thread died, and the process exited 0)."""
    topic = topic_factory("callbacks")
    produce(bootstrap, topic, [("k", {"i": 1})])
    transactional_id = f"zombie-{uuid.uuid4().hex[:8]}"
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    successor.init_transactions(30)  # fences the zombie
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    with pytest.raises(KafkaException):  # the zombie learns it is fenced
        zombie.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 10)
    assigned: list[int] = []

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        assigned.append(len(partitions))
        zombie.flush(5)  # reports the fatal error once more

    subscribe(consumer, [topic], on_assign=on_assign, on_revoke=lambda *_: None)
    try:
        deadline = time.monotonic() + 30
        with pytest.raises(KafkaException) as raised:
            while time.monotonic() < deadline:
                consumer.consume(10, 0.2)
        error: KafkaError = raised.value.args[0]
        assert assigned and error.fatal() and error.code() == KafkaError._FENCED
    finally:
        consumer.close()
        close_producer(successor)
        with warnings.catch_warnings():  # closing a fenced producer warns that it could not abort
            warnings.simplefilter("ignore", RuntimeWarning)
            close_producer(zombie)
