"""Duplicate suppression for inputs written at-least-once upstream (MillWheel's record ids).

`dedup: {window: 10m}` on a processor drops an input record whose id was already handled within
`window` of its record timestamp on the same input partition. The id is the producer-set header
(`dedup.header`, default `stylus.id`, which exactly-once outputs carry), else the record key plus a
hash of the value bytes. Ids are 16-byte blake2b digests; a Bloom filter answers "definitely new"
for most records, and a positive is settled by the exact seen-set in the partition's state
(stylus/state/seen.py), which every checkpoint saves together with the state and the offsets.

The engine wraps its batch in `DedupFilter.filter` (one check per batch when dedup is off). A
dropped record still advances the partition's offset and counts as handled input. A record's id
is remembered only once the engine has finished with it (processed, or handed to the failure
policy): a record that stops the processor is not marked, so it is processed again after restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from hashlib import blake2b
from typing import Any

from stylus.config.model import DedupSpec
from stylus.core.task import PartitionTask
from stylus.eventtime.control import is_control
from stylus.state.kv import MemoryKV
from stylus.state.seen import SeenIds, hash_of


def record_id(key: bytes | None, value: bytes | None, headers: Any, header: str | None) -> bytes:
    """The 16-byte digest identifying a record: of its id header, else of its key and value bytes."""
    if header is not None and headers:
        for name, found in headers:
            if name == header and found:
                return blake2b(b"h" + found, digest_size=16).digest()
    k = b"n" if key is None else b"k%d:%b" % (len(key), key)
    v = b"n" if value is None else b"v" + value
    return blake2b(k + v, digest_size=16).digest()


class DedupFilter:
    """Drops repeated records from the engine's batches; keeps the counters the metrics read."""

    def __init__(self, spec: DedupSpec) -> None:
        self.spec = spec
        self.window_ms = int(spec.window * 1000)
        self.header = spec.header
        self.dropped = 0  # duplicates dropped since start
        self.batch_dropped = 0  # ... in the current (last) batch
        self._volatile: dict[tuple[str, int], SeenIds] = {}  # partitions without a store (not persisted)

    def seen_ids(self, task: PartitionTask) -> SeenIds:
        """The partition's seen-set, built (Bloom filter included) from its store on first use."""
        store = task.store
        if store is None:
            found = self._volatile.get(task.key)
            if found is None:
                found = self._volatile[task.key] = self._new(MemoryKV())
            return found
        for source in store.extensions:
            if isinstance(source, SeenIds):
                return source
        seen = self._new(store.kv)
        store.attach(seen)
        return seen

    def _new(self, kv: Any) -> SeenIds:
        return SeenIds(kv, self.window_ms, self.spec.expected_ids, self.spec.fp_rate)

    def filter(self, msgs: Iterable[Any], task_for: Callable[[str, int], PartitionTask]) -> Iterator[Any]:
        """Yield the records to process, in order; a repeat advances its task's offset and is skipped."""
        self.batch_dropped = 0
        header = self.header
        last_topic: str | None = None
        last_partition = -1
        task: Any = None
        seen: Any = None
        handled: tuple[Any, bytes, int, int] | None = None  # the record yielded last: marked when resumed
        for msg in msgs:
            if handled is not None:
                handled[0].add(handled[1], handled[2], handled[3])
                handled = None
            topic = msg.topic()
            partition = msg.partition()
            if partition != last_partition or topic != last_topic:
                task = task_for(topic, partition)
                seen = self.seen_ids(task)
                last_topic, last_partition = topic, partition
            headers = msg.headers()
            if headers and is_control(headers):
                yield msg
                continue
            digest = record_id(msg.key(), msg.value(), headers, header)
            h = hash_of(digest)
            ts = msg.timestamp()[1]
            if seen.seen(digest, h, ts):
                seen.advance(ts)
                task.next_offset = msg.offset() + 1
                task.at_eof = False
                self.batch_dropped += 1
                self.dropped += 1
                continue
            handled = (seen, digest, h, ts)
            yield msg
        if handled is not None:
            handled[0].add(handled[1], handled[2], handled[3])
