"""The lateness sketch: bounded, rounds up, and answers quantiles of what it saw."""

from __future__ import annotations

import random

from stylus.eventtime.sketch import LatenessSketch


def test_quantile_rounds_up_within_five_percent() -> None:
    rng = random.Random(7)
    values = [int(rng.expovariate(1 / 800)) for _ in range(20_000)]
    sketch = LatenessSketch()
    for v in values:
        sketch.add(v)
    values.sort()
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = values[int(q * len(values)) - 1]
        estimate = sketch.quantile(q)
        assert exact <= estimate <= exact * 1.06 + 1, (q, exact, estimate)
    assert sketch.quantile(1.0) >= values[-1]


def test_zero_lateness_and_bounded_size() -> None:
    sketch = LatenessSketch(max_total=1000)
    for _ in range(5000):
        sketch.add_in_order()
    assert sketch.quantile(0.99) == 0
    assert sketch.total <= 1000  # halved: it keeps following the stream without growing
    for _ in range(5000):
        sketch.add(100)
    assert 100 <= sketch.quantile(0.5) <= 105  # the old in-order mass has decayed away
