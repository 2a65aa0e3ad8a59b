"""Producing many records in one call: the C module `_columnar` (stylus/kafka/_columnar.c).

A batch processor's outputs are lists of values, keys and timestamps. Produced one `Producer.produce` call
each, they cost ~450 ns a record of argument parsing and per-message state in confluent-kafka's C module; the
same librdkafka call made in a C loop costs a fraction of it (BENCHMARKS.md, "The columnar batch path"). The
records go through the same producer, with the per-message state confluent-kafka's delivery-report callback
reads, so delivery reports, `poll`, `flush` and transactions treat them as records given to `produce`.

The module rests on two layouts private to confluent-kafka (see the C file), so it is used only when it was
built for the confluent-kafka installed (pyproject.toml pins one version) and the process holds one librdkafka.
`make install` builds it (scripts/build-native.sh); where it is missing, records are produced one call each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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


def _load() -> tuple[Any, str | None]:
    """The C module and None, or None and why it is not used."""
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
