"""A deterministic event generator with realistic skew, for the trending-events pipeline.

Real traffic is skewed: a few events get most of the activity (Zipf), some dimensions are much
busier than others (Zipf too), and every so often one event bursts for a while. The generator
reproduces that from a seed, so tests and the demo can assert on what should trend.

Records look like:
    {"event_id": "e0042", "type": "like", "dim_id": 17, "text": "goal match league fans", "ts": 1700000000123}
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import Producer

from stylus.extras import require
from stylus.kafka.settings import connect

if TYPE_CHECKING:
    import numpy as np

TOPICS: tuple[str, ...] = ("sports", "music", "politics", "tech", "food", "travel", "science", "movies")

KEYWORDS: dict[str, tuple[str, ...]] = {
    "sports": ("goal", "match", "league", "coach", "striker", "tournament", "score", "fans", "stadium", "referee"),
    "music": ("album", "concert", "guitar", "singer", "chorus", "band", "tour", "lyrics", "drummer", "playlist"),
    "politics": ("election", "senate", "vote", "policy", "campaign", "minister", "debate", "ballot", "law",
                 "parliament"),
    "tech": ("software", "startup", "chip", "cloud", "robot", "app", "code", "gadget", "server", "algorithm"),
    "food": ("recipe", "pasta", "chef", "bakery", "spicy", "dessert", "brunch", "noodles", "cheese", "grill"),
    "travel": ("flight", "hotel", "beach", "passport", "island", "backpack", "cruise", "museum", "airport",
               "hiking"),
    "science": ("physics", "galaxy", "molecule", "research", "telescope", "genome", "climate", "fossil",
                "quantum", "experiment"),
    "movies": ("trailer", "director", "actor", "premiere", "sequel", "cinema", "oscar", "screenplay", "thriller",
               "blockbuster"),
}

FILLER: tuple[str, ...] = ("wow", "today", "new", "look", "this", "amazing", "so", "just", "check", "great")

EVENT_TYPES: tuple[str, ...] = ("post", "comment", "like", "share", "view")
TYPE_WEIGHTS: tuple[float, ...] = (0.10, 0.20, 0.35, 0.10, 0.25)

DEFAULT_EVENTS = 2000
DEFAULT_DIMENSIONS = 300
DEFAULT_START_MS = 1_700_000_000_000


def event_id(index: int) -> str:
    """The id of the event of popularity rank `index + 1` (rank 1 is the most popular)."""
    return f"e{index + 1:04d}"


def topic_of(event: str) -> str:
    """Each event belongs to one topic, the same in every process (crc32, not the salted `hash`)."""
    return TOPICS[zlib.crc32(event.encode()) % len(TOPICS)]


def _numpy() -> ModuleType:
    """numpy is the `demo` extra: the trending processors import this module for its constants alone."""
    require("demo", "the event generator (processors.generator)")
    import numpy

    return numpy


def zipf_weights(n: int, exponent: float) -> np.ndarray:
    """Probabilities of ranks 1..n under a finite Zipf law."""
    np = _numpy()
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return weights / weights.sum()


@dataclass(frozen=True)
class Burst:
    """While start <= ts < start + duration, `event` is `multiplier` times as likely as usual."""

    event: str
    start: int  # ms, event time
    duration: int  # ms
    multiplier: float

    @property
    def topic(self) -> str:
        return topic_of(self.event)

    @property
    def end(self) -> int:
        return self.start + self.duration

    def active(self, ts: int) -> bool:
        return self.start <= ts < self.end


def pick_event(topic: str, rank: int = 100, events: int = DEFAULT_EVENTS) -> str:
    """The first event of `topic` at popularity rank >= `rank`: a good burst candidate (seen, not hot)."""
    for index in range(rank - 1, events):
        candidate = event_id(index)
        if topic_of(candidate) == topic:
            return candidate
    raise ValueError(f"no event of topic {topic!r} at rank >= {rank}")


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 7
    events: int = DEFAULT_EVENTS
    dimensions: int = DEFAULT_DIMENSIONS
    event_skew: float = 1.1  # Zipf exponent over events
    dimension_skew: float = 1.0  # Zipf exponent over dimension ids
    rate: float = 1000.0  # events per second of event time
    start_ms: int = DEFAULT_START_MS
    bursts: tuple[Burst, ...] = ()


class EventGenerator:
    """Seeded and reproducible: the same config yields the same records, record for record."""

    CHUNK = 1024

    def __init__(self, config: GeneratorConfig | None = None) -> None:
        self.config = config or GeneratorConfig()
        cfg = self.config
        self._np = np = _numpy()
        self.rng = np.random.default_rng(cfg.seed)
        self.event_cdf = np.cumsum(zipf_weights(cfg.events, cfg.event_skew))
        self.dim_cdf = np.cumsum(zipf_weights(cfg.dimensions, cfg.dimension_skew))
        self.type_cdf = np.cumsum(np.asarray(TYPE_WEIGHTS) / sum(TYPE_WEIGHTS))
        self.event_ids = [event_id(i) for i in range(cfg.events)]
        self.event_topics = [topic_of(e) for e in self.event_ids]
        probabilities = zipf_weights(cfg.events, cfg.event_skew)
        self._burst_take: list[tuple[Burst, float]] = []
        for burst in cfg.bursts:
            base = float(probabilities[int(burst.event[1:]) - 1])
            extra = base * (burst.multiplier - 1.0)
            # P(burst event) becomes base*m / (1 + base*(m-1)): its weight times m, renormalised
            self._burst_take.append((burst, extra / (1.0 + extra)))
        self.produced = 0  # records handed out
        self._made = 0  # records generated (in blocks of CHUNK)
        self._buffer: list[dict[str, Any]] = []

    def timestamp(self, index: int) -> int:
        return self.config.start_ms + int(index * 1000 / self.config.rate)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield from self.take(self.CHUNK)

    def take(self, n: int) -> list[dict[str, Any]]:
        """The next `n` records. Records are made in fixed blocks, so how the stream is taken in
        pieces never changes it."""
        while len(self._buffer) < n:
            self._buffer.extend(self._block(self._made))
            self._made += self.CHUNK
        out = self._buffer[:n]
        del self._buffer[:n]
        self.produced += n
        return out

    def _block(self, first: int) -> list[dict[str, Any]]:
        n = self.CHUNK
        rng, np = self.rng, self._np
        event_idx = np.searchsorted(self.event_cdf, rng.random(n), side="right")
        dim_idx = np.searchsorted(self.dim_cdf, rng.random(n), side="right")
        type_idx = np.searchsorted(self.type_cdf, rng.random(n), side="right")
        burst_draw = rng.random(n)
        lengths = rng.integers(3, 6, size=n)
        noise = rng.random(n)
        word_draws = rng.integers(0, 1 << 30, size=(n, 9))
        out = []
        for i in range(n):
            ts = self.timestamp(first + i)
            event = self.event_ids[min(int(event_idx[i]), self.config.events - 1)]
            for burst, take in self._burst_take:
                if burst.active(ts) and burst_draw[i] < take:
                    event = burst.event
                    break
            out.append({
                "event_id": event,
                "type": EVENT_TYPES[min(int(type_idx[i]), len(EVENT_TYPES) - 1)],
                "dim_id": min(int(dim_idx[i]), self.config.dimensions - 1) + 1,
                "text": make_text(topic_of(event), int(lengths[i]), float(noise[i]), word_draws[i]),
                "ts": ts,
            })
        return out


def make_text(topic: str, length: int, noise: float, draws: Sequence[int]) -> str:
    """`length` keywords of `topic`, sometimes one keyword of another topic, and a filler word.
    The topic's own words always hold the majority, so a keyword vote recovers the topic."""
    own = KEYWORDS[topic]
    words = [own[int(draws[j]) % len(own)] for j in range(length)]
    if noise < 0.3:
        other = TOPICS[int(draws[5]) % len(TOPICS)]
        words.insert(int(draws[6]) % (len(words) + 1), KEYWORDS[other][int(draws[7]) % len(KEYWORDS[other])])
    words.insert(0, FILLER[int(draws[8]) % len(FILLER)])
    return " ".join(words)


def generate(n: int, config: GeneratorConfig | None = None) -> list[dict[str, Any]]:
    """The first `n` records of a generator."""
    return EventGenerator(config).take(n)


def producer_for(bootstrap: str) -> Producer:
    """A producer keyed with the Java client's partitioner, so keys co-partition with Stylus outputs."""
    return Producer(connect(bootstrap, **{
        "linger.ms": 5, "compression.type": "lz4", "enable.idempotence": True,
        "partitioner": "murmur2_random", "queue.buffering.max.messages": 500_000,
    }))


def produce_records(producer: Producer, topic: str, records: Sequence[dict[str, Any]]) -> int:
    """Produce records keyed by event id, with the Kafka timestamp set to the event time."""
    for record in records:
        value = orjson.dumps(record)
        key = record["event_id"].encode()
        while True:
            try:
                producer.produce(topic, value, key, timestamp=int(record["ts"]))
                break
            except BufferError:
                producer.poll(0.05)
    producer.poll(0)
    return len(records)


def produce(bootstrap: str, topic: str, n: int, config: GeneratorConfig | None = None) -> int:
    """Produce the first `n` records of a generator to `topic` and wait until they are acknowledged."""
    producer = producer_for(bootstrap)
    generator = EventGenerator(config)
    done = 0
    while done < n:
        done += produce_records(producer, topic, generator.take(min(EventGenerator.CHUNK, n - done)))
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged by {bootstrap}")
    return done


def produce_for(bootstrap: str, topic: str, rate: float, duration: float, *, seed: int = 7,
                bursts: tuple[Burst, ...] = (), start_ms: int | None = None) -> int:
    """Produce `rate` records per second of wall time for `duration` seconds, event time = now."""
    start = int(time.time() * 1000) if start_ms is None else start_ms
    generator = EventGenerator(GeneratorConfig(seed=seed, rate=rate, start_ms=start, bursts=bursts))
    producer = producer_for(bootstrap)
    began = time.monotonic()
    total = int(rate * duration)
    while generator.produced < total:
        due = min(total, int((time.monotonic() - began) * rate) + 1)
        if due > generator.produced:
            produce_records(producer, topic, generator.take(due - generator.produced))
        time.sleep(0.05)
    producer.flush(30)
    return generator.produced
