"""What `TestDriver.outputs` returns: decoded records, compared by value so tests can assert on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stylus.config.model import Pipeline
from stylus.serde import decode_key, decoder

#: Headers that name where a dead letter or a late record came from: their topic's serde decodes its value.
_SOURCE_HEADERS = ("stylus.source.topic", "stylus.late.source")

@dataclass(frozen=True)
class Record:
    """One record as a consumer of the topic reads it: the value decoded by the topic's serde."""

    key: str | None
    value: Any
    timestamp: int
    topic: str
    partition: int
    offset: int
    headers: Mapping[str, bytes] = field(default_factory=dict)


def decode_value(pipeline: Pipeline, topic: str, raw: bytes | None, headers: Mapping[str, bytes]) -> Any:
    """By the topic's serde; a dead-letter or late topic (not declared) by its source topic's serde, and the
    raw bytes when they do not decode (a dead letter that failed to decode in the first place)."""
    if raw is None:
        return None
    spec = pipeline.topics.get(topic)
    serde = spec.serde if spec is not None else _source_serde(pipeline, headers)
    try:
        return decoder(serde)(raw)
    except Exception:
        return raw


def _source_serde(pipeline: Pipeline, headers: Mapping[str, bytes]) -> str:
    for name in _SOURCE_HEADERS:
        source = headers.get(name)
        if source is not None:
            topic = source.decode("utf-8", "replace").split("[", 1)[0]  # `topic[p]@o` for late records
            if topic in pipeline.topics:
                return pipeline.topics[topic].serde
    return "bytes"


def decoded(pipeline: Pipeline, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
            timestamp: int, headers: list[tuple[str, bytes]] | None) -> Record:
    names = dict(headers or ())  # a repeated header: the newest wins, as `stylus dlq` reads them
    return Record(decode_key(key), decode_value(pipeline, topic, value, names), timestamp, topic, partition,
                  offset, names)
