"""Consumer callbacks whose exceptions reach the caller of `consume()` as exceptions.

confluent-kafka hands an exception raised inside a rebalance or commit callback back to the caller of
`consume()`/`poll()`. On Python before 3.12 it raises it again with the class of the exception's *value*. A
fatal client error raised inside the callback (the `flush` of a fenced transactional producer, say) is still
unnormalized there: its value is a `KafkaError`, which is not an exception class. No `except` clause, not even
`except BaseException`, catches what `consume()` then raises; the worker thread dies with a traceback, no
error is recorded, and the process exits 0. Catching and raising again inside the callback hands
confluent-kafka the normalized `KafkaException`, which every caller can catch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer

T = TypeVar("T")


def surfacing(callback: Callable[..., T]) -> Callable[..., T]:
    """`callback`, its exceptions normalized before they go back into confluent-kafka."""

    @functools.wraps(callback)
    def call(*args: Any) -> T:
        try:
            return callback(*args)
        except BaseException:  # entering the handler normalized it: raised again, it is an exception instance
            raise

    return call


def subscribe(consumer: Consumer, topics: list[str], *, on_assign: Callable[..., Any],
              on_revoke: Callable[..., Any], on_lost: Callable[..., Any] | None = None) -> None:
    """`consumer.subscribe` with every rebalance callback `surfacing`."""
    callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
    consumer.subscribe(topics, **{name: surfacing(cb) for name, cb in callbacks.items() if cb is not None})
