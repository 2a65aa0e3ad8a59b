"""A small blocked Bloom filter in pure Python: the "definitely new" fast path of duplicate suppression.

Each item sets `k` bits inside ONE 64-bit word (a "blocked" filter): a lookup is one array read and
one mask compare instead of `k` scattered reads, which is what keeps it cheap in pure Python. Items
come in already hashed (a 128-bit blake2b digest): the low 64 bits pick the word, six bits each of
the high 64 bits pick the bits. A blocked filter needs a few more bits per item than a classic one
for the same false-positive rate; `sizing` finds them from the exact formula.
"""

from __future__ import annotations

import math
from array import array
from functools import lru_cache

_WORD = 64
_LOW64 = (1 << 64) - 1
_MAX_K = 10  # six bits per position: ten positions use 60 of the 64 high bits


def _false_positive_rate(bits_per_item: float, k: int) -> float:
    """Blocked filter: items per word ~ Poisson(64 / bits_per_item); a lookup hits if its k bits are set."""
    lam = _WORD / bits_per_item
    total = 0.0
    weight = math.exp(-lam)  # P(x = 0)
    for x in range(int(lam + 12 * math.sqrt(lam) + 30)):
        if x:
            weight *= lam / x
        total += weight * (1.0 - (1.0 - 1.0 / _WORD) ** (k * x)) ** k
    return total


@lru_cache(maxsize=64)
def sizing(fp_rate: float) -> tuple[int, int]:
    """(bits per item, bits set per item) of the smallest blocked filter meeting `fp_rate`."""
    for bits in range(4, 65):
        best = min(range(1, _MAX_K + 1), key=lambda k: _false_positive_rate(bits, k))
        if _false_positive_rate(bits, best) <= fp_rate:
            return bits, best
    return 64, _MAX_K


class BloomFilter:
    """Answers `may_contain(h)`: False means never added; True means probably added."""

    __slots__ = ("capacity", "count", "k", "nwords", "words")

    def __init__(self, capacity: int, fp_rate: float = 0.01) -> None:
        bits, self.k = sizing(fp_rate)
        self.capacity = max(1, capacity)
        self.nwords = max(1, -(-self.capacity * bits // _WORD))
        self.words = array("Q", bytes(8 * self.nwords))
        self.count = 0  # items added since it was built (duplicates of an item included)

    def _mask(self, high: int) -> int:
        mask = 0
        for _ in range(self.k):
            mask |= 1 << (high & 63)
            high >>= 6
        return mask

    def add(self, h: int) -> None:
        """`h`: a 128-bit hash (int.from_bytes of a 16-byte digest)."""
        index = (h & _LOW64) % self.nwords
        self.words[index] |= self._mask(h >> 64)
        self.count += 1

    def may_contain(self, h: int) -> bool:
        mask = self._mask(h >> 64)
        return self.words[(h & _LOW64) % self.nwords] & mask == mask

    @property
    def full(self) -> bool:
        """More items than it was sized for: its false-positive rate is above the target now."""
        return self.count > self.capacity

    @property
    def size_bytes(self) -> int:
        return 8 * self.nwords
