"""The exact seen-set of duplicate suppression for one input partition, kept in that partition's store.

Why in the store: the set must follow the processor's state semantics (a record counted in the state
must be remembered as seen by the same checkpoint, and forgotten with it), so its writes are buffered
here and handed to PartitionStore's checkpoint batch (`PartitionStore.attach`), together with the
user state and the input offset.

Key layout (beside PartitionStore's, see stylus/state/store.py):
    b"d" + bucket (8 bytes, big-endian, biased by 2**63) + id digest (16 bytes) -> record timestamp (8 bytes)
    b"\\x00d"                                        -> the high mark and the checkpoint generation (8 + 8 bytes)
A bucket is `window / BUCKETS` of record time. The high mark is the largest record timestamp the
partition has handled; an id whose timestamp is older than `high mark - window` can never match
again, so whole buckets behind it are deleted by the next checkpoint and the set stays bounded.

Every decision depends only on the partition's records in offset order (never on wall clock or on
when checkpoints happen), so a replay or a backfill of the same input drops the same records.
"""

from __future__ import annotations

import struct
from collections import deque

from stylus.state.bloom import LOW64, PATTERN_MASK, BloomFilter
from stylus.state.kv import KV

BUCKETS = 8  # buckets per window: the set holds between 1 and 1 + 1/BUCKETS windows of ids
PREFIX = b"d"
HIGH_KEY = b"\x00d"
NO_TIME = -(2**63)
_BIAS = 1 << 63
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_PAIR = struct.Struct(">qq")


def hash_of(digest: bytes) -> int:
    """The Bloom filter's 128-bit hash of an id digest."""
    return int.from_bytes(digest, "little")


def bucket_prefix(bucket: int) -> bytes:
    return PREFIX + _U64.pack(bucket + _BIAS)


class SeenIds:
    """`seen(digest, h, ts)`: was this id handled inside the window of `ts`? `add` remembers it."""

    def __init__(self, kv: KV, window_ms: int, capacity: int, fp_rate: float) -> None:
        self.kv = kv
        self.window = max(1, int(window_ms))
        self.width = max(1, self.window // BUCKETS)
        self.capacity = capacity
        self.fp_rate = fp_rate
        self.pending: dict[bytes, int] = {}  # added since the last checkpoint took its changes
        # Taken by a checkpoint whose write may still be in flight (on another thread): (generation, ids).
        # A generation is dropped once the KV holds its number: its ids are readable from the KV then.
        self.inflight: deque[tuple[int, dict[bytes, int]]] = deque()
        self.buckets: set[int] = set()  # buckets holding ids (persisted or pending)
        self._bucket, self._prefix = NO_TIME, b""  # the bucket `add` wrote last, and its key prefix
        self.high, self.generation = self._persisted()
        self._taken_high = self.high
        self.lookups = 0  # Bloom positives checked against the exact set
        self.false_positives = 0  # ... of which the exact set said "new"
        self.rebuilds = 0
        self.bloom = self._rebuild()

    # ------------------------------------------------------------------ the per-record path
    def seen(self, digest: bytes, h: int, ts: int) -> bool:
        """True when an id with this digest was added with a timestamp within the window of `ts` and
        not older than `high mark - window`. `h`: the digest as an int (the Bloom filter's hash)."""
        bloom = self.bloom
        mask = bloom.patterns[(h >> 64) & PATTERN_MASK]
        if bloom.words[(h & LOW64) % bloom.nwords] & mask != mask:
            return False  # definitely new: the common case, settled without touching the state
        high = self.high
        lo = (ts if ts > high else high) - self.window
        hi = ts + self.window if ts + self.window < high else high
        if lo > hi:
            return False
        self.lookups += 1
        width = self.width
        first, last = lo // width, hi // width
        start = min(max(ts // width, first), last)  # a repeat usually carries the same timestamp
        for bucket in (start, *range(first, start), *range(start + 1, last + 1)):
            found = self._lookup(bucket_prefix(bucket) + digest)
            if found is not None and lo <= found <= hi:
                return True
        self.false_positives += 1
        return False

    def _lookup(self, key: bytes) -> int | None:
        found = self.pending.get(key)
        if found is not None:
            return found
        for _, ids in self.inflight:
            found = ids.get(key)
            if found is not None:
                return found
        raw = self.kv.get(key)
        return None if raw is None else int(_I64.unpack(raw)[0])

    def add(self, digest: bytes, h: int, ts: int) -> None:
        """Remember a handled (not dropped) record's id."""
        if ts > self.high:
            self.high = ts
        elif ts < self.high - self.window:
            return  # already older than anything a later record is compared with
        bucket = ts // self.width
        if bucket != self._bucket:
            self._bucket, self._prefix = bucket, bucket_prefix(bucket)
            self.buckets.add(bucket)
        self.pending[self._prefix + digest] = ts
        bloom = self.bloom
        bloom.words[(h & LOW64) % bloom.nwords] |= bloom.patterns[(h >> 64) & PATTERN_MASK]
        bloom.count += 1

    def advance(self, ts: int) -> None:
        """A dropped duplicate still moves the high mark (it was handled input)."""
        if ts > self.high:
            self.high = ts

    # ------------------------------------------------------------------ checkpoints
    def cutoff(self) -> int:
        """The first bucket still needed: every bucket before it is older than `high - window`."""
        return NO_TIME if self.high == NO_TIME else (self.high - self.window) // self.width

    def _persisted(self) -> tuple[int, int]:
        """(high mark, generation) as of the last checkpoint write that reached the KV."""
        raw = self.kv.get(HIGH_KEY)
        return (NO_TIME, 0) if raw is None else _PAIR.unpack(raw)

    def take_changes(self) -> dict[bytes, bytes | None]:
        """New ids, deletes of expired buckets, the high mark and generation, for the checkpoint batch."""
        written = self._persisted()[1]
        while self.inflight and self.inflight[0][0] <= written:
            self.inflight.popleft()
        changes: dict[bytes, bytes | None] = {}
        cutoff = self.cutoff()
        expired = [b for b in self.buckets if b < cutoff]
        self._bucket = NO_TIME  # `add` re-registers its bucket if it was among the expired
        if expired:
            limit = bucket_prefix(cutoff)
            for bucket in expired:
                self.buckets.discard(bucket)
                for key, _ in self.kv.scan(bucket_prefix(bucket)):
                    changes[key] = None
            for _, ids in self.inflight:  # maybe not in the KV yet: delete them after they land
                for key in ids:
                    if key[:9] < limit:
                        changes[key] = None
            self.pending = {k: t for k, t in self.pending.items() if k[:9] >= limit}
        for key, ts in self.pending.items():
            changes[key] = _I64.pack(ts)
        if not changes and self.high == self._taken_high:
            return changes  # an idle partition writes nothing
        self._taken_high = self.high
        self.generation += 1
        changes[HIGH_KEY] = _PAIR.pack(self.high, self.generation)
        if self.pending:
            self.inflight.append((self.generation, self.pending))
            self.pending = {}
        if self.bloom.full:
            self.bloom = self._rebuild()
        return changes

    # ------------------------------------------------------------------ Bloom filter
    def _rebuild(self) -> BloomFilter:
        """A fresh filter from the persisted set (on partition open, and when the filter is full)."""
        cutoff = self.cutoff()
        limit = bucket_prefix(cutoff) if cutoff != NO_TIME else b""
        keys: list[bytes] = [key for key, _ in self.kv.scan(PREFIX) if key[:9] >= limit]
        for ids in (*(ids for _, ids in self.inflight), self.pending):
            keys.extend(key for key in ids if key[:9] >= limit)
        keys = list(set(keys))
        self.buckets = {_U64.unpack_from(key, 1)[0] - _BIAS for key in keys}
        self._bucket = NO_TIME
        bloom = BloomFilter(max(self.capacity, 2 * len(keys)), self.fp_rate)
        for key in keys:
            bloom.add(hash_of(key[9:]))
        bloom.count = len(keys)
        self.rebuilds += 1
        return bloom

    @property
    def size(self) -> int:
        """Ids held (persisted, in flight or pending), expired buckets not yet deleted included. A scan."""
        keys = {key for key, _ in self.kv.scan(PREFIX)}
        for ids in (*(ids for _, ids in self.inflight), self.pending):
            keys.update(ids)
        return len(keys)
