"""Two key-value backends behind one small interface: RocksDB on disk, a dict in memory (backfill, tests)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from rocksdict import DBCompressionType, Options, Rdict, WriteBatch


class KV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...
    def write(self, changes: Mapping[bytes, bytes | None]) -> None: ...
    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def close(self) -> None: ...


class MemoryKV:
    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        get = self.data.get
        return [get(key) for key in keys]

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(k for k in self.data if k.startswith(prefix)):
            yield key, self.data[key]

    def close(self) -> None:
        pass


class StoreLocked(RuntimeError):
    pass


class RocksKV:
    """One RocksDB database. `write` is a single atomic WriteBatch: the heart of every checkpoint."""

    def __init__(self, path: str | Path, *, lock_wait: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_compression_type(DBCompressionType.lz4())
        deadline = time.monotonic() + lock_wait
        while True:
            try:
                self.db = Rdict(str(self.path), options)
                break
            except Exception as exc:  # another instance still holds the LOCK while it hands over
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise StoreLocked(f"cannot open state {self.path}: {exc}") from exc
                time.sleep(0.1)

    def get(self, key: bytes) -> bytes | None:
        value = self.db.get(key)
        return value if value is None else bytes(value)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """One RocksDB multi-get (batch processors read the keys a batch touches at once)."""
        if not keys:
            return []
        found: Any = self.db.get(keys)  # type: ignore[arg-type]  # a list of keys: one multi-get
        return [None if value is None else bytes(value) for value in found]

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        if not changes:
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self.db.write(batch)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.db.items(from_key=prefix):
            if not (isinstance(key, bytes) and key.startswith(prefix)):
                break
            yield key, bytes(value)

    def flush(self) -> None:
        self.db.flush(wait=True)

    def close(self) -> None:
        """Idempotent: after a failed write (e.g. disk full) the close on the error path may be the second one."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        self.db.close()
