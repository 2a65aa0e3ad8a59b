"""The Scorer's long-term expectation for one key: an exponentially decayed average of the counts of
its closed sliding windows, and the trend score of an open window against it.

Pure functions on plain JSON (the history lives in `ctx.state`), so the arithmetic is tested on its
own and the Scorer stays a thin layer over the windows library.

A history is `[avg, k, to, last]`: `avg` the decayed average count per window (bias-corrected by
`1 - (1 - alpha) ** k` when read), `k` the windows folded in, `to` the end of the newest window folded,
`last` the end of the newest folded window that held data (None before any). Window ends are
multiples of `slide`; a window ending at `end` covers `[end - size, end)`.

The partition's `origin` (the end of its first, partial slide) bounds everything: windows are only
observed from there on, so a window reaching back before it is scaled up to a full window's count,
and a new key's history counts the windows since the origin as empty ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

History = list[Any]  # [avg: float, k: int, to: int, last: int | None]


@dataclass(frozen=True)
class Decay:
    """`size`/`slide` (ms) of the short window, `alpha` the weight of each new window end, `ttl` (ms)
    the idle time after which a key's history starts again from nothing."""

    size: int
    slide: int
    alpha: float
    ttl: int

    def __post_init__(self) -> None:
        if self.slide <= 0 or self.size < self.slide or not 0.0 < self.alpha <= 1.0 or self.ttl <= 0:
            raise ValueError("trend history needs 0 < slide <= size, 0 < alpha <= 1 and ttl > 0")

    def start(self, origin: int) -> History:
        """A key with no history yet (or whose history expired)."""
        return [0.0, 0, origin, None]

    def fold(self, hist: History, end: int, count: int, origin: int) -> History:
        """`hist` with the closed window ending at `end` (holding `count` > 0) folded in; the windows
        between the last one folded and `end` held nothing. A gap longer than `ttl` restarts it."""
        avg, k, to, last = hist
        if last is not None and end - last > self.ttl:
            avg, k, to = 0.0, 0, origin
        q = 1.0 - self.alpha
        empty = (end - to) // self.slide - 1
        if empty > 0:
            avg *= q**empty
            k += empty
        full = count * self.size / min(self.size, end - origin)  # a window cut by the origin, scaled up
        return [q * avg + self.alpha * full, k + 1, end, end]

    def expected(self, hist: History, end: int, origin: int) -> float | None:
        """The expected count of a full window ending at `end`, from the windows that ended before it
        began (nothing it holds feeds its own expectation); None without any history."""
        avg, k, to, last = hist
        if last is not None and end - last > self.ttl:  # idle too long: as if forgotten
            avg, k, to = 0.0, 0, origin
        q = 1.0 - self.alpha
        empty = (end - self.size - to) // self.slide
        if empty > 0:
            avg *= q**empty
            k += empty
        if k <= 0:
            return None
        return float(avg / (1.0 - q**k))


def trend_score(decay: Decay, hist: History, closed: list[list[int]], end: int, count: float, newest: int,
                origin: int) -> float:
    """How far `count` (the open window ending at `end`, observed up to event time `newest`) is above
    what the key usually gets, in Poisson standard deviations; 0 without history. `closed` are the
    key's windows with data that ended after `hist` and before this window began, oldest first."""
    for window_end, window_count in closed:
        hist = decay.fold(hist, window_end, window_count, origin)
    per_window = decay.expected(hist, end, origin)
    if per_window is None:
        return 0.0
    seen_from = max(end - decay.size, origin)
    covered = min(end, newest + 1) - seen_from  # a window still filling is not read as a drop
    expected = per_window * max(covered, 0) / decay.size
    return (count - expected) / math.sqrt(expected + 1.0)
