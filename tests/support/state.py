"""Read a processor's RocksDB state from its state dir after the process has exited."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore


def summed_state(state_dir: Path, pipeline: str, processor: str, topic: str, partitions: int) -> Counter[str]:
    """Numeric state values summed over the input partitions (one RocksDB each)."""
    total: Counter[str] = Counter()
    for partition in range(partitions):
        path = state_dir / pipeline / processor / f"{topic}-{partition}"
        if path.exists():
            store = PartitionStore(RocksKV(path))
            try:
                total.update(dict(store.state.items()))
            finally:
                store.close()
    return total
