"""Duplicate suppression for inputs written at-least-once upstream (MillWheel's record ids).

`dedup: {window: 10m}` on a processor drops an input record whose id was already handled within
`window` of its record timestamp on the same input partition. The id is the producer-set header
(`dedup.header`, default `stylus.id`, which exactly-once outputs carry where recovery needs it, or
with `semantics.output_ids: always`), else the record key plus a
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
from stylus.eventtime.control import HEADER as CONTROL_HEADER
from stylus.state.bloom import LOW64, PATTERN_MASK
from stylus.state.kv import MemoryKV
from stylus.state.seen import SeenIds


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
        header = self.header
        last_topic: str | None = None
        last_partition = -1
        task: Any = None
        seen: Any = None
        words: Any = None
        patterns: Any = None
        nwords = 1
        partitions: dict[tuple[str, int], tuple[Any, ...]] = {}
        marked: Any = None  # the SeenIds of the record yielded last (None: nothing to mark)
        digest = b""
        h = ts = dropped = 0
        try:
            for msg in msgs:
                if marked is not None:  # the engine is done with the previous record: remember its id
                    marked.add(digest, h, ts)
                    marked = None
                topic = msg.topic()
                partition = msg.partition()
                if partition != last_partition or topic != last_topic:
                    cached = partitions.get((topic, partition))
                    if cached is None:
                        task = task_for(topic, partition)
                        seen = self.seen_ids(task)
                        bloom = seen.bloom  # replaced only by a checkpoint, never inside a batch
                        cached = partitions[(topic, partition)] = (task, seen, bloom.words, bloom.nwords,
                                                                   bloom.patterns)
                    task, seen, words, nwords, patterns = cached
                    last_topic, last_partition = topic, partition
                headers = msg.headers()
                rid = None
                if headers:
                    for name, found in headers:
                        if name == header:
                            rid = found
                        elif name == CONTROL_HEADER:
                            break
                    else:
                        name = None
                    if name == CONTROL_HEADER:  # an upstream watermark: the engine's business
                        yield msg
                        continue
                if rid:
                    digest = blake2b(b"h" + rid, digest_size=16).digest()
                else:
                    digest = record_id(msg.key(), msg.value(), None, None)
                h = int.from_bytes(digest, "little")
                ts = msg.timestamp()[1]
                mask = patterns[(h >> 64) & PATTERN_MASK]  # the Bloom filter, inlined: most records stop here
                if words[(h & LOW64) % nwords] & mask == mask and seen.seen(digest, h, ts):
                    seen.advance(ts)
                    task.next_offset = msg.offset() + 1
                    task.at_eof = False
                    dropped += 1
                    continue
                marked = seen
                yield msg
            if marked is not None:
                marked.add(digest, h, ts)
        finally:  # also when the engine stops mid-batch (the last yielded record stays unmarked)
            self.batch_dropped = dropped
            self.dropped += dropped
