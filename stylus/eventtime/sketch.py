"""A bounded histogram of lateness, for picking the watermark delay at a chosen confidence.

Buckets grow geometrically (5% apart), so ~600 counters cover 0 ms to centuries with a relative
error of at most 5%, always rounded up: the estimate errs on the side of waiting longer. Counts
are halved once they pass `max_total`, so the sketch follows a drifting distribution and never grows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

_BASE = 1.05
_LOG_BASE = math.log(_BASE)
_BUCKETS = 640  # 1.05**639 ms is far beyond any sane lateness


def _bucket(lateness_ms: int) -> int:
    """The bucket counting a lateness (ms): 0 for none, then geometric (as `LatenessSketch.add` counts)."""
    if lateness_ms <= 0:
        return 0
    return min(1 + math.ceil(math.log(lateness_ms) / _LOG_BASE - 1e-9), _BUCKETS - 1)


def _upper(index: int) -> int:
    """The largest lateness (ms) counted in bucket `index`; bucket 0 holds lateness 0."""
    return 0 if index == 0 else math.ceil(_BASE ** (index - 1))


class LatenessSketch:
    __slots__ = ("_dirty", "_quantiles", "counts", "max_total", "total")

    def __init__(self, max_total: int = 1_000_000) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0
        self.max_total = max_total
        self._quantiles: dict[float, int] = {}
        self._dirty = True

    def add_in_order(self, n: int = 1) -> None:
        """Records that were not behind the largest event time seen so far (lateness 0)."""
        self.counts[0] += n
        self.total += n
        self._after_add()

    def add(self, lateness_ms: int) -> None:
        if lateness_ms <= 0:  # inline (not `_bucket`): this runs per out-of-order record
            self.counts[0] += 1
        else:
            index = 1 + math.ceil(math.log(lateness_ms) / _LOG_BASE - 1e-9)
            self.counts[min(index, _BUCKETS - 1)] += 1
        self.total += 1
        self._after_add()

    def add_many(self, lateness_ms: Sequence[int]) -> None:
        """`add` for each lateness in order, in one call (a batch engine's records): the same counts, halvings
        included."""
        pos = 0
        while pos < len(lateness_ms):
            take = min(len(lateness_ms) - pos, self.max_total + 1 - self.total)  # this many, then a halving
            counts = self.counts
            for index, n in Counter(map(_bucket, lateness_ms[pos:pos + take])).items():
                counts[index] += n
            self.total += take
            pos += take
            self._after_add()

    def _after_add(self) -> None:
        self._dirty = True
        if self.total > self.max_total:
            self.counts = [c // 2 for c in self.counts]
            self.total = sum(self.counts)

    def quantile(self, confidence: float) -> int:
        """The smallest delay d (ms, rounded up to a bucket bound) with share(lateness > d) <= 1 - confidence."""
        if self._dirty:
            self._quantiles.clear()
            self._dirty = False
        cached = self._quantiles.get(confidence)
        if cached is not None:
            return cached
        need = confidence * self.total
        seen = 0
        result = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= need - 1e-9:
                result = _upper(index)
                break
        self._quantiles[confidence] = result
        return result
