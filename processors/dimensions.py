"""A file-backed dimension table: an index of line offsets, a seek per miss, an LRU cache in front.

Dimension tables can be far larger than memory, so only `dim_id -> byte offset` is kept (built by
one scan at open); rows are read from the file on demand and the hottest ones stay in the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

import orjson

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "dimensions.jsonl"


class DimensionTable:
    """Rows of a JSON-lines file keyed by `key_field`, looked up through an LRU cache of `cache_size` rows."""

    def __init__(self, path: str | Path = DEFAULT_PATH, *, cache_size: int = 1000, key_field: str = "dim_id") -> None:
        self.path = Path(path)
        self.cache_size = max(0, int(cache_size))
        self.key_field = key_field
        self.cache: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.reads = 0
        self._file: BinaryIO = self.path.open("rb")
        self.index: dict[str, int] = self._build_index()

    def _build_index(self) -> dict[str, int]:
        index: dict[str, int] = {}
        offset = 0
        self._file.seek(0)
        for line in self._file:
            if line.strip():
                row = orjson.loads(line)
                index[str(row[self.key_field])] = offset
            offset += len(line)
        return index

    def _read(self, offset: int) -> dict[str, Any]:
        self.reads += 1
        self._file.seek(offset)
        row: dict[str, Any] = orjson.loads(self._file.readline())
        return row

    def get(self, key: Any) -> dict[str, Any] | None:
        """The row for `key`, or None when the table has no such row (cached too)."""
        skey = str(key)
        cache = self.cache
        if skey in cache:
            self.hits += 1
            cache.move_to_end(skey)
            return cache[skey]
        self.misses += 1
        offset = self.index.get(skey)
        row = None if offset is None else self._read(offset)
        if self.cache_size:
            cache[skey] = row
            if len(cache) > self.cache_size:
                cache.popitem(last=False)
        return row

    def __len__(self) -> int:
        return len(self.index)

    def close(self) -> None:
        self._file.close()
