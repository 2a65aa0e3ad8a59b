"""A stand-in for `confluent_kafka.Message` built from plain values (backfill tasks, tests)."""

from __future__ import annotations

from typing import Any


class RawMessage:
    """Has the accessor methods the engine reads from a confluent-kafka Message."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._timestamp = timestamp
        self._headers = headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)  # TIMESTAMP_CREATE_TIME

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def error(self) -> Any:
        return None
