"""Where `ctx.emit` goes: a Kafka producer in streaming, a list in backfill and tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Sink(Protocol):
    def __call__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None
    ) -> None: ...


class Output:
    __slots__ = ("headers", "key", "timestamp", "topic", "value")

    def __init__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers

    def as_tuple(self) -> tuple[str, str | None, Any, int]:
        return (self.topic, self.key, self.value, self.timestamp)

    def __repr__(self) -> str:
        return f"Output({self.topic!r}, key={self.key!r}, value={self.value!r}, ts={self.timestamp})"


class CollectingSink:
    """Keeps decoded outputs in memory, checking the topic is a declared output."""

    def __init__(self, outputs: tuple[str, ...] | list[str]) -> None:
        self.allowed = set(outputs)
        self.outputs: list[Output] = []

    def __call__(
        self, topic: str, key: str | None, value: Any, timestamp: int, headers: Mapping[str, Any] | None
    ) -> None:
        if topic not in self.allowed:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        self.outputs.append(Output(topic, key, value, timestamp, headers))
