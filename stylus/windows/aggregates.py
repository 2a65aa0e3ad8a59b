"""Incremental aggregations: an accumulator that is plain JSON (it lives in `ctx.state`), updated one
value at a time, mergeable (session windows merge), and turned into a result when emitted.
Every operation returns a new accumulator and never mutates one, so a failing record's state
writes can be rolled back by the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Aggregate:
    """Base: subclasses define `zero`, `add`, `merge`, and optionally `result` and `value_of`."""

    field: str | None = None

    def value_of(self, value: Any) -> Any:
        """The part of a record value this aggregate consumes (`field`, or the whole value)."""
        if self.field is None:
            return value
        return value.get(self.field) if isinstance(value, dict) else None

    def zero(self) -> Any:
        raise TypeError(f"{type(self).__name__} has no zero")

    def add(self, acc: Any, value: Any) -> Any:
        raise TypeError(f"{type(self).__name__} cannot add")

    def merge(self, a: Any, b: Any) -> Any:
        raise TypeError(f"{type(self).__name__} cannot merge (needed by session windows)")

    def result(self, acc: Any) -> Any:
        return acc


class Count(Aggregate):
    def value_of(self, value: Any) -> Any:
        return None

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


class Sum(Aggregate):
    def __init__(self, field: str | None = None) -> None:
        self.field = field

    def zero(self) -> float:
        return 0

    def add(self, acc: float, value: Any) -> float:
        return acc + value if value is not None else acc

    def merge(self, a: float, b: float) -> float:
        return a + b


class Min(Aggregate):
    def __init__(self, field: str | None = None) -> None:
        self.field = field

    def zero(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        if value is None:
            return acc
        return value if acc is None or value < acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return self.add(a, b)


class Max(Min):
    def add(self, acc: Any, value: Any) -> Any:
        if value is None:
            return acc
        return value if acc is None or value > acc else acc


class Mean(Aggregate):
    def __init__(self, field: str | None = None) -> None:
        self.field = field

    def zero(self) -> list[float]:
        return [0, 0]

    def add(self, acc: list[float], value: Any) -> list[float]:
        return acc if value is None else [acc[0] + value, acc[1] + 1]

    def merge(self, a: list[float], b: list[float]) -> list[float]:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: list[float]) -> float | None:
        return acc[0] / acc[1] if acc[1] else None


class TopK(Aggregate):
    """The k items with the highest `by` (an item keeps its best score), highest first.
    Exact: an item that falls out of the top k can only come back with a higher score."""

    def __init__(self, k: int, by: str, item: str) -> None:
        if k < 1:
            raise ValueError("top_k needs k >= 1")
        self.k, self.by, self.item = k, by, item

    def value_of(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return None
        score, item = value.get(self.by), value.get(self.item)
        return None if score is None or item is None else [score, item]

    def zero(self) -> list[list[Any]]:
        return []

    def add(self, acc: list[list[Any]], value: Any) -> list[list[Any]]:
        if value is None:
            return acc
        score, item = value
        for old_score, old_item in acc:
            if old_item == item and old_score >= score:
                return acc
        if len(acc) >= self.k and (-score, str(item)) >= (-acc[-1][0], str(acc[-1][1])) \
                and all(i != item for _, i in acc):
            return acc
        kept = [entry for entry in acc if entry[1] != item] + [[score, item]]
        kept.sort(key=lambda e: (-e[0], str(e[1])))
        return kept[: self.k]

    def merge(self, a: list[list[Any]], b: list[list[Any]]) -> list[list[Any]]:
        for entry in b:
            a = self.add(a, entry)
        return a

    def result(self, acc: list[list[Any]]) -> list[dict[str, Any]]:
        return [{self.item: item, self.by: score} for score, item in acc]


class Reduce(Aggregate):
    """A user reducer: `fn(acc, value) -> acc` from `initial`; `merge(a, b)` for session windows."""

    def __init__(self, fn: Callable[[Any, Any], Any], initial: Any = None, field: str | None = None,
                 merge: Callable[[Any, Any], Any] | None = None) -> None:
        self.fn, self.initial, self.field, self._merge = fn, initial, field, merge

    def zero(self) -> Any:
        return self.initial

    def add(self, acc: Any, value: Any) -> Any:
        return self.fn(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        if self._merge is None:
            raise TypeError("this reducer has no `merge`; session windows need one")
        return self._merge(a, b)
