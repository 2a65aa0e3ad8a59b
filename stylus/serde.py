"""Topic serdes: json (default), string, bytes. Never pickle: topic data is untrusted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes], Any]


def _json_encode(value: Any) -> bytes:
    # plain dumps is much faster than with an option; non-str dict keys (rare) take the second call
    try:
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def _string_encode(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def _string_decode(data: bytes) -> str:
    return data.decode("utf-8")


def _bytes_encode(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"a bytes topic takes bytes or str, not {type(value).__name__}")


def _bytes_decode(data: bytes) -> bytes:
    return data


SERDES: dict[str, tuple[Encoder, Decoder]] = {
    "json": (_json_encode, orjson.loads),
    "string": (_string_encode, _string_decode),
    "bytes": (_bytes_encode, _bytes_decode),
}


def encoder(name: str) -> Encoder:
    return SERDES[name][0]


def decoder(name: str) -> Decoder:
    return SERDES[name][1]


def encode_key(key: Any) -> bytes | None:
    """Keys travel as UTF-8 text so every Kafka client partitions them the same way."""
    if key is None:
        return None
    if isinstance(key, bytes):
        return key
    return str(key).encode("utf-8", "surrogateescape")  # keys read with surrogateescape round-trip


def decode_key(data: bytes | None) -> str | None:
    if data is None:
        return None
    return data.decode("utf-8", errors="surrogateescape")
