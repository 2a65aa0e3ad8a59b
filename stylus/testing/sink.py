"""Where a processor's `ctx.emit`, dead letters and late records go in the driver: the in-memory topics.

It encodes like the runtime's KafkaSink (the output topic's serde, keys as UTF-8) and marks what it writes
by the output semantics: at-least-once output is in the topic at once; at-most-once output is held until
the checkpoint's `emit` step; exactly-once output sits in an open transaction until the checkpoint commits
it. Processors downstream read all three at once (so a test sees results without a checkpoint); a crash
drops the held and the uncommitted ones, as the runtime's crash would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stylus.config.model import Pipeline, ProcessorSpec
from stylus.serde import encode_key, encoder
from stylus.testing.topics import Entry, Status, Topics

#: The dead-letter header carrying the wall-clock time of the failure: the driver's clock stands in for it,
#: so the same input gives the same dead letters (stylus/runtime/failures.py sets it).
ERROR_TIME_HEADER = "stylus.error.time"


def header_pairs(headers: Mapping[str, Any] | list[tuple[str, Any]] | None) -> list[tuple[str, bytes]] | None:
    """Headers as Kafka carries them: (name, bytes) pairs."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name), value if isinstance(value, bytes) else b"" if value is None else str(value).encode("utf-8"))
            for name, value in items]


class DriverSink:
    def __init__(self, pipeline: Pipeline, spec: ProcessorSpec, topics: Topics, clock: Callable[[], int]) -> None:
        self.topics = topics
        self.allowed = frozenset(spec.outputs)
        self.encoders = {t: encoder(pipeline.topics[t].serde) for t in spec.outputs}
        output = spec.semantics.output
        self.status = {"at_least_once": Status.VISIBLE, "at_most_once": Status.HELD,
                       "exactly_once": Status.OPEN}[output]
        self.clock = clock  # the driver's wall clock, ms
        self.pending: list[Entry] = []  # held or uncommitted since the last checkpoint

    def __call__(self, topic: str, key: str | None, value: Any, timestamp: int,
                 headers: Mapping[str, Any] | None, partition: int = -1) -> None:
        """`partition` >= 0: the one a grouping or `ctx.emit(partition=n)` chose (stylus/core/groupings.py)."""
        if topic not in self.allowed:
            raise ValueError(f"emitted to `{topic}`, which is not among the processor's outputs")
        data = self.encoders[topic](value)  # an unencodable value fails its record, as in the runtime
        self._append(topic, encode_key(key), data, timestamp, header_pairs(headers), partition)

    def check(self, topic: str, value: Any) -> None:
        """Raises for a value the topic's serde cannot encode (the engine asks before it holds an output)."""
        self.encoders[topic](value)

    def send(self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any = None) -> None:
        """Raw bytes (dead letters, late records), under the same holding rule as emitted output."""
        pairs = header_pairs(headers)
        if pairs:
            pairs = [(n, str(self.clock()).encode() if n == ERROR_TIME_HEADER else v) for n, v in pairs]
        self._append(topic, key, value, timestamp, pairs)

    def _append(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: list[tuple[str, bytes]] | None, chosen: int = -1) -> None:
        partition = self.topics.pick_partition(topic, key, chosen if chosen >= 0 else None)
        entry = self.topics.append(topic, partition, key, value, int(timestamp), headers, self.status)
        if self.status is not Status.VISIBLE:
            self.pending.append(entry)

    def release(self) -> None:
        """The checkpoint's `emit` (held output produced) or transaction commit: pending output is in Kafka."""
        for entry in self.pending:
            entry.status = Status.VISIBLE
        self.pending.clear()

    def drop(self) -> int:
        """A crash: held output never reached Kafka, an open transaction is aborted."""
        for entry in self.pending:
            entry.status = Status.GONE
        dropped = len(self.pending)
        self.pending.clear()
        return dropped
