"""Monoid processors for the monoid tests: records are {"k": key, "n": number}."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stylus import Record
from stylus.monoid import CountMonoid, MaxMonoid, MinMonoid, MonoidProcessor, SumMonoid


def _pair(record: Record) -> Iterable[tuple[str, Any]]:
    return ((str(record.value["k"]), record.value["n"]),)


class PySum(MonoidProcessor):
    """A sum merged by the Python path (no SQL combiner): lock keys, combine, write back."""

    def zero(self) -> Any:
        return 0

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return _pair(record)


class ValueSum(SumMonoid):
    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return _pair(record)


class ValueCount(CountMonoid):
    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return ((str(record.value["k"]), 1),)


class ValueMax(MaxMonoid):
    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return _pair(record)


class ValueMin(MinMonoid):
    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return _pair(record)


class FailsOnNegative(PySum):
    """Adds its delta, then raises for negative numbers: the record's delta must be undone."""

    def process(self, record: Record, ctx: Any) -> None:
        self.accumulate(self.map(record), ctx)
        if record.value["n"] < 0:
            raise ValueError("negative")
