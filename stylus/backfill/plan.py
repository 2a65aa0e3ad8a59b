"""The driver's plan: which offsets of which partitions to read, from Kafka or the archive, in chunks.

Per input partition the plan is a list of chunks in offset order that never overlap: archive files
where the archive has the data (cheaper to read, and the only copy once Kafka has dropped it), Kafka
ranges around them. A stateful processor gets one unit (= one Spark task) per input partition, so its
records are processed in offset order with the partition's own state, as in streaming; a stateless one
gets one unit per chunk, which spreads large partitions over executors.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from stylus.archive import Segment, date_of, list_segments
from stylus.backfill.bounds import Bound
from stylus.backfill.search import TimestampProbe
from stylus.kafka.offsets import end_offsets, topic_partitions

Source = Literal["kafka", "archive", "both"]
UNBOUNDED = 2**62
DEFAULT_CHUNK = 250_000


class Chunk(BaseModel):
    """Offsets [start, end) of one partition, read from Kafka or from one archive file (`path`)."""

    model_config = ConfigDict(frozen=True)
    source: Literal["kafka", "archive"]
    topic: str
    partition: int
    start: int
    end: int
    path: str | None = None

    @property
    def size(self) -> int:
        return self.end - self.start


class Unit(BaseModel):
    """One Spark task's work: chunks of one input partition, in offset order."""

    model_config = ConfigDict(frozen=True)
    index: int
    topic: str
    partition: int
    chunks: tuple[Chunk, ...]
    min_ts: int | None = None  # records with timestamp < min_ts are skipped
    max_ts: int | None = None  # records with timestamp >= max_ts are skipped
    next_offset: int  # where the stream continues after this range (seeded into state)


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)
    bootstrap: str
    archive_root: str | None
    units: tuple[Unit, ...]


class PartitionWindow(BaseModel):
    model_config = ConfigDict(frozen=True)
    kafka: tuple[int, int]  # [start, end) within Kafka's [low, high)
    archive: tuple[int, int]  # offsets wanted from the archive
    min_ts: int | None
    max_ts: int | None


def plan_ranges(
    bootstrap: str,
    topics: Iterable[str],
    start: Bound,
    stop: Bound,
    *,
    source: Source = "kafka",
    archive_root: str | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    per_partition: bool = True,
) -> Plan:
    """Plan the reads. `per_partition=True` (stateful processors) keeps each partition in one unit."""
    if source != "kafka" and not archive_root:
        raise ValueError(f"source `{source}` needs an archive root")
    topics = list(topics)
    use_kafka = source in ("kafka", "both")
    use_archive = source in ("archive", "both")
    parts = topic_partitions(bootstrap, topics) if use_kafka else []
    bounds = end_offsets(bootstrap, parts) if parts else {}
    segments: dict[tuple[str, int], list[Segment]] = {}
    if use_archive:
        assert archive_root is not None
        dates = (date_of(start.time_ms) if start.kind == "time" and start.time_ms is not None else None,
                 date_of(stop.time_ms) if stop.kind == "time" and stop.time_ms is not None else None)
        for topic in topics:
            for seg in list_segments(archive_root, topic, dates):
                segments.setdefault((topic, seg.partition), []).append(seg)
    keys = sorted(set(bounds) | set(segments))
    units: list[Unit] = []
    probe: TimestampProbe | None = None
    try:
        for topic, partition in keys:
            low, high = bounds.get((topic, partition), (0, 0))
            if (start.kind == "time" or stop.kind == "time") and high > low and probe is None:
                probe = TimestampProbe(bootstrap)
            window = _window(probe, topic, partition, low, high, start, stop)
            chunks = _merge(topic, partition, window, segments.get((topic, partition), []), chunk_size,
                            use_kafka=bool(bounds))
            next_offset = window.kafka[1] if (topic, partition) in bounds else max(
                (c.end for c in chunks), default=0)
            base: dict[str, Any] = {"topic": topic, "partition": partition, "min_ts": window.min_ts,
                                    "max_ts": window.max_ts, "next_offset": next_offset}
            if per_partition:
                units.append(Unit(index=len(units), chunks=tuple(chunks), **base))
            else:
                for chunk in chunks:
                    units.append(Unit(index=len(units), chunks=(chunk,), **base))
    finally:
        if probe is not None:
            probe.close()
    return Plan(bootstrap=bootstrap, archive_root=archive_root, units=tuple(units))


def _window(probe: TimestampProbe | None, topic: str, partition: int, low: int, high: int,
            start: Bound, stop: Bound) -> PartitionWindow:
    min_ts = start.time_ms if start.kind == "time" else None
    max_ts = stop.time_ms if stop.kind == "time" else None
    # Kafka side
    k_start, k_stop = low, high
    if start.time_ms is not None:
        k_start = probe.offset_for_time(topic, partition, low, high, start.time_ms) if probe and high > low else low
    elif start.kind == "offset":
        given = start.offset_for(partition)
        k_start = given if given is not None else low
    elif start.kind == "latest":
        k_start = high
    if stop.time_ms is not None:
        first = max(low, k_start)
        k_stop = probe.offset_for_time(topic, partition, first, high, stop.time_ms) if probe and high > first \
            else high
    elif stop.kind == "offset":
        given = stop.offset_for(partition)
        k_stop = given if given is not None else high
    elif stop.kind == "earliest":
        k_stop = low
    k_start = min(max(k_start, low), high)  # a range past the end is empty, never a stalled read
    k_stop = min(max(k_stop, k_start), high)
    # archive side: offsets when the bound is an offset, otherwise everything (the time filter decides)
    a_start = start.offset_for(partition) if start.kind == "offset" else None
    a_stop = stop.offset_for(partition) if stop.kind == "offset" else None
    return PartitionWindow(
        kafka=(k_start, k_stop),
        archive=(a_start if a_start is not None else 0, a_stop if a_stop is not None else UNBOUNDED),
        min_ts=min_ts, max_ts=max_ts,
    )


def _merge(topic: str, partition: int, window: PartitionWindow, segments: list[Segment], chunk_size: int,
           *, use_kafka: bool) -> list[Chunk]:
    """Non-overlapping chunks in offset order: archive files where they exist, Kafka in the gaps."""
    k_start, k_stop = window.kafka if use_kafka else (0, 0)
    a_start, a_stop = window.archive
    out: list[Chunk] = []
    cursor = 0

    def kafka_until(limit: int) -> None:
        s, e = max(k_start, cursor), min(k_stop, limit)
        while s < e:
            step = min(e, s + chunk_size)
            out.append(Chunk(source="kafka", topic=topic, partition=partition, start=s, end=step))
            s = step

    for seg in sorted(segments, key=lambda s: (s.first, s.last)):
        s, e = max(seg.first, a_start, cursor), min(seg.last + 1, a_stop)
        if e <= s:
            continue
        kafka_until(s)
        out.append(Chunk(source="archive", topic=topic, partition=partition, start=s, end=e, path=seg.path))
        cursor = e
    kafka_until(UNBOUNDED)
    return out
