"""User functions the SQL tests register with CREATE FUNCTION."""

from __future__ import annotations

from typing import Any


def bucket(score: float | None) -> str | None:
    """A scalar UDF: a score's band."""
    if score is None:
        return None
    return "high" if score >= 7 else "mid" if score >= 3 else "low"


class Spread:
    """A UDAF (the window Aggregate interface): max - min of the values, as [lo, hi] until the result."""

    def zero(self) -> list[Any]:
        return [None, None]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        if value is None:
            return acc
        lo, hi = acc
        return [value if lo is None or value < lo else lo, value if hi is None or value > hi else hi]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return self.add(self.add(a, b[0]), b[1])

    def result(self, acc: list[Any]) -> Any:
        return None if acc[0] is None else round(acc[1] - acc[0], 6)
