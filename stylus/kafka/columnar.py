"""A batch processor's records in and out of confluent-kafka's clients a batch at a time: the C module
`_columnar` (stylus/kafka/_columnar.c).

Per record, confluent-kafka builds a `Message` object that is then read field by field, and its `produce`
parses its arguments and builds a per-message state: most of what a batch processor's records cost beyond
librdkafka's own work (docs/batch.md, "What a record costs"). Here both are done in C on the same clients:
- `many_producer`: a batch's outputs (values, keys, timestamps) produced in one call, with the per-message state
  confluent-kafka's delivery-report callback reads, so delivery reports, `poll`, `flush` and transactions treat
  them as records given to `produce`;
- `PartitionReader`: the records of a consumer's assigned partitions read as lists per partition, with no
  `Message` per record, while the consumer itself still serves rebalances, commits and errors.

The module rests on two layouts private to confluent-kafka (see the C file), so it is used only when it was
built for the confluent-kafka installed (pyproject.toml pins one version) and the process holds one librdkafka.
`make install` builds it (scripts/build-native.sh); where it is missing, or turned off with
`STYLUS_COLUMNAR=off` in the environment, batch processors read Messages and produce one call a record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Producer

log = logging.getLogger(__name__)

#: (topic, values, keys, timestamps, start) -> the index of the first record not produced: `len(values)`, or
#: less when the producer's queue is full (serve it, then call again from there). Raises what `produce` raises
#: for a record librdkafka refuses.
ProduceMany = Callable[[str, Sequence[Any], Sequence[bytes | None], Sequence[int], int], int]

QUEUE_FULL = KafkaError._QUEUE_FULL


def _librdkafka_files() -> set[str]:
    """The librdkafka files mapped into this process (Linux); empty where /proc is not there."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return set()
    return {line.split(maxsplit=5)[-1].strip() for line in maps.read_text().splitlines() if "librdkafka" in line}


#: `STYLUS_COLUMNAR`: `on` (the default: used wherever it loads) or `off`
SWITCH = "STYLUS_COLUMNAR"


def _load() -> tuple[Any, str | None]:
    """The C module and None, or None and why it is not used."""
    switch = os.environ.get(SWITCH, "on").strip().lower()
    if switch not in ("on", "off"):
        raise ValueError(f"{SWITCH}={os.environ[SWITCH]!r}: set it to `on` (the default) or `off` (batch processors "
                         "then read Messages and produce a call a record)")
    if switch == "off":
        return None, f"turned off ({SWITCH}=off)"
    try:
        from stylus.kafka import _columnar  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"not built ({exc}): `make install` builds it (scripts/build-native.sh)"
    if _columnar.built_for != confluent_kafka.__version__:
        return None, (f"built for confluent-kafka {_columnar.built_for}, but {confluent_kafka.__version__} is "
                      "installed: rebuild it (scripts/build-native.sh)")
    if _columnar.libversion() != confluent_kafka.libversion()[1]:
        return None, "it calls another librdkafka than confluent-kafka's: rebuild it (scripts/build-native.sh)"
    files = _librdkafka_files()
    if len(files) > 1:
        return None, f"this process holds more than one librdkafka ({', '.join(sorted(files))})"
    return _columnar, None


_module, unavailable = _load()
if unavailable is not None:
    log.debug("stylus.kafka._columnar not used: %s", unavailable)


def many_producer(producer: Producer, on_delivery: Callable[[Any, Any], None] | None) -> ProduceMany | None:
    """`producer`'s produce-many call (None without the C module). `on_delivery` must be the callback the
    producer was configured with (`on_delivery`), which its `produce` calls use by default: the records'
    delivery reports go to it as theirs would."""
    if _module is None:
        return None
    produce_many = _module.produce_many

    def produce(topic: str, values: Sequence[Any], keys: Sequence[bytes | None], timestamps: Sequence[int],
                start: int = 0) -> int:
        done, err = produce_many(producer, on_delivery, topic, values, keys, timestamps, start)
        if err and err != QUEUE_FULL:
            reason = KafkaError(err).str()
            raise KafkaException(KafkaError(err, f"Unable to produce message: {reason}",
                                            fatal=err == KafkaError._FATAL))
        return int(done)

    return produce


class PartitionRecords(NamedTuple):
    """One partition's records of a read, in offset order (`Run.of_columns` takes them as they are)."""

    topic: str
    partition: int
    offsets: Sequence[int]  # a range when they follow each other
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]
    headers: list[list[tuple[str, bytes | None]] | None]  # as Message.headers() gives them


class ConsumerEvent(NamedTuple):
    """What a partition's queue holds besides records: its end reached, or a fetch error."""

    topic: str | None
    partition: int
    offset: int
    error: KafkaError


class PartitionReader:
    """The records of a consumer's assigned partitions, read a batch at a time as lists per partition.

    Each partition is taken off the consumer's queue (`take`) before the consumer is told to assign it (in the
    rebalance callback); from then on its records, end-of-partition events and fetch errors come through
    `read`, and the consumer's own `consume`/`poll`, which must still be called, serves the rest: rebalances,
    commit answers, client errors. An event on the consumer's queue ends a `read` that waits. `close` before
    the consumer's `close`: a partition still taken keeps the consumer from leaving its group."""

    def __init__(self, consumer: Any) -> None:
        if _module is None:
            raise RuntimeError(f"stylus.kafka._columnar is not available: {unavailable}")
        self._reader = _module.Reader(consumer)
        self._taken: set[tuple[str, int]] = set()

    @classmethod
    def for_consumer(cls, consumer: Any) -> PartitionReader | None:
        """A reader on `consumer`, or None without the C module."""
        return cls(consumer) if _module is not None else None

    def take(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read these partitions here (idempotent), before the consumer assigns them."""
        for topic, partition in partitions:
            self._reader.forward(topic, partition, True)
            self._taken.add((topic, partition))

    def read(self, max_records: int, timeout: float) -> tuple[list[PartitionRecords], list[ConsumerEvent], int]:
        """Up to `max_records` records, waiting up to `timeout` seconds for the first: per partition, the events,
        and the keys' and values' bytes."""
        runs, events, size = self._reader.read(max_records, int(timeout * 1000))
        return ([PartitionRecords(*run) for run in runs],
                [ConsumerEvent(topic, partition, offset, KafkaError(code, reason))
                 for topic, partition, offset, code, reason in events], size)

    def close(self) -> None:
        """Give every partition back and release the queue (idempotent)."""
        for topic, partition in self._taken:
            self._reader.forward(topic, partition, False)
        self._taken.clear()
        self._reader.close()
