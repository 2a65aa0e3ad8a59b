"""The Scorer's decayed history (processors/trend_history.py): pure arithmetic, checked by hand."""

from __future__ import annotations

import math

import pytest

from processors.trend_history import Decay, trend_score

D = Decay(size=10, slide=2, alpha=0.5, ttl=100)


def test_fold_decays_the_empty_windows_between_and_scales_windows_cut_by_the_origin() -> None:
    hist = D.fold(D.start(0), 4, 2, origin=0)  # window [-6, 4) seen for 4 ms only: 2 -> 5 per full window
    assert hist == [pytest.approx(0.5 * 0 + 0.5 * 5), 2, 4, 4]  # the window ending at 2 held nothing
    hist = D.fold(hist, 20, 10, origin=0)  # 7 empty windows (6..18), then 10
    assert hist == [pytest.approx(0.5 * (2.5 * 0.5**7) + 0.5 * 10), 10, 20, 20]


def test_a_gap_longer_than_ttl_starts_the_history_again() -> None:
    hist = D.fold(D.start(0), 10, 8, origin=0)
    within = D.fold(hist, 110, 4, origin=0)  # 100 after the last: still remembered
    assert within[0] == pytest.approx(0.5 * 4 * 0.5 ** 49 + 0.5 * 4)
    restarted = D.fold(hist, 112, 4, origin=0)  # 102 after: as if the key were new (empty since the origin)
    assert restarted == [pytest.approx(2.0), 56, 112, 112] == D.fold(D.start(0), 112, 4, origin=0)


def test_expected_counts_only_windows_that_ended_before_this_one_began() -> None:
    hist = [3.0, 4, 20, 20]  # avg 3 over 4 windows: 3 / (1 - 0.5**4) = 3.2 per window
    assert D.expected(hist, 30, origin=0) == pytest.approx(3.2)  # began at 20: nothing newer to add
    assert D.expected(hist, 32, origin=0) == pytest.approx(1.5 / (1 - 0.5**5))  # the window ending at 22 was empty
    assert D.expected(D.start(0), 10, origin=0) is None  # nothing before it
    assert D.expected(D.start(0), 14, origin=0) == 0.0  # two empty windows: expects nothing
    assert D.expected(hist, 121, origin=0) == 0.0  # idle more than ttl: forgotten


def test_trend_score_at_expectation_is_zero_and_grows_with_the_excess() -> None:
    hist = [3.0, 4, 20, 20]  # 3.2 per window
    assert trend_score(D, hist, [], 30, 3, newest=29, origin=0) == pytest.approx((3 - 3.2) / math.sqrt(4.2))
    assert trend_score(D, hist, [], 30, 20, newest=29, origin=0) == pytest.approx(16.8 / math.sqrt(4.2))
    # half the window seen so far: half the count is expected
    assert trend_score(D, hist, [], 30, 1.6, newest=24, origin=0) == pytest.approx(0.0)
    assert trend_score(D, D.start(0), [], 10, 50, newest=9, origin=0) == 0.0  # no history: no score


def test_closed_windows_given_later_fold_exactly_like_the_ones_already_folded() -> None:
    """Open windows read at scoring time and windows folded when they closed give the same bits."""
    base = D.fold(D.start(0), 6, 3, origin=0)
    folded = D.fold(D.fold(base, 12, 7, origin=0), 14, 1, origin=0)
    assert trend_score(D, folded, [], 26, 9, newest=25, origin=0) == \
        trend_score(D, base, [[12, 7], [14, 1]], 26, 9, newest=25, origin=0)


def test_decay_refuses_bad_settings() -> None:
    for size, slide, alpha, ttl in ((10, 0, 0.5, 1), (2, 4, 0.5, 1), (10, 2, 0.0, 1), (10, 2, 1.5, 1), (10, 2, 0.5, 0)):
        with pytest.raises(ValueError):
            Decay(size, slide, alpha, ttl)
