"""QUALIFY's ranking at run time: the rows of a window whose RANK() (or DENSE_RANK()) is at most `limit`, best
first, every tied row kept (stylus/sql/qualify.py plans it).

A ranked entry is `[order values, group values, aggregate results]`, plain JSON (it lives in window state and
travels between stages). Keeping the rows of rank <= n is decomposable: a row's rank among the rows of one
input partition is never more than its rank among all of them, so each partition may keep only its own top
rows, and merging those gives exactly the window's top rows. That is what lets a window stage on several
partitions rank locally and one small stage merge (stylus/sql/final.py), the combiner the hand-written
Nexmark q5 and q7 use, and lets a ranking over group columns keep a handful of rows per window instead of
every group.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from stylus.sql.expr import compile_expr
from stylus.windows.aggregates import Aggregate

Entry = list[Any]  # [order values, group values, aggregate results]
Compare = Callable[[list[Any], list[Any]], int]


def comparator(order: list[list[Any]]) -> Compare:
    """(a, b) -> negative when order values `a` rank before `b`, 0 for a tie, positive after. `order` is the
    plan's `[[expr, desc, nulls_first], ...]`; NULLs go first or last as the plan's ORDER BY says."""
    directions = [(bool(o[1]), bool(o[2])) for o in order]

    def one(x: Any, y: Any, desc: bool, nulls_first: bool) -> int:
        if x == y:
            return 0
        if x is None:
            return -1 if nulls_first else 1
        if y is None:
            return 1 if nulls_first else -1
        if desc:
            return -1 if x > y else 1
        return -1 if x < y else 1

    if len(directions) == 1:
        ((desc, nulls_first),) = directions
        return lambda a, b: one(a[0], b[0], desc, nulls_first)

    def many(a: list[Any], b: list[Any]) -> int:
        for x, y, (desc, nulls_first) in zip(a, b, directions, strict=True):
            c = one(x, y, desc, nulls_first)
            if c:
                return c
        return 0

    return many


class TiedTop(Aggregate):
    """The entries of rank <= `limit`, best first (a list, never changed in place: the engine's per-record
    rollback keeps the old one). `add` merges a list of entries (another partition's top rows); an entry whose
    group values equal a kept one's is the same group (GROUP BY) and is not kept twice."""

    def __init__(self, limit: int, dense: bool, compare: Compare) -> None:
        self.limit, self.dense, self.compare = limit, dense, compare

    def zero(self) -> list[Entry]:
        return []

    def add(self, acc: list[Entry], entries: Any) -> list[Entry]:
        return self.merge(acc, entries or [])

    def merge(self, a: list[Entry], b: list[Entry]) -> list[Entry]:
        for entry in b:
            a = self.insert(a, entry)
        return a

    def insert(self, acc: list[Entry], entry: Entry) -> list[Entry]:
        """`acc` with `entry` if it ranks <= limit (and the entries it pushes past the limit out)."""
        compare, values = self.compare, entry[0]
        if acc:
            if compare(values, acc[-1][0]) > 0 and self._full(acc):
                return acc  # ranks after every kept entry, which already fill the ranks
            groups = entry[1]
            if any(e[1] == groups for e in acc):
                return acc  # this group is kept already (its order values are its own: the same entry)
        at = len(acc)
        while at and compare(values, acc[at - 1][0]) < 0:
            at -= 1
        return self.trim([*acc[:at], entry, *acc[at:]])

    def _full(self, acc: list[Entry]) -> bool:
        if not self.dense:
            return len(acc) >= self.limit
        distinct = 1
        for before, after in itertools.pairwise(acc):
            if self.compare(before[0], after[0]):
                distinct += 1
        return distinct >= self.limit

    def trim(self, ranked: list[Entry]) -> list[Entry]:
        """The entries of rank <= limit of a list sorted best first."""
        rank = 1
        for i in range(1, len(ranked)):
            if self.compare(ranked[i - 1][0], ranked[i][0]):
                rank = rank + 1 if self.dense else i + 1
                if rank > self.limit:
                    return ranked[:i]
        return ranked

    def rank(self, entries: list[Entry]) -> list[Entry]:
        """All the groups of a closed window (each once) ranked, best first, cut at the limit."""
        compare = self.compare

        def by_order(a: Entry, b: Entry) -> int:
            return compare(a[0], b[0])

        return self.trim(sorted(entries, key=functools.cmp_to_key(by_order)))


class TiedTopRows(TiedTop):
    """The bounded form: `add` takes an input row, whose order and group values come from it (the group values
    only when the row is kept: most rows of a window rank too low, and cost one comparison with the last kept)."""

    def __init__(self, limit: int, dense: bool, compare: Compare, order_of: Callable[[Any], list[Any]],
                 groups_of: Callable[[Any], list[Any]], ranks_after: Callable[[Any, list[Any]], bool]) -> None:
        super().__init__(limit, dense, compare)
        self.order_of, self.groups_of, self.ranks_after = order_of, groups_of, ranks_after

    def add(self, acc: list[Entry], row: Any) -> list[Entry]:
        if acc and self.ranks_after(row, acc[-1][0]) and self._full(acc):
            return acc
        return self.insert(acc, [self.order_of(row), self.groups_of(row), []])


def top_for(plan: Mapping[str, Any]) -> TiedTop:
    """The merging aggregate of a planned QUALIFY."""
    return TiedTop(int(plan["limit"]), plan["function"] == "dense_rank", comparator(plan["order"]))


def top_rows_for(plan: Mapping[str, Any], groups: list[Any], udfs: Mapping[str, Any]) -> TiedTopRows:
    """The bounded aggregate of a planned QUALIFY (`plan["bounded"]`): rows in, ranked entries kept."""
    fns = [compile_expr(ir, udfs) for ir in plan["order_input"]]
    compare = comparator(plan["order"])
    return TiedTopRows(int(plan["limit"]), plan["function"] == "dense_rank", compare, _values(fns),
                       _values([compile_expr(ir, udfs) for ir in groups]), _ranks_after(fns, plan["order"], compare))


def _ranks_after(fns: list[Callable[[Any], Any]], order: list[list[Any]],
                 compare: Compare) -> Callable[[Any, list[Any]], bool]:
    """(row, order values) -> whether the row ranks strictly after them; for one ORDER BY column without a
    list per row (q7's `price DESC`: one comparison for most bids)."""
    if len(fns) != 1:
        return lambda row, last: compare([f(row) for f in fns], last) > 0
    (f,) = fns
    desc = bool(order[0][1])

    def after(row: Any, last: list[Any]) -> bool:
        x, y = f(row), last[0]
        if x is None or y is None:
            return compare([x], last) > 0
        return x < y if desc else x > y

    return after


def _values(fns: list[Callable[[Any], Any]]) -> Callable[[Any], list[Any]]:
    if len(fns) == 1:
        (f,) = fns
        return lambda r: [f(r)]
    return lambda r: [f(r) for f in fns]


class Qualifier:
    """QUALIFY over the groups of one closed window (the unbounded form: aggregates, HAVING, or a ranking on
    them): per PARTITION BY value, the ranked entries."""

    def __init__(self, plan: Mapping[str, Any], udfs: Mapping[str, Any]) -> None:
        self.top = top_for(plan)
        self.partition = [compile_expr(ir, udfs) for ir in plan["partition"]]
        self.order = _values([compile_expr(o[0], udfs) for o in plan["order"]])

    def rank(self, groups: list[tuple[list[Any], list[Any]]], start: int, end: int) -> dict[str, list[Entry]]:
        """(group values, aggregate results) of every group kept by HAVING -> partition key -> ranked entries."""
        parts: dict[str, list[Entry]] = {}
        partition = self.partition
        for values, results in groups:
            row = (values, results, start, end)
            key = orjson.dumps([f(row) for f in partition]).decode() if partition else ""
            parts.setdefault(key, []).append([self.order(row), values, results])
        return {key: self.top.rank(entries) for key, entries in parts.items()}
