"""Writing generated Nexmark events to Kafka: one topic per type, JSON values keyed as `model.key_of` says, the
Kafka timestamp set to the event's `dateTime` (so readers that use record time see event time)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Producer

from stylus.config.model import Pipeline, TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.settings import connect
from stylus.nexmark.model import DEFAULT_PREFIX, KINDS, Event, Kind, key_of, topics

DEFAULT_PARTITIONS = 4


@dataclass
class Produced:
    """What a `produce` call wrote so far: events per type and the event-time range."""

    counts: dict[Kind, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    first_time: int | None = None
    last_time: int | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def ensure_topics(bootstrap: str, prefix: str = DEFAULT_PREFIX, partitions: int = DEFAULT_PARTITIONS,
                  pipeline: Pipeline | None = None) -> dict[str, str]:
    """Create the three topics if missing: with the partitions `pipeline` declares for them, else
    `partitions`. Returns topic -> "created" | "exists"."""
    declared = pipeline.topics if pipeline is not None else {}
    specs = {name: declared.get(name) or TopicSpec(partitions=partitions) for name in topics(prefix).values()}
    return create_topics(bootstrap, specs)


def producer_for(bootstrap: str, errors: list[str]) -> Producer:
    """Idempotent (records stay in order per partition, so each partition's event time never goes back),
    batched, and keyed with the Java client's partitioner, as Stylus outputs are. Failed deliveries are
    appended to `errors` (only those are reported: a callback per record would cost more than the encoding)."""
    return Producer(connect(bootstrap, **{
        "linger.ms": 20, "compression.type": "lz4", "enable.idempotence": True,
        "partitioner": "murmur2_random", "queue.buffering.max.messages": 500_000,
        "delivery.report.only.error": True, "on_delivery": lambda err, _msg: errors.append(str(err)),
    }))


def produce(bootstrap: str, events: Iterable[Event], *, prefix: str = DEFAULT_PREFIX,
            names: Mapping[Kind, str] | None = None, realtime: bool = False,
            progress: Callable[[Produced], None] | None = None, progress_every: float = 1.0) -> Produced:
    """Write `events` to the topics of `prefix` (or those `names` gives per type) and wait until every one is
    acknowledged. `realtime`: at the pace of their event time (the first event now); else as fast as the broker
    takes them. `progress` is called every `progress_every` seconds and at the end."""
    names = names or topics(prefix)
    errors: list[str] = []
    producer = producer_for(bootstrap, errors)
    done = Produced()
    started = time.monotonic()
    next_report = started + progress_every
    dumps, produce_one = orjson.dumps, producer.produce
    for event in events:
        at = event.value["dateTime"]
        if done.first_time is None:
            done.first_time = at
        if realtime:
            wait = started + (at - done.first_time) / 1000 - time.monotonic()
            if wait > 0:
                producer.poll(wait)
        value, key = dumps(event.value), key_of(event).encode()
        while True:
            try:
                produce_one(names[event.kind], value, key, timestamp=at)
                break
            except BufferError:
                producer.poll(0.05)
        done.counts[event.kind] += 1
        done.last_time = at
        if progress is not None and time.monotonic() >= next_report:
            producer.poll(0)
            progress(done)
            next_report = time.monotonic() + progress_every
    remaining = producer.flush(120)
    if remaining or errors:
        raise RuntimeError(f"{remaining} events not acknowledged by {bootstrap}" if remaining else
                           f"{len(errors)} events failed: {errors[0]}")
    if progress is not None:
        progress(done)
    return done
