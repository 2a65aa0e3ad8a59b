"""Per-partition state: RocksDB (or memory) holding user state, input offsets and timers together."""

from stylus.state.kv import KV, MemoryKV, RocksKV
from stylus.state.store import PartitionStore, StateMap

__all__ = ["KV", "MemoryKV", "PartitionStore", "RocksKV", "StateMap"]
