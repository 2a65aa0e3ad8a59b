"""Watermark control records: how an upstream instance's watermark travels to downstream stages.

Each publishing instance writes, to every partition of every output topic read inside the pipeline,
a record with header `stylus.watermark` and a JSON value
    {"proc": processor, "inst": instance id, "parts": ["topic:partition", ...], "wm": watermark}.
Because it is written to the same partitions after the data it covers (through the same producer,
inside the same transaction when there is one), a consumer that reads it has already read every
record that instance wrote before it: a downstream partition's watermark is the minimum over the
upstream processors' input partitions of the latest mark reported for each. Control records are
never handed to processors nor returned by `stylus.kafka.reader`; they do advance input offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import orjson

from stylus.config.model import Pipeline
from stylus.eventtime.clock import NO_TIME
from stylus.eventtime.topology import control_targets, part_id

HEADER = "stylus.watermark"
HEADERS = [(HEADER, b"1")]


def is_control(headers: Any) -> bool:
    """True for a control record; `headers` as confluent-kafka returns them (list of pairs or None)."""
    if not headers:
        return False
    return any(name == HEADER for name, _ in headers)


def encode(processor: str, instance: str, parts: Iterable[str], watermark: int) -> bytes:
    return orjson.dumps({"proc": processor, "inst": instance, "parts": sorted(parts), "wm": int(watermark)})


def decode(raw: bytes | None) -> tuple[str, list[str], int] | None:
    """(processor, partitions, watermark), or None for a malformed record (ignored, never fatal)."""
    try:
        doc = orjson.loads(raw or b"")
        return str(doc["proc"]), [str(p) for p in doc["parts"]], int(doc["wm"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


class WatermarkPublisher:
    """Writes the instance's watermark when it has moved, at most every `interval` seconds."""

    def __init__(self, pipeline: Pipeline, name: str, instance: str, producer: Any,
                 interval: float = 0.1) -> None:
        self.name = name
        self.instance = instance
        self.producer = producer
        self.interval = interval
        self.targets = control_targets(pipeline, name)
        self.published = NO_TIME
        self.published_parts: frozenset[str] = frozenset()
        self.sent = 0
        self._next = 0.0

    def maybe_publish(self, watermark: int, partitions: Iterable[tuple[str, int]], *, held: int = 0,
                      now: float | None = None, force: bool = False) -> bool:
        """Publish if the watermark or the partition set changed. Held (not yet released) output
        must reach Kafka first, or downstream could pass it: with `held` > 0 nothing is written."""
        if watermark == NO_TIME or held or not self.targets:
            return False
        now = time.monotonic() if now is None else now
        if now < self._next and not force:
            return False
        parts = frozenset(part_id(t, p) for t, p in partitions)
        if watermark <= self.published and parts <= self.published_parts:
            return False
        value = encode(self.name, self.instance, parts, watermark)
        for topic, partition in self.targets:
            while True:
                try:
                    self.producer.produce(topic, value, None, partition=partition, headers=HEADERS)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        # the mark last sent, not the highest: after a partition joins behind the others the watermark goes back
        # (Engine._joined), and its rise from there must be sent again for the parts that joined
        self.published = watermark
        self.published_parts = parts
        self.sent += 1
        self._next = now + self.interval
        return True
