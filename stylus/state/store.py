"""The state of one input partition: user state, the next input offset, timers and staged changes.

Key layout in the KV (one database per input partition):
    b"s" + key           user state, value JSON (orjson)
    b"t" + ts(8, BE) + key   a timer; value empty
    b"\\x00o"             next input offset to read (8 bytes, big-endian)
    b"\\x00m" + name      framework metadata (JSON)
    b"\\x00x"             a staged checkpoint (exactly-once output): offset + state changes, applied or
                         discarded on recovery depending on whether its Kafka transaction committed
    b"\\x00y"             the staged checkpoint's id, which its transaction commits as the offset's metadata
    b"d" + bucket + id, b"\\x00d"   the duplicate-suppression seen-set (stylus/state/seen.py, `attach`)
Writes are buffered in memory and land in one atomic batch at `commit`, so state and offsets
saved together can never disagree.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from stylus.state.kv import KV

if TYPE_CHECKING:
    from stylus.state.memory import MemoryState

_STATE = b"s"
_TIMER = b"t"
_OFFSET_KEY = b"\x00o"
_META = b"\x00m"
_STAGED = b"\x00x"
_STAGED_ID = b"\x00y"
_MISSING: Any = object()
_DELETED: Any = object()
_BULK: Any = object()  # a journal entry's key: the entry is a `set_many` call's (keys, values before)
_TS = struct.Struct(">q")
_LEN = struct.Struct(">i")


def encode_changes(offset: int, changes: dict[bytes, bytes | None]) -> bytes:
    parts = [_TS.pack(offset)]
    for key, value in changes.items():
        parts.append(_LEN.pack(len(key)))
        parts.append(key)
        if value is None:
            parts.append(_LEN.pack(-1))
        else:
            parts.append(_LEN.pack(len(value)))
            parts.append(value)
    return b"".join(parts)


def decode_changes(blob: bytes) -> tuple[int, dict[bytes, bytes | None]]:
    offset = _TS.unpack_from(blob, 0)[0]
    pos = 8
    changes: dict[bytes, bytes | None] = {}
    while pos < len(blob):
        (klen,) = _LEN.unpack_from(blob, pos)
        key = blob[pos + 4 : pos + 4 + klen]
        pos += 4 + klen
        (vlen,) = _LEN.unpack_from(blob, pos)
        pos += 4
        if vlen < 0:
            changes[key] = None
        else:
            changes[key] = blob[pos : pos + vlen]
            pos += vlen
    return offset, changes


class Journal(Protocol):
    """What the engine does with a state's undo journal: test it for entries, clear it per record."""

    def __len__(self) -> int: ...
    def clear(self) -> None: ...


def encode_value(value: Any) -> bytes:
    """A state value as the KV holds it (JSON)."""
    try:  # plain dumps is much faster; the option only matters for non-str dict keys (same bytes otherwise)
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def state_key(key: str) -> bytes:
    """A user-state key as the KV holds it."""
    return _STATE + key.encode("utf-8", "surrogateescape")


def key_type_error(key: object) -> TypeError:
    return TypeError(f"state keys are str, not {type(key).__name__} ({key!r})")


class ColumnAccess:
    """`get_columns` / `set_columns`: a state's `get_many` and bulk write for values that are lists of one length,
    one column per position (both states of a batch processor: `StateMap`, and a backfill's `MemoryState`)."""

    __slots__ = ()

    if TYPE_CHECKING:
        def get_many(self, keys: Sequence[str], default: Any = None) -> list[Any]: ...

        def _put_many(self, keys: Iterable[str], items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None: ...

    def get_columns(self, keys: Sequence[str], default: Sequence[Any]) -> list[Any]:
        """`get_many` for values that are lists of one length (`[count, sum]`), one column per position:
        `default` (that length) for an absent key. A column of numbers is a NumPy array (int64 when all are
        ints, float64 when any is a float), any other a list. Spares a batch processor transposing the rows in
        Python (`zip(*rows)` costs more than the read)."""
        import numpy as np  # the `batch` extra's, as batch processors are

        rows = self.get_many(keys, default=default)
        width = len(default)
        numbers = all(type(d) in (int, float) for d in default)
        columns: list[Any] = []
        try:
            for position in range(width):
                items = list(map(itemgetter(position), rows))
                if numbers:
                    array = np.array(items) if items else np.array([], type(default[position]))
                    columns.append(array if array.dtype.kind in "if" else items)
                else:
                    columns.append(items)
        except (IndexError, KeyError, TypeError):
            for key, row in zip(keys, rows, strict=True):
                if not isinstance(row, (list, tuple)) or len(row) != width:
                    raise ValueError(f"state[{key!r}] is {row!r}, not a list of {width} like the default "
                                     f"{list(default)!r}: read it with `get_many`") from None
            raise
        return columns

    def set_columns(self, keys: Sequence[str], *columns: Sequence[Any]) -> None:
        """`state[keys[i]] = [columns[0][i], columns[1][i], ...]` for every key, in one call (`set_many`). A
        column may be a NumPy array (its items stored as Python numbers)."""
        if any(len(column) != len(keys) for column in columns):
            raise ValueError(f"set_columns: {len(keys):,} keys but columns of {[len(c) for c in columns]} values")
        lists = [column.tolist() if hasattr(column, "tolist") else column for column in columns]
        self._put_many(keys, zip(keys, zip(*lists, strict=True), strict=True))


class StateMap(ColumnAccess, MutableMapping[str, Any]):
    """`ctx.state`: reads go through a cache, writes are buffered until the next commit.

    Two dicts: `_values` holds what the KV holds (or a checkpoint in flight is writing), `_dirty` the writes
    since the last checkpoint. A write is then one dict store, its journal entry the key's previous unsaved
    value, and a rollback or a discard only touches `_dirty`: cheaper per read-and-write than one dict plus a
    set of dirty keys, on the hottest path of a stateful stream. The price: a read of a key not written since
    the last checkpoint looks in both."""

    __slots__ = ("_capacity", "_dirty", "_inflight", "_kv", "_undo", "_values")

    def __init__(self, kv: KV, capacity: int = 100_000) -> None:
        self._kv = kv
        self._values: dict[str, Any] = {}  # saved values (or _DELETED: known absent)
        self._dirty: dict[str, Any] = {}  # unsaved writes (or _DELETED: deleted)
        # keys a checkpoint took (`take_changes`) whose write may not have reached the KV yet (overlapped
        # checkpoints write on another thread; exactly-once output applies only after its commit): point
        # reads find them in the cache, scans must add them too, or a window closing meanwhile misses them
        self._inflight: set[str] = set()
        self._capacity = capacity
        self._undo: list[tuple[str, Any]] | None = None  # see journal()

    def get(self, key: str, default: Any = None) -> Any:
        value = self._dirty.get(key, _MISSING)  # the hot path: a key written since the last checkpoint
        if value is _MISSING:
            try:  # then a cached key (no exception, no method call)
                value = self._values[key]
            except KeyError:
                value = self._load(key)
        return default if value is _DELETED else value

    def _load(self, key: str) -> Any:
        if not isinstance(key, str):
            raise key_type_error(key)
        raw = self._kv.get(state_key(key))
        value = _DELETED if raw is None else orjson.loads(raw)
        self._values[key] = value
        return value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get_many(self, keys: Sequence[str], default: Any = None) -> list[Any]:
        """The values of `keys`, in order (`default` for an absent one): unsaved and cached values from memory,
        the rest in one multi-get from the KV. A batch processor reads every key its batch touches so."""
        dirty, values = self._dirty, self._values
        # unsaved, else cached, each pass in C: a key of a running aggregate was mostly written since the last
        # checkpoint, so one lookup finds it; the others are looked up in the cache
        out = list(map(dirty.get, keys, repeat(_MISSING))) if dirty else list(map(values.get, keys, repeat(_MISSING)))
        if dirty and _MISSING in out:
            unsaved = [i for i, value in enumerate(out) if value is _MISSING]
            for i, value in zip(unsaved, map(values.get, [keys[i] for i in unsaved], repeat(_MISSING)), strict=True):
                out[i] = value
        if _MISSING in out:
            load = [i for i, value in enumerate(out) if value is _MISSING]
            names = [keys[i] for i in load]
            for name in names:
                if not isinstance(name, str):
                    raise key_type_error(name)
            for i, name, raw in zip(load, names, self._kv.get_many([state_key(n) for n in names]), strict=True):
                out[i] = values[name] = _DELETED if raw is None else orjson.loads(raw)
        return [default if value is _DELETED else value for value in out] if _DELETED in out else out

    def set_many(self, mapping: Mapping[str, Any]) -> None:
        """`state[key] = value` for every item, in one call. Journaled as one entry (the keys and their unsaved
        values before), which `rollback` undoes as it undoes single writes."""
        self._put_many(mapping, mapping)

    def _put_many(self, keys: Iterable[str], items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Writes `items` (a mapping, or (key, value) pairs of `keys`) in one `dict.update`, journaled."""
        try:  # every key a str: joined in C, no per-key call
            "".join(keys)
        except TypeError:
            for key in keys:
                if not isinstance(key, str):
                    raise key_type_error(key) from None
        dirty = self._dirty
        undo = self._undo
        if undo is not None:
            names = list(keys)
            undo.append((_BULK, (names, list(map(dirty.get, names, repeat(_MISSING))))))
        dirty.update(items)

    def __setitem__(self, key: str, value: Any) -> None:
        if type(key) is not str and not isinstance(key, str):
            raise key_type_error(key)
        dirty = self._dirty
        undo = self._undo
        if undo is not None:  # every write is journaled; rollback replays the entries backwards
            undo.append((key, dirty.get(key, _MISSING)))
        dirty[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        dirty = self._dirty
        undo = self._undo
        if undo is not None:
            undo.append((key, dirty.get(key, _MISSING)))
        dirty[key] = _DELETED

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def _current(self, key: str, raw_value: bytes) -> Any:
        """The value of a key a KV scan found: the unsaved write, the cached one, or the scanned bytes."""
        value = self._dirty.get(key, _MISSING)
        if value is _MISSING:
            value = self._values.get(key, _MISSING)
        return orjson.loads(raw_value) if value is _MISSING else value

    def _scan(self) -> Iterator[tuple[str, Any]]:
        seen = set()
        for raw_key, raw_value in self._kv.scan(_STATE):
            key = raw_key[1:].decode("utf-8", "surrogateescape")
            seen.add(key)
            value = self._current(key, raw_value)
            if value is not _DELETED:
                yield key, value
        for key in sorted((self._dirty.keys() | self._inflight) - seen):
            value = self._dirty.get(key, _MISSING)
            if value is _MISSING:
                value = self._values.get(key, _DELETED)
            if value is not _DELETED:
                yield key, value

    def scan_prefix(self, prefix: str) -> list[tuple[str, Any]]:
        """Entries whose key starts with `prefix`, in key order, buffered writes included. Keys laid out
        behind a sortable prefix (stylus.windows) make this one contiguous RocksDB range read, and
        deleting what it returns is a range delete in the next checkpoint batch."""
        raw_prefix = _STATE + prefix.encode("utf-8", "surrogateescape")
        found: dict[str, Any] = {}
        for raw_key, raw_value in self._kv.scan(raw_prefix):
            key = raw_key[1:].decode("utf-8", "surrogateescape")
            found[key] = self._current(key, raw_value)
        values = self._values
        for key in self._inflight:  # written by a checkpoint still in flight: the KV may not show it yet
            if key.startswith(prefix) and key in values:
                found[key] = values[key]
        for key, value in self._dirty.items():  # unsaved writes, newest
            if key.startswith(prefix):
                found[key] = value
        return sorted(((k, v) for k, v in found.items() if v is not _DELETED), key=lambda item: item[0])

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        return self._scan()

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._scan())

    def __len__(self) -> int:
        return sum(1 for _ in self._scan())

    def changes(self) -> dict[bytes, bytes | None]:
        """The buffered writes as KV changes (JSON encoding happens here, once per checkpoint)."""
        return {state_key(key): None if value is _DELETED else encode_value(value)
                for key, value in self._dirty.items()}

    def journal(self) -> Journal:
        """Start remembering each key's unsaved value before each write, so a failing record's `[]=`/`del`
        can be undone (`rollback`). The engine clears it before each record. A list, appended to without a
        lookup: the cheapest journal for the common case, a record that succeeds.
        In-place changes to a value object read from the state are not seen: assign new values."""
        if self._undo is None:
            self._undo = []
        return self._undo

    def rollback(self) -> None:
        """Undo the writes journaled since the last clear (a record that raised), newest first, so each key
        ends with the unsaved value it had before the record's first write to it, or none."""
        undo = self._undo
        if not undo:
            return
        dirty = self._dirty
        for key, value in reversed(undo):
            # a `set_many` entry holds its keys and their values before (one key appears once in it)
            for k, v in zip(*value, strict=True) if key is _BULK else ((key, value),):
                if v is _MISSING:
                    dirty.pop(k, None)
                else:
                    dirty[k] = v
        undo.clear()

    def _settle(self) -> None:
        """The unsaved writes become the saved values (their write is taken or done)."""
        self._values.update(self._dirty)
        self._dirty.clear()
        if self._undo:
            self._undo.clear()

    def take_changes(self) -> dict[bytes, bytes | None]:
        """The buffered writes, and from now on they count as saved: a checkpoint snapshot. The values stay
        cached, so reads are right while the write is still in flight on another thread."""
        changes = self.changes()
        self._inflight.update(self._dirty)
        self._settle()
        return changes

    def evict(self) -> None:
        """Bound the cache once the writes it held are on disk (every checkpoint's write has landed when this
        is called); unsaved values are in `_dirty` and always stay."""
        self._inflight.clear()
        if len(self._values) > self._capacity:
            self._values = {}

    def mark_clean(self) -> None:
        self._settle()
        self.evict()

    def discard_changes(self) -> None:
        """Forget the unsaved writes, and the cached values of their keys: a key also written by a checkpoint
        that did not commit reads again from the KV."""
        if self._undo:
            self._undo.clear()
        values = self._values
        for key in self._dirty:
            values.pop(key, None)
        self._dirty.clear()

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)


class Timers:
    """Event-time timers of one partition: a heap in memory, persisted with the state."""

    def __init__(self, kv: KV) -> None:
        self._heap: list[tuple[int, str]] = []
        self._members: set[tuple[int, str]] = set()
        self._changes: dict[bytes, bytes | None] = {}
        self.added: list[tuple[int, str]] | None = None  # when a list: new timers are also appended to it
        for raw_key, _ in kv.scan(_TIMER):
            entry = (_TS.unpack_from(raw_key, 1)[0], raw_key[9:].decode("utf-8", "surrogateescape"))
            self._members.add(entry)
            self._heap.append(entry)
        heapq.heapify(self._heap)

    @staticmethod
    def _key(timestamp: int, key: str) -> bytes:
        return _TIMER + _TS.pack(timestamp) + key.encode("utf-8", "surrogateescape")

    def add(self, key: str, timestamp: int) -> None:
        entry = (int(timestamp), key)
        if entry in self._members:
            return
        if self.added is not None:
            self.added.append(entry)
        self._members.add(entry)
        heapq.heappush(self._heap, entry)
        self._changes[self._key(*entry)] = b""

    def pop_due(self, watermark: int) -> list[tuple[int, str]]:
        due = []
        while self._heap and self._heap[0][0] <= watermark:
            entry = heapq.heappop(self._heap)
            self._members.discard(entry)
            self._changes[self._key(*entry)] = None
            due.append(entry)
        return due

    def remove(self, key: str, timestamp: int) -> bool:
        """Take one timer out of the set (a catch-up replay firing a timer the old owner fired)."""
        entry = (int(timestamp), key)
        if entry not in self._members:
            return False
        self._members.discard(entry)
        self._heap.remove(entry)
        heapq.heapify(self._heap)
        self._changes[self._key(*entry)] = None
        return True

    def __contains__(self, entry: object) -> bool:
        """`(timestamp, key) in timers`."""
        return entry in self._members

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)

    def take_changes(self) -> dict[bytes, bytes | None]:
        changes, self._changes = self._changes, {}
        return changes

    @property
    def dirty(self) -> bool:
        return bool(self._changes)


class PartitionStore:
    """State, offsets and timers of one input partition in one KV."""

    # Other buffered writers whose `take_changes()` joins every state save (the dedup seen-set).
    extensions: tuple[Any, ...] = ()

    def attach(self, source: Any) -> None:
        """Save `source.take_changes()` in the same atomic batch as the state from now on."""
        self.extensions = (*self.extensions, source)

    def __init__(self, kv: KV, *, cache_entries: int = 100_000, state: MemoryState | None = None) -> None:
        """`state`: a backfill task's MemoryState (stylus/state/memory.py) instead of a StateMap over `kv`."""
        self.kv = kv
        self.state: StateMap | MemoryState = state if state is not None else StateMap(kv, cache_entries)
        self.timers = Timers(kv)
        self._meta_changes: dict[bytes, bytes | None] = {}  # set_meta: saved with the next state save

    # offsets ------------------------------------------------------------------------------
    OFFSET_KEY = _OFFSET_KEY  # where the offset the state belongs to is kept

    def stored_offset(self) -> int | None:
        raw = self.kv.get(_OFFSET_KEY)
        return None if raw is None else self.offset_of(raw)

    @staticmethod
    def offset_change(offset: int) -> dict[bytes, bytes | None]:
        return {_OFFSET_KEY: _TS.pack(offset)}

    @staticmethod
    def offset_of(raw: bytes) -> int:
        """The offset an `offset_change` value holds."""
        return int(_TS.unpack(raw)[0])

    # metadata -----------------------------------------------------------------------------
    def meta(self, name: str) -> Any:
        raw = self.kv.get(_META + name.encode())
        return None if raw is None else orjson.loads(raw)

    @staticmethod
    def meta_change(name: str, value: Any) -> dict[bytes, bytes | None]:
        return {_META + name.encode(): None if value is None else encode_value(value)}

    def set_meta(self, name: str, value: Any) -> None:
        """Metadata that belongs with the state (the event-time floor): written by the next state save."""
        self._meta_changes.update(self.meta_change(name, value))

    # checkpoint pieces ----------------------------------------------------------------------
    def state_changes(self) -> dict[bytes, bytes | None]:
        """Take the buffered user-state, timer and metadata writes (they now belong to a checkpoint)."""
        changes = self.state.take_changes()
        changes.update(self.timers.take_changes())
        if self._meta_changes:
            changes.update(self._meta_changes)
            self._meta_changes = {}
        for source in self.extensions:
            changes.update(source.take_changes())
        return changes

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        """Write `changes` (state and/or offsets) in one atomic batch and mark the cache clean."""
        self.kv.write(changes)
        self.state.mark_clean()

    def prepare_save(self, offset: int | None = None, *, state: bool = True) -> Callable[[], None]:
        """Snapshot now (on the worker thread); the returned write may run later, on any thread.
        State and offset in one write is exactly-once state; either alone is half of an ordering."""
        changes: dict[bytes, bytes | None] = self.state_changes() if state else {}
        if offset is not None:
            changes.update(self.offset_change(offset))
        kv = self.kv
        return lambda: kv.write(changes)

    def save(self, offset: int | None = None, *, state: bool = True) -> None:
        """Save buffered state and/or the offset atomically, now."""
        self.prepare_save(offset, state=state)()
        self.state.evict()

    # staged checkpoints (exactly-once output) -----------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Buffered user-state or timer writes (a timer that fired is a change even if on_timer wrote
        nothing). Metadata alone is not: it rides along with the next checkpoint."""
        return self.state.dirty or self.timers.dirty

    def stage(self, offset: int, changes: dict[bytes, bytes | None], checkpoint_id: str) -> None:
        """T1 of a transactional checkpoint: persist the pending change, and the id its transaction commits
        beside the input offset, before the commit is tried."""
        self.kv.write({_STAGED: encode_changes(offset, changes), _STAGED_ID: checkpoint_id.encode()})

    def staged(self) -> tuple[int, dict[bytes, bytes | None], str] | None:
        """(offset, changes, checkpoint id) of a staged checkpoint, None when there is none."""
        blob = self.kv.get(_STAGED)
        if blob is None:
            return None
        offset, changes = decode_changes(blob)
        return offset, changes, (self.kv.get(_STAGED_ID) or b"").decode()

    def apply_staged(self, offset: int, changes: dict[bytes, bytes | None],
                     extra: dict[bytes, bytes | None] | None = None) -> None:
        """After the transaction committed: state + offset + metadata in one batch, staging cleared. Touches
        only the KV (the changes were taken from the cache when the checkpoint began)."""
        batch = dict(changes)
        batch.update(self.offset_change(offset))
        if extra:
            batch.update(extra)
        batch[_STAGED] = batch[_STAGED_ID] = None
        self.kv.write(batch)

    def discard_staged(self) -> None:
        self.kv.write({_STAGED: None, _STAGED_ID: None})

    def apply_staged_on_open(self, offset: int, changes: dict[bytes, bytes | None]) -> None:
        """Recovery's apply of a staged checkpoint whose transaction committed (R3): unlike the checkpoint's
        own apply, nothing in memory has seen these changes. The user state reads the KV lazily (nothing has
        read it yet), but the timers were read when the store opened and are read again: left as they were,
        they would be the timers of the checkpoint before, so a window whose timer fired in the applied one
        would fire again without its state, and one whose timer it set would never fire (chaos CI seed 524)."""
        self.apply_staged(offset, changes)
        self.timers = Timers(self.kv)

    def close(self) -> None:
        self.kv.close()
