"""A table's local copy: the latest value per key of some partitions of its topic, with the offsets it covers.

Key layout in the KV (one RocksDB per table for a global table, per table partition for a partitioned one):
    b"v" + key                 entry: the record's timestamp (8 bytes, big-endian) + the value bytes
    b"\\x00o" + partition(4)    next offset of that topic partition that the entries cover
    b"\\x00s"                   the fingerprint of the Parquet snapshot the entries started from
Entries and offsets land in one write batch, so after a crash the copy is exactly the topic up to its
offsets, and catching up reads only what came after them: bounded by what changed, not by the topic's
history (docs/tables.md, "Catch-up").
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from stylus.config.model import TableSpec
from stylus.serde import decoder, encode_key
from stylus.state.kv import KV, MemoryKV, RocksKV

_ENTRY = b"v"
_OFFSET = b"\x00o"
_SOURCE = b"\x00s"
_TS = struct.Struct(">q")
_PART = struct.Struct(">i")


def _offset_key(partition: int) -> bytes:
    return _OFFSET + _PART.pack(partition)


class TableStore:
    """Entries and covered offsets of one table copy; writes are whole batches, reads are point lookups."""

    def __init__(self, kv: KV, path: Path | None = None) -> None:
        self.kv = kv
        self.path = path  # a RocksDB copy's directory (reset removes it); None: in memory

    def offset(self, partition: int) -> int | None:
        """The next offset of `partition` this copy has not applied (None: nothing applied yet)."""
        raw = self.kv.get(_offset_key(partition))
        return None if raw is None else int(_TS.unpack(raw)[0])

    def apply(self, entries: Mapping[bytes, bytes | None], offsets: Mapping[int, int]) -> None:
        """One atomic batch: entries (key -> encoded entry, None deletes) and the partitions' next offsets."""
        changes: dict[bytes, bytes | None] = {_ENTRY + key: value for key, value in entries.items()}
        for partition, offset in offsets.items():
            changes[_offset_key(partition)] = _TS.pack(offset)
        self.kv.write(changes)

    def get(self, key: bytes) -> tuple[int, bytes] | None:
        """(timestamp, value bytes) of `key`, or None."""
        raw = self.kv.get(_ENTRY + key)
        return None if raw is None else (_TS.unpack_from(raw)[0], raw[8:])

    def entries(self) -> Iterator[tuple[bytes, int, bytes]]:
        """Every (key, timestamp, value bytes), in key order."""
        for key, raw in self.kv.scan(_ENTRY):
            yield key[1:], _TS.unpack_from(raw)[0], raw[8:]

    def empty(self) -> bool:
        return next(self.kv.scan(b""), None) is None

    def source(self) -> str | None:
        raw = self.kv.get(_SOURCE)
        return None if raw is None else raw.decode()

    def set_source(self, fingerprint: str) -> None:
        self.kv.write({_SOURCE: fingerprint.encode()})

    def reset(self) -> TableStore:
        """Forget everything (a new Parquet snapshot, or records the copy needs were deleted by retention):
        a RocksDB copy is removed and made again; returns the store to use from now on."""
        self.kv.close()
        if self.path is None:
            return TableStore(MemoryKV())
        shutil.rmtree(self.path, ignore_errors=True)
        return open_store(self.path)

    def close(self) -> None:
        self.kv.close()


def open_store(path: Path) -> TableStore:
    """A RocksDB copy at `path`, made when missing. It waits briefly for the lock: a partition moving between
    two instances on one machine is closed by one before the other opens it."""
    return TableStore(RocksKV(path, lock_wait=30.0), path)


def encode_entry(timestamp: int, value: bytes) -> bytes:
    return _TS.pack(timestamp) + value


class Codec:
    """A table's records as entries (the key, the projected value) and its entries as values again."""

    __slots__ = ("decode", "field", "project", "ttl_ms")

    def __init__(self, spec: TableSpec, serde: str) -> None:
        self.field = spec.key  # the value field holding the key, for records without a Kafka key
        self.project = spec.value
        self.decode = decoder(serde)
        self.ttl_ms = None if spec.ttl is None else int(spec.ttl * 1000)

    def entry(self, key: bytes | None, value: bytes | None, timestamp: int) -> tuple[bytes, bytes | None] | None:
        """(key, encoded entry or None for a tombstone) of one record; None: a record the table ignores (no key
        anywhere, or a value that is not an object when fields are named)."""
        if value is None:
            return None if key is None else (key, None)
        if key is None and self.field is None and self.project is None:
            return None
        if key is not None and self.field is None and self.project is None:
            return key, encode_entry(timestamp, value)
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(decoded, dict):
            return None
        if key is None:
            found = decoded.get(self.field) if self.field is not None else None
            if found is None:
                return None
            key = encode_key(found)
            assert key is not None
        if self.project is not None:
            value = orjson.dumps({k: decoded.get(k) for k in self.project})
        return key, encode_entry(timestamp, value)

    def row(self, row: Mapping[str, Any], timestamp: int) -> tuple[bytes, bytes] | None:
        """A bulk-loaded row (a Parquet row as a dict) as (key, entry); None without a key."""
        assert self.field is not None
        found = row.get(self.field)
        if found is None:
            return None
        key = encode_key(found)
        assert key is not None
        kept = row if self.project is None else {k: row.get(k) for k in self.project}
        return key, encode_entry(timestamp, orjson.dumps(kept, option=orjson.OPT_NON_STR_KEYS))

    def value(self, found: tuple[int, bytes] | None, now_ms: int | None) -> Any:
        """The decoded value of a stored entry, or None when absent or older than the TTL at `now_ms`."""
        if found is None:
            return None
        timestamp, data = found
        if self.ttl_ms is not None and now_ms is not None and now_ms - timestamp > self.ttl_ms:
            return None
        return self.decode(data)


def grouped(changes: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    """Records of one partition in offset order as one batch: the last change of each key wins."""
    batch: dict[bytes, bytes | None] = {}
    for key, value in changes:
        batch[key] = value
    return batch
