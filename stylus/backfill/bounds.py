"""The `--from` / `--to` values of `stylus backfill` and `stylus replay` (one syntax; docs/reference.md, "CLI"):

    earliest | latest          the partition's first record / its end
    offset:N                   offset N in every partition
    offset:0=N,3=M             per-partition offsets (partitions not named: earliest for --from, latest for --to)
    2024-05-01T12:00:00Z       an ISO-8601 time (no zone = UTC), or a date 2024-05-01 (midnight UTC)
    1714564800000              epoch milliseconds (a bare integer)
    now | now-2h               relative to the wall clock, with a duration like 500ms, 2s, 5m, 1h, 1d

`--from` is inclusive, `--to` exclusive. A time bound selects records by their Kafka timestamp.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from stylus.config.durations import parse_duration


class Bound(BaseModel):
    """One end of a range: an offset position (`kind="offset"`) or a time in epoch ms (`kind="time"`)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["earliest", "latest", "offset", "time"]
    offsets: dict[int, int] = {}  # kind=offset: partition -> offset; key -1 means every partition
    time_ms: int | None = None

    def offset_for(self, partition: int) -> int | None:
        if partition in self.offsets:
            return self.offsets[partition]
        return self.offsets.get(-1)


_NOW = re.compile(r"^now(?:\s*-\s*(.+))?$")


def parse_bound(text: str | None, *, default: Literal["earliest", "latest"]) -> Bound:
    """Parse one bound; raises ValueError with the accepted forms on anything else."""
    if text is None or text.strip() == "":
        return Bound(kind=default)
    value = text.strip()
    lower = value.lower()
    if lower in ("earliest", "latest"):
        return Bound(kind=lower)
    if lower.startswith("offset:"):
        return Bound(kind="offset", offsets=_parse_offsets(value[7:]))
    if re.fullmatch(r"\d+", value):
        return Bound(kind="time", time_ms=int(value))
    match = _NOW.match(lower)
    if match:
        delta = parse_duration(match.group(1)) if match.group(1) else 0.0
        return Bound(kind="time", time_ms=int((time.time() - delta) * 1000))
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a range bound; use earliest, latest, offset:N, offset:0=N,1=M, an ISO time "
            "(2024-05-01T12:00:00Z), a date, epoch milliseconds, now or now-1h"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Bound(kind="time", time_ms=int(moment.timestamp() * 1000))


def _parse_offsets(spec: str) -> dict[int, int]:
    spec = spec.strip()
    if re.fullmatch(r"\d+", spec):
        return {-1: int(spec)}
    out: dict[int, int] = {}
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*=\s*(\d+)\s*", part)
        if not match:
            raise ValueError(f"offset:{spec} must be offset:N or offset:PARTITION=N,PARTITION=N")
        out[int(match.group(1))] = int(match.group(2))
    return out
