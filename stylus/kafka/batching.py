"""How many records to ask `consume()` for: the configured count, and fewer when records are big.

librdkafka bounds its prefetch queue by bytes (`queued.max.messages.kbytes`), but one `consume(n)` call
takes records out of that queue as they arrive while the fetcher refills it, so a call can return `n`
records whatever their size: with 10 KB records and the worker's default 2,000 that is 20 MB of copies on
top of the prefetch (measured: docs/faults.md, "slow processor"). So a batch is also bounded by the
prefetch's own byte budget, from the record sizes seen so far. Before any has been seen, records are
assumed as large as a broker accepts by default, so the very first batch stays within budget too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: librdkafka's default `queued.max.messages.kbytes`, in KiB
DEFAULT_QUEUED_KBYTES = 65536
#: a record's assumed size before any has been seen: Kafka's default largest record batch (1 MiB)
FIRST_GUESS_BYTES = 1 << 20
#: records measured per batch, spread over it: the estimate costs O(1) per batch, not per record
SAMPLES = 16
#: a record's memory beside its key and value (librdkafka's message, the Python object, the list slot)
OVERHEAD_BYTES = 200


class BatchSizer:
    """`size` is the next `consume()` count; `observe(batch)` after each batch updates it."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records
        self.max_bytes = max(1, max_bytes)
        self.mean_bytes: float | None = None  # a record's size, smoothed over batches; None before the first
        self.size = self._count(FIRST_GUESS_BYTES)

    @classmethod
    def for_consumer(cls, max_records: int, consumer_config: Mapping[str, Any]) -> BatchSizer:
        """The budget is the consumer's prefetch bound: a batch never holds more than the queue may."""
        kbytes = int(consumer_config.get("queued.max.messages.kbytes", DEFAULT_QUEUED_KBYTES))
        return cls(max_records, kbytes * 1024)

    def observe(self, batch: Sequence[Any]) -> None:
        """`batch`: messages with `error()`, `key()` and `value()` (confluent-kafka's, or `RawMessage`)."""
        total = seen = 0
        for msg in batch[:: max(1, len(batch) // SAMPLES)]:
            if msg.error() is not None:  # an event (end of partition, ...), not a record: it says nothing
                continue
            value, key = msg.value(), msg.key()
            total += OVERHEAD_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
            seen += 1
        if seen:
            self.observe_total(total, seen)

    def observe_total(self, total_bytes: int, records: int) -> None:
        """A batch of `records` whose keys, values and per-record overhead come to `total_bytes`."""
        if records <= 0:
            return
        mean = total_bytes / records
        # up at once (a burst of big records must not overshoot), down gradually
        last = self.mean_bytes
        self.mean_bytes = mean if last is None or mean > last else (last + mean) / 2
        self.size = self._count(self.mean_bytes)

    def _count(self, record_bytes: float) -> int:
        return max(1, min(self.max_records, int(self.max_bytes // record_bytes)))
