"""The pure-Python blocked Bloom filter of duplicate suppression: no false negatives, and a measured
false-positive rate near the target it was sized for."""

from __future__ import annotations

from hashlib import blake2b

import pytest

from stylus.state.bloom import BloomFilter, patterns, sizing


def h(text: str) -> int:
    return int.from_bytes(blake2b(text.encode(), digest_size=16).digest(), "little")


@pytest.mark.parametrize("fp_rate", [0.05, 0.01, 0.001])
def test_no_false_negatives_and_the_false_positive_rate_it_was_sized_for(fp_rate: float) -> None:
    bloom = BloomFilter(20_000, fp_rate)
    for i in range(20_000):
        bloom.add(h(f"in{i}"))
    assert all(bloom.may_contain(h(f"in{i}")) for i in range(20_000))
    rate = sum(bloom.may_contain(h(f"out{i}")) for i in range(100_000)) / 100_000
    assert fp_rate / 3 < rate < fp_rate * 1.5
    assert not bloom.full
    bloom.add(h("one more"))
    assert bloom.full


def test_sizing_and_patterns() -> None:
    bits, k = sizing(0.01)
    assert 10 <= bits <= 14 and 4 <= k <= 8  # a blocked filter costs a little more than a classic one (~9.6)
    assert sizing(0.001)[0] > bits
    masks = patterns(k)
    assert len(masks) == 16384 and all(bin(mask).count("1") == k for mask in masks)
    assert patterns(k) == masks  # fixed seed: the same filter layout in every process
    assert BloomFilter(1).nwords == 1 and BloomFilter(1_000_000).size_bytes < 2_000_000
