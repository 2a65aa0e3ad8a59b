"""A table's bulk load from Parquet (a Spark or warehouse output: the paper's "Hive table once a day").

The snapshot is the table's base: its rows are loaded first, then the table's topic from its start is
applied over them (topic records always win). A copy remembers which snapshot it started from (file names,
sizes and modification times); a different snapshot makes the copy again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from stylus.tables.store import Codec, TableStore

log = logging.getLogger(__name__)

BATCH_ROWS = 65_536


def snapshot_files(path: Path) -> list[Path]:
    return sorted(path.rglob("*.parquet")) if path.is_dir() else [path]


def fingerprint(path: Path) -> str:
    parts = []
    for file in snapshot_files(path):
        stat = file.stat()
        parts.append(f"{file}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def load_snapshot(store: TableStore, codec: Codec, path: Path, keep: Callable[[bytes], bool]) -> int:
    """Load the rows whose key `keep` accepts into an empty `store`; entries are stamped with the snapshot's
    modification time (for the TTL). Returns the rows loaded."""
    from stylus.extras import require

    require("archive", "a table's Parquet snapshot (`tables.<name>.parquet`)")
    import pyarrow.parquet as pq

    files = snapshot_files(path)
    stamp = int(max((f.stat().st_mtime for f in files), default=0) * 1000)
    loaded = 0
    for file in files:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=BATCH_ROWS):
            entries: dict[bytes, bytes | None] = {}
            for row in batch.to_pylist():
                change = codec.row(row, stamp)
                if change is not None and keep(change[0]):
                    entries[change[0]] = change[1]
            store.apply(entries, {})
            loaded += len(entries)
    log.info("loaded %d rows from the Parquet snapshot %s", loaded, path)
    return loaded


def prepared(store: TableStore, codec: Codec, path: Path | None, keep: Callable[[bytes], bool]) -> TableStore:
    """`store`, started from the snapshot at `path` (made again from it when it changed); as is without one."""
    if path is None:
        return store
    mark = fingerprint(path)
    if store.source() == mark:
        return store
    if not store.empty():
        log.info("the Parquet snapshot %s changed: making the table copy %s again", path, store.path)
        store = store.reset()
    load_snapshot(store, codec, path, keep)
    store.set_source(mark)
    return store
