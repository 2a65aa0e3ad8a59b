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
old owner left it and never fire again. A timer's output also carries the partition's input position when it
fired (`stylus.at`): that point is then exact, not bounded by the record outputs around it, which a
processor that emits only from timers (windows) does not have. Timers whose `on_timer` emitted nothing leave
no trace; they fire again later (see docs/backups.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_range
from stylus.runtime.transactions import ID_HEADER, MARKS_META, POSITION_HEADER
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

NEVER = 2**63


@dataclass(frozen=True, order=True)
class FiredTimer:
    anchor: int  # the last input offset known to be processed before the timer fired (-1: none seen)
    timestamp: int
    key: str
    upper: int = NEVER  # the first input offset known to be processed after it fired (NEVER: none seen)
    exact: bool = False  # fired exactly between `anchor` and `upper` = anchor + 1 (its output said where)


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


def timeline(ids_per_partition: list[list[str]], prefix: str,
             positions: dict[tuple[int, str], int] | None = None) -> list[FiredTimer]:
    """From each output partition's ids (in partition order): every timer with the latest anchor and the
    earliest upper bound any partition shows for it, in (anchor, timestamp, key) order. A timer whose input
    position is known (`positions`, from `stylus.at`) is placed exactly there instead."""
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
    known = positions or {}
    return sorted(FiredTimer(known[t] - 1, t[0], t[1], known[t], exact=True) if t in known else
                  FiredTimer(anchor, t[0], t[1], uppers.get(t, NEVER)) for t, anchor in anchors.items())


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
    positions: dict[tuple[int, str], int] = {}
    for msg in read_range(bootstrap, ranges, isolation="read_committed", timeout=timeout):
        headers = msg.headers() or []
        for name, value in headers:
            if name == ID_HEADER and value is not None and value.startswith(raw_prefix):
                out_id = value.decode()
                ids[(msg.topic(), msg.partition())].append(out_id)
                position = _position(headers)
                parsed = parse_id(out_id, prefix) if position is not None else None
                if parsed is not None and parsed[1] is not None:
                    positions.setdefault(parsed[1], position)  # type: ignore[arg-type]
    return timeline(list(ids.values()), prefix, positions)


def _position(headers: Sequence[tuple[str, bytes | None]]) -> int | None:
    for name, value in headers:
        if name == POSITION_HEADER and value is not None and value.isdigit():
            return int(value)
    return None
