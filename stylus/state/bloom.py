"""A small blocked Bloom filter in pure Python: the "definitely new" fast path of duplicate suppression.

Each item sets `k` bits inside ONE 64-bit word (a "blocked" filter), and the k bits come as one
precomputed pattern (one of 16384 masks of k distinct bits): a lookup is one array read, one table
read and one compare instead of `k` scattered reads, which is what keeps it cheap in pure Python.
Items come in already hashed (a 128-bit blake2b digest): the low 64 bits pick the word, the next
14 bits the pattern. A blocked filter needs a few more bits per item than a classic one for the same
false-positive rate; `sizing` finds them from the exact formula (the finite pattern table adds about
items-per-word / 16384, ~0.03 percentage points, to it).
"""

from __future__ import annotations

import math
import random
from array import array
from functools import lru_cache

_WORD = 64
LOW64 = (1 << 64) - 1
_MAX_K = 16
_PATTERN_BITS = 14
PATTERN_MASK = (1 << _PATTERN_BITS) - 1


def _false_positive_rate(bits_per_item: float, k: int) -> float:
    """Blocked filter: items per word ~ Poisson(64 / bits_per_item); a lookup hits if its k bits are set."""
    lam = _WORD / bits_per_item
    total = 0.0
    weight = math.exp(-lam)  # P(x = 0)
    for x in range(int(lam + 12 * math.sqrt(lam) + 30)):
        if x:
            weight *= lam / x
        total += weight * (1.0 - (1.0 - 1.0 / _WORD) ** (k * x)) ** k
    return total + lam / (1 << _PATTERN_BITS)  # an item with the same word and pattern: a sure hit


@lru_cache(maxsize=64)
def sizing(fp_rate: float) -> tuple[int, int]:
    """(bits per item, bits set per item) of the smallest blocked filter meeting `fp_rate`."""
    for bits in range(4, 65):
        best = min(range(1, _MAX_K + 1), key=lambda k: _false_positive_rate(bits, k))
        if _false_positive_rate(bits, best) <= fp_rate:
            return bits, best
    return 64, _MAX_K


@lru_cache(maxsize=_MAX_K)
def patterns(k: int) -> tuple[int, ...]:
    """The 16384 masks of `k` distinct bits in a 64-bit word. Fixed seed, though nothing persisted depends
    on it: a filter is rebuilt from the stored ids whenever a partition opens."""
    rng = random.Random(0x5717_1D5 + k)
    return tuple(sum(1 << bit for bit in rng.sample(range(_WORD), k)) for _ in range(1 << _PATTERN_BITS))


class BloomFilter:
    """Answers `may_contain(h)`: False means never added; True means probably added."""

    __slots__ = ("capacity", "count", "k", "nwords", "patterns", "words")

    def __init__(self, capacity: int, fp_rate: float = 0.01) -> None:
        bits, self.k = sizing(fp_rate)
        self.capacity = max(1, capacity)
        self.nwords = max(1, -(-self.capacity * bits // _WORD))
        self.words = array("Q", bytes(8 * self.nwords))
        self.patterns = patterns(self.k)
        self.count = 0  # items added since it was built (duplicates of an item included)

    def add(self, h: int) -> None:
        """`h`: a 128-bit hash (int.from_bytes of a 16-byte digest)."""
        self.words[(h & LOW64) % self.nwords] |= self.patterns[(h >> 64) & PATTERN_MASK]
        self.count += 1

    def may_contain(self, h: int) -> bool:
        mask = self.patterns[(h >> 64) & PATTERN_MASK]
        return self.words[(h & LOW64) % self.nwords] & mask == mask

    @property
    def full(self) -> bool:
        """More items than it was sized for: its false-positive rate is above the target now."""
        return self.count > self.capacity

    @property
    def size_bytes(self) -> int:
        return 8 * self.nwords
