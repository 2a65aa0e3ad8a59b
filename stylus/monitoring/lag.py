"""Processing lag from Kafka alone: committed offsets, true end offsets, and the age of the oldest
record not yet processed. This is what `stylus lag` prints and what the status page polls.

Lag in seconds is `now - timestamp(first unprocessed record)`, zero when caught up: the record at the
committed offset is read (by assignment, no group join). A guess from rates would hide a stalled
processor on a quiet topic; the record's own timestamp does not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, TopicPartition

from stylus.config.model import Pipeline
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.reader import read_range
from stylus.kafka.settings import client_config

TP = tuple[str, int]


@dataclass(frozen=True)
class PartitionLag:
    processor: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed; it starts from the earliest offset
    low: int
    end: int
    lag_messages: int
    lag_seconds: float
    oldest_unprocessed_ms: int | None  # timestamp of the record at the committed offset, if lagging

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def committed_offsets(bootstrap: str, pipeline: Pipeline, processor: str, partitions: Iterable[TP],
                      timeout: float = 10.0) -> dict[TP, int | None]:
    """The processor's consumer-group offsets; reading them does not join the group."""
    wanted = [TopicPartition(t, p) for t, p in partitions]
    if not wanted:
        return {}
    config = client_config("consumer", bootstrap, pipeline, processor,
                           **{"group.id": pipeline.group_id(processor),
                              "client.id": f"stylus-lag-{uuid.uuid4().hex[:6]}"})
    consumer = Consumer(config)
    try:
        result = consumer.committed(wanted, timeout=timeout)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in result}


def first_timestamps(bootstrap: str, starts: dict[TP, tuple[int, int]], timeout: float = 10.0) -> dict[TP, int]:
    """Timestamp (ms) of the first readable record at or after `start`, for each (start, end) range.

    Reads uncommitted so an open transaction cannot hide the backlog's age; stops at the first
    record of each partition."""
    found: dict[TP, int] = {}
    todo = {tp: rng for tp, rng in starts.items() if rng[1] > rng[0]}
    if not todo:
        return found
    reader = read_range(bootstrap, todo, isolation="read_uncommitted", timeout=timeout)
    try:
        for msg in reader:
            key = (msg.topic(), msg.partition())
            if key not in found:
                found[key] = msg.timestamp()[1]
                if len(found) == len(todo):
                    break
    finally:
        close = getattr(reader, "close", None)  # a generator: closing it closes its consumer now
        if close is not None:
            close()
    return found


def age_seconds(timestamp_ms: int | None, now: float) -> float:
    """Age of a record at wall-clock `now`; never negative (producer clocks may run ahead)."""
    if timestamp_ms is None:
        return 0.0
    return max(0.0, now - timestamp_ms / 1000.0)


def pipeline_lag(pipeline: Pipeline, bootstrap: str, processors: Iterable[str] | None = None,
                 *, timeout: float = 10.0, now: float | None = None) -> list[PartitionLag]:
    """Per processor and input partition, in topological order."""
    names = list(processors) if processors is not None else pipeline.topological_order()
    inputs = sorted({t for n in names for t in pipeline.processors[n].inputs})
    parts = topic_partitions(bootstrap, inputs, timeout=timeout)
    ends = end_offsets(bootstrap, parts, timeout=timeout)
    by_topic: dict[str, list[TP]] = {}
    for tp in parts:
        by_topic.setdefault(tp[0], []).append(tp)
    positions: dict[tuple[str, TP], tuple[int | None, int]] = {}
    for name in names:
        mine = [tp for t in pipeline.processors[name].inputs for tp in by_topic.get(t, [])]
        committed = committed_offsets(bootstrap, pipeline, name, mine, timeout=timeout)
        for tp in mine:
            low, _ = ends[tp]
            offset = committed.get(tp)
            positions[(name, tp)] = (offset, low if offset is None else max(offset, low))
    # one read per distinct (partition, position); a partition read at two positions takes two rounds
    rounds: list[dict[TP, tuple[int, int]]] = []
    for tp, position in sorted({(tp, pos) for (_, tp), (_, pos) in positions.items() if pos < ends[tp][1]}):
        free = next((r for r in rounds if tp not in r), None)
        if free is None:
            free = {}
            rounds.append(free)
        free[tp] = (position, ends[tp][1])
    stamps: dict[tuple[TP, int], int] = {}
    for ranges in rounds:
        for tp, ts in first_timestamps(bootstrap, ranges, timeout=timeout).items():
            stamps[(tp, ranges[tp][0])] = ts
    clock = time.time() if now is None else now
    rows: list[PartitionLag] = []
    for (name, tp), (offset, position) in positions.items():
        low, end = ends[tp]
        lag = max(0, end - position)
        oldest = stamps.get((tp, position)) if lag else None
        rows.append(PartitionLag(name, tp[0], tp[1], offset, low, end, lag,
                                 age_seconds(oldest, clock) if lag else 0.0, oldest))
    return rows


def format_table(rows: list[PartitionLag]) -> str:
    """A fixed-width table, one line per processor and partition, with a total per processor."""
    header = ("processor", "topic", "partition", "committed", "end", "lag", "lag_seconds")
    lines = [header]
    totals: dict[str, tuple[int, float]] = {}
    for r in rows:
        lines.append((r.processor, r.topic, str(r.partition), "-" if r.committed is None else str(r.committed),
                      str(r.end), str(r.lag_messages), f"{r.lag_seconds:.1f}"))
        msgs, secs = totals.get(r.processor, (0, 0.0))
        totals[r.processor] = (msgs + r.lag_messages, max(secs, r.lag_seconds))
    for name, (msgs, secs) in totals.items():
        lines.append((name, "(total)", "*", "", "", str(msgs), f"{secs:.1f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {2, 3, 4, 5, 6}
    out = []
    for line in lines:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"
