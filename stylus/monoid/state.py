"""`ctx.state` of a monoid processor whose state lives in a remote database.

It holds only the deltas combined since the last checkpoint (from the monoid's identity); reads go to
the database and add the pending delta, so the whole state is never loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from stylus.state.kv import MemoryKV
from stylus.state.store import StateMap

MISSING: Any = object()


class RemoteValues(Protocol):
    """Read access to the merged (committed) values."""

    def read(self, key: str) -> Any: ...  # the stored value, or MISSING

    def scan(self) -> Iterator[tuple[str, Any]]: ...  # all stored (key, value), by key


class DeltaState(StateMap):
    """Pending deltas of one input partition. Writes go through `add`; `ctx.state[k] = v` is refused
    because an absolute value cannot be merged with what other partitions add concurrently."""

    __slots__ = ("_combine", "_journal", "_remote", "_zero", "pending")

    def __init__(self, remote: RemoteValues, zero: Callable[[], Any], combine: Callable[[Any, Any], Any]) -> None:
        super().__init__(MemoryKV(), capacity=0)
        self._remote = remote
        self._zero = zero
        self._combine = combine
        self.pending: dict[str, Any] = {}
        self._journal: dict[str, tuple[Any, bool]] | None = None

    def add(self, key: str, delta: Any) -> None:
        """Combine `delta` into the key's pending delta (which starts from `zero()`)."""
        if not isinstance(key, str):
            raise TypeError(f"state keys are str, not {type(key).__name__} ({key!r})")
        pending = self.pending
        current = pending.get(key, MISSING)
        journal = self._journal
        if journal is not None and key not in journal:
            journal[key] = (current, False)
        pending[key] = self._combine(self._zero() if current is MISSING else current, delta)

    def get(self, key: str, default: Any = None) -> Any:
        """The committed value combined with the pending delta: one database read."""
        stored = self._remote.read(key)
        pending = self.pending.get(key, MISSING)
        if stored is MISSING and pending is MISSING:
            return default
        base = self._zero() if stored is MISSING else stored
        return base if pending is MISSING else self._combine(base, pending)

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("monoid state with a remote backend changes only through deltas: return (key, delta) "
                        "from map() instead of assigning ctx.state[key]")

    def __delitem__(self, key: str) -> None:
        raise TypeError("monoid state with a remote backend cannot delete keys")

    def _scan(self) -> Iterator[tuple[str, Any]]:
        seen: set[str] = set()
        for key, stored in self._remote.scan():
            seen.add(key)
            pending = self.pending.get(key, MISSING)
            yield key, stored if pending is MISSING else self._combine(stored, pending)
        for key in sorted(self.pending.keys() - seen):
            yield key, self._combine(self._zero(), self.pending[key])

    def journal(self) -> dict[str, tuple[Any, bool]]:
        """Remember each key's pending delta before a record's first `add`, so that a record that raises
        can be undone (the engine clears the journal after each record). Needs a non-mutating combine."""
        if self._journal is None:
            self._journal = {}
        return self._journal

    def rollback(self) -> None:
        journal = self._journal
        if not journal:
            return
        for key, (previous, _) in journal.items():
            if previous is MISSING:
                self.pending.pop(key, None)
            else:
                self.pending[key] = previous
        journal.clear()

    def changes(self) -> dict[bytes, bytes | None]:
        return {}

    def mark_clean(self) -> None:
        self.pending = {}
        if self._journal:
            self._journal.clear()

    def discard_changes(self) -> None:
        self.mark_clean()

    @property
    def dirty(self) -> bool:
        return bool(self.pending)
