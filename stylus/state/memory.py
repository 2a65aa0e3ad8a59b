"""`ctx.state` of a backfill task: a plain dict.

A backfill task keeps all of a partition's state in memory and saves it once, when its unit ends, and any
failure fails the whole task (Spark runs it again from its start). The stream's `StateMap` machinery (a read
cache over RocksDB, dirty keys between checkpoints, a per-record undo journal) buys nothing there, and its
Python-level `get` and `[]=` cost more than twice a dict's. As a dict subclass, every lookup and write stays
in C.

What differs from `StateMap`, and why that is safe where it is used:
- keys are checked to be `str` when the unit ends (`check_keys`), not at each write: the task fails with
  the TypeError the stream raises at the write, as a backfill fails on any record the stream would refuse;
- nothing is journaled and `rollback` undoes nothing: only an engine whose every failure ends the run
  (`Engine.atomic = False` with `RaiseFailures`, as a backfill task's) may be given this state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stylus.state.store import ColumnAccess, encode_value, key_type_error, state_key


class MemoryState(ColumnAccess, dict[str, Any]):
    __slots__ = ("_saved", "_undo")

    def __init__(self) -> None:
        super().__init__()
        self._saved: set[str] = set()  # keys the last save wrote: deleted since, the next save deletes them
        self._undo: list[Any] = []  # stays empty: see the module docstring

    def get_many(self, keys: Sequence[str], default: Any = None) -> list[Any]:
        """As `StateMap.get_many`."""
        get = self.get
        return [get(key, default) for key in keys]

    def set_many(self, mapping: Mapping[str, Any]) -> None:
        """As `StateMap.set_many`."""
        self.update(mapping)

    def _put_many(self, keys: Iterable[str], items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        self.update(items)

    def scan_prefix(self, prefix: str) -> list[tuple[str, Any]]:
        """Entries whose key starts with `prefix`, in key order, as `StateMap.scan_prefix`."""
        return sorted(((k, v) for k, v in self.items() if k.startswith(prefix)), key=lambda item: item[0])

    def changes(self) -> dict[bytes, bytes | None]:
        """The whole state as KV changes: a unit saves once, at its end."""
        self.check_keys()
        out: dict[bytes, bytes | None] = {state_key(key): encode_value(value) for key, value in self.items()}
        for key in self._saved.difference(self):
            out[state_key(key)] = None
        return out

    def check_keys(self) -> None:
        """Raise the TypeError the stream raises at the write, for the first key that is not a `str`."""
        for key in self:
            if type(key) is not str and not isinstance(key, str):
                raise key_type_error(key)

    def take_changes(self) -> dict[bytes, bytes | None]:
        changes = self.changes()
        self.mark_clean()
        return changes

    def journal(self) -> list[Any]:
        return self._undo

    def rollback(self) -> None:
        """Nothing to undo: a failure ends the run that uses this state (module docstring)."""

    def evict(self) -> None:
        """Every value stays in memory until the task ends."""

    def mark_clean(self) -> None:
        self._saved = set(self)

    def discard_changes(self) -> None:
        raise RuntimeError("a backfill task's state has no checkpoint to go back to")

    @property
    def dirty(self) -> bool:
        """Conservatively: anything held, or deleted since the last save."""
        return bool(self) or bool(self._saved)

