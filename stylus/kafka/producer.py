"""Ending a producer's life on purpose."""

from __future__ import annotations

from confluent_kafka import Producer


def close_producer(producer: Producer) -> None:
    """Release a producer's threads and connections now rather than at garbage collection (a worker kept
    by its runner otherwise reconnects to a stopped broker forever). What is still undelivered was never
    covered by a checkpoint, so it is dropped: `close()` would otherwise wait for it, without end if the
    broker is gone."""
    producer.purge()
    producer.close()
