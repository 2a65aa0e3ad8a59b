"""Which timers the old owner of a partition fired after its state's last save that survived (a backup, or
nothing: a rebuild from the input's start), and after which input record.

Exactly-once outputs carry a deterministic id (`stylus.id`, stylus/runtime/transactions.py) where
`semantics.output_ids` asks for it (`auto`: a processor with timers, the case this module serves; `always`):
`<topic>:<partition>:<offset>:<i>` for the i-th output of an input record and
`<topic>:<partition>:T<ts>:<key>:<i>` for the i-th output of a timer. The outputs of one input partition
appear in each output partition in the order they were made, so reading the output partitions from the
marks saved with the state (the output partitions' starts for a rebuild) tells which timers fired and, for
each, the last input record whose output came before it: the timer fired after that record. The catch-up
replay (replay.py) fires those timers at those points with output suppressed, so they leave the state as the
old owner left it and never fire again. Timers whose `on_timer` emitted nothing leave no trace; they fire
again later (see docs/backups.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range
from stylus.runtime.transactions import ID_HEADER, MARKS_META
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

NEVER = 2**63


@dataclass(frozen=True, order=True)
class FiredTimer:
    anchor: int  # the last input offset known to be processed before the timer fired (-1: none seen)
    timestamp: int
    key: str
    upper: int = NEVER  # the first input offset known to be processed after it fired (NEVER: none seen)


def parse_id(out_id: str, prefix: str) -> tuple[int, None] | tuple[None, tuple[int, str]] | None:
    """(offset, None) for a record's output, (None, (ts, key)) for a timer's, None for anything else."""
    if not out_id.startswith(prefix):
        return None
    rest = out_id[len(prefix):]
    if rest.startswith("T"):
        origin = rest[1:].rsplit(":", 1)[0]  # drop the output index; the key itself may contain ':'
        ts, sep, key = origin.partition(":")
        try:
            return (None, (int(ts), key)) if sep else None
        except ValueError:
            return None
    head = rest.split(":", 1)[0]
    return (int(head), None) if head.isdigit() else None


def timeline(ids_per_partition: list[list[str]], prefix: str) -> list[FiredTimer]:
    """From each output partition's ids (in partition order): every timer with the latest anchor and the
    earliest upper bound any partition shows for it, in (anchor, timestamp, key) order."""
    anchors: dict[tuple[int, str], int] = {}
    uppers: dict[tuple[int, str], int] = {}
    for ids in ids_per_partition:
        last = -1
        seen: set[tuple[int, str]] = set()
        before_next: list[tuple[int, str]] = []  # timers seen since the last record output
        for out_id in ids:
            parsed = parse_id(out_id, prefix)
            if parsed is None:
                continue
            offset, timer = parsed
            if offset is not None:
                last = max(last, offset)
                for waiting in before_next:
                    uppers[waiting] = min(uppers.get(waiting, NEVER), offset)
                before_next.clear()
            elif timer is not None and timer not in seen:  # its first output in this partition
                seen.add(timer)
                before_next.append(timer)
                anchors[timer] = max(anchors.get(timer, -1), last)
    return sorted(FiredTimer(anchor, ts, key, uppers.get((ts, key), NEVER)) for (ts, key), anchor in anchors.items())


def fired_timers(bootstrap: str, store: PartitionStore, topic: str, partition: int, *,
                 timeout: float = 30.0) -> list[FiredTimer]:
    """The timers the partition's previous owners fired since the store's output marks (only a store whose
    exactly-once outputs carry ids keeps marks; for any other nothing is known)."""
    marks: dict[str, int] = store.meta(MARKS_META) or {}
    if not marks:
        return []
    parts = [(t, int(p)) for t, p in (k.rsplit(":", 1) for k in marks)]
    ranges = {}
    for (out_topic, out_partition), (_, high) in end_offsets(bootstrap, parts).items():
        start = marks.get(f"{out_topic}:{out_partition}", high)
        if high > start:
            ranges[(out_topic, out_partition)] = (start, high)
    prefix = f"{topic}:{partition}:"
    raw_prefix = prefix.encode()
    ids: dict[tuple[str, int], list[str]] = {tp: [] for tp in ranges}
    for msg in read_range(bootstrap, ranges, isolation="read_committed", timeout=timeout):
        for name, value in msg.headers() or []:
            if name == ID_HEADER and value is not None and value.startswith(raw_prefix):
                ids[(msg.topic(), msg.partition())].append(value.decode())
    return timeline(list(ids.values()), prefix)
