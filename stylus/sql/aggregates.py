"""SQL aggregates as window aggregates (`stylus.windows.aggregates.Aggregate`: zero/add/merge/result over plain
JSON accumulators, never mutated in place), so a SQL table's windows are the window machinery's own.

COUNT(*), SUM, MIN, MAX and AVG are the window package's Count, Sum, Min, Max and Mean; what SQL adds is
here: COUNT(col) (non-NULL values), COUNT(DISTINCT col), topk(col, k) in GROUP BY form (the k largest
distinct values), a user's UDAF, and `Columns`, the several aggregates of one SELECT as one accumulator.
"""

from __future__ import annotations

from typing import Any

import orjson

from stylus.windows.aggregates import Aggregate, Count, Max, Mean, Min, Sum, TopK


class CountValues(Aggregate):
    """COUNT(col): the rows where `col` is not NULL."""

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc if value is None else acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


def _distinct_key(value: Any) -> str:
    """A JSON value as a dict key, equal for values SQL calls equal (1 and 1.0), distinct across types."""
    if type(value) is str:
        return "'" + value
    if type(value) is float and value.is_integer():
        value = int(value)
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class CountDistinct(Aggregate):
    """COUNT(DISTINCT col): the accumulator is the set of values seen, as a JSON object (keys only)."""

    def zero(self) -> dict[str, int]:
        return {}

    def add(self, acc: dict[str, int], value: Any) -> dict[str, int]:
        if value is None:
            return acc
        key = _distinct_key(value)
        if key in acc:
            return acc  # unchanged: no copy
        return {**acc, key: 1}

    def merge(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {**a, **b}

    def result(self, acc: dict[str, int]) -> int:
        return len(acc)


class TopValues(TopK):
    """topk(col, k) with GROUP BY: the k largest distinct values of `col`, largest first."""

    def __init__(self, k: int) -> None:
        super().__init__(k, "value", "value")

    def add(self, acc: list[list[Any]], value: Any) -> list[list[Any]]:
        return acc if value is None else super().add(acc, [value, value])

    def merge(self, a: list[list[Any]], b: list[list[Any]]) -> list[list[Any]]:
        for score, _ in b:
            a = self.add(a, score)
        return a

    def result(self, acc: list[list[Any]]) -> list[Any]:
        return [score for score, _ in acc]


class UserAggregate(Aggregate):
    """A UDAF registered with CREATE FUNCTION: any object with `zero()`, `add(acc, value)`, `merge(a, b)` and
    optionally `result(acc)` (the Aggregate interface). It gets one value per row: the argument, a list of
    the arguments when there are several, None for none."""

    def __init__(self, impl: Any) -> None:
        self.impl = impl
        self._result = getattr(impl, "result", None)

    def zero(self) -> Any:
        return self.impl.zero()

    def add(self, acc: Any, value: Any) -> Any:
        return self.impl.add(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        return self.impl.merge(a, b)

    def result(self, acc: Any) -> Any:
        return acc if self._result is None else self._result(acc)


class Columns(Aggregate):
    """The aggregates of one SELECT as one accumulator, a list with one entry each; `add` takes the list of
    their input values for a row."""

    def __init__(self, parts: list[Aggregate]) -> None:
        self.parts = parts

    def zero(self) -> list[Any]:
        return [p.zero() for p in self.parts]

    def add(self, acc: list[Any], values: list[Any]) -> list[Any]:
        return [p.add(a, v) for p, a, v in zip(self.parts, acc, values, strict=True)]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [p.merge(x, y) for p, x, y in zip(self.parts, a, b, strict=True)]

    def result(self, acc: list[Any]) -> list[Any]:
        return [p.result(a) for p, a in zip(self.parts, acc, strict=True)]


def build_aggregate(spec: dict[str, Any], udafs: dict[str, Any]) -> Aggregate:
    """One planned aggregate (`{"fn": ..., "k": ..., "name": ...}`) as a window Aggregate."""
    fn = spec["fn"]
    if fn == "count_star":
        return Count()
    if fn == "count":
        return CountValues()
    if fn == "count_distinct":
        return CountDistinct()
    if fn == "sum":
        return Sum()
    if fn == "min":
        return Min()
    if fn == "max":
        return Max()
    if fn == "avg":
        return Mean()
    if fn == "topk":
        return TopValues(int(spec["k"]))
    if fn == "udaf":
        return UserAggregate(udafs[spec["name"]])
    raise ValueError(f"unknown aggregate {fn!r}")
