"""Produce and read test data with the real client."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Producer

from stylus.core.message import RawMessage
from stylus.kafka.reader import read_topic


def produce(bootstrap: str, topic: str, records: Iterable[tuple[str | None, Any]] | Iterable[dict[str, Any]],
            *, timestamps: Iterable[int] | None = None, raw: bool = False) -> int:
    """Produce (key, value) pairs (values JSON-encoded unless raw) keyed with the Java partitioner."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random",
                         "enable.idempotence": True, "compression.type": "lz4"})
    ts_iter = iter(timestamps) if timestamps is not None else None
    count = 0
    for item in records:
        key, value = item if isinstance(item, tuple) else (None, item)
        data = value if raw else json.dumps(value).encode()
        kwargs: dict[str, Any] = {}
        if ts_iter is not None:
            kwargs["timestamp"] = next(ts_iter)
        while True:
            try:
                producer.produce(topic, data, key.encode() if isinstance(key, str) else key, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    assert producer.flush(30) == 0
    return count


def read_json(bootstrap: str, topic: str, isolation: str = "read_committed",
              timeout: float = 30.0) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in read_topic(bootstrap, topic, isolation=isolation, timeout=timeout)
            if m.value() is not None]


def read_raw(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[RawMessage]:
    return read_topic(bootstrap, topic, isolation=isolation)
