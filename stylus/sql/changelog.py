"""`SqlChangelogStage`: a GROUP BY without a window (stylus/sql/grouped.py plans it; docs/sql.md, "Changelog
tables"). A `MonoidProcessor`: a group's state is the list of its aggregates' accumulators, combined with the
aggregates' own `merge`, so it runs on local RocksDB state or on PostgreSQL (`state.backend: postgres`, where a
checkpoint merges each touched group's delta in one transaction with the input offsets).

Per input row: WHERE, the group's key (the window key's text, stylus/sql/stage.py `_keyer`), the row's delta
(its aggregates' `add` onto their zeros), the group's row before and after; when the row changed (a new group,
or an aggregate's result moved), the new row is emitted, keyed by the group, with the input record's timestamp.

Every row of a group reaches one input partition (the expansion shuffles by group unless the input is keyed by a
group column), so a partition's view of its groups is the whole truth: on RocksDB the stored value; on
PostgreSQL the committed value (read once per group and checkpoint) combined with the partition's pending deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from stylus.api import Context, Record
from stylus.monoid import MonoidProcessor
from stylus.monoid.state import DeltaState
from stylus.sql.aggregates import Columns, build_aggregate
from stylus.sql.expr import compile_expr
from stylus.sql.stage import _aggregate_input, _keyer, _not_a_row, group_key, plan_of
from stylus.sql.udfs import load
from stylus.windows.aggregates import Count

_CACHED_PARTITIONS = 64  # per-partition caches of current rows kept before they are all dropped


class SqlChangelogStage(MonoidProcessor):
    """A GROUP BY without a window on monoid state: each group's row, emitted whenever it changes."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        plan = plan_of(self.config)
        if plan["kind"] != "changelog":
            raise ValueError(f"SqlChangelogStage runs GROUP BY tables without a window, not a `{plan['kind']}` plan")
        udfs, udafs = load(plan.get("functions") or {})
        specs = plan["aggregates"]
        # GROUP BY only: a count the row does not show, so a group's row is new once and then never changes
        self._columns = Columns([build_aggregate(a, udafs) for a in specs] or [Count()])
        self._inputs = [_aggregate_input(a, udfs) for a in specs] or [lambda v: None]
        self._where = compile_expr(plan["where"], udfs) if plan.get("where") is not None else None
        self._n_groups = len(plan["group"])
        self._group_fns = [compile_expr(g, udfs) for g in plan["group"]]
        self._key = _keyer(self._group_fns)
        self._select = [(n, compile_expr(ir, udfs)) for n, ir in plan["select"]]
        # PostgreSQL: per partition state, the current values of the groups touched since its last checkpoint
        self._current: dict[int, tuple[DeltaState, dict[str, Any], dict[str, Any]]] = {}

    # ------------------------------------------------------------------ the monoid
    def zero(self) -> list[Any]:
        return self._columns.zero()

    def combine(self, a: list[Any], b: list[Any]) -> list[Any]:
        return self._columns.merge(a, b)

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        found = self._delta(record)
        return () if found is None else (found[:2],)

    # ------------------------------------------------------------------ rows in, rows out
    def is_late(self, event_time: int, watermark: int) -> bool:
        """Never: a group has no window to have closed."""
        return False

    def process(self, record: Record, ctx: Context) -> None:
        found = self._delta(record)
        if found is None:
            return
        key, delta, groups = found
        state = ctx.state
        if isinstance(state, DeltaState):
            current = self._current_rows(state)
            before = current[key] if key in current else state.get(key)
            state.add(key, delta)
        else:
            current = None
            before = state.get(key)
        after = self.combine(self.zero() if before is None else before, delta)
        if not isinstance(state, DeltaState):
            state[key] = after
        row = self._row(groups, after)
        if before is None or row != self._row(groups, before):
            ctx.emit(row, key=group_key(groups))
        if current is not None:
            current[key] = after  # last: a row that failed above leaves the cache as the state's rollback does

    def _delta(self, record: Record) -> tuple[str, list[Any], list[Any]] | None:
        """(group key, the row's delta, group values), or None for a row WHERE drops."""
        value = record.value
        if type(value) is not dict:
            raise _not_a_row(record)
        where = self._where
        if where is not None and not where(value):
            return None
        columns = self._columns
        delta = columns.add(columns.zero(), [f(value) for f in self._inputs])
        return self._key(value), delta, [g(value) for g in self._group_fns]

    def _row(self, groups: list[Any], acc: list[Any]) -> dict[str, Any]:
        r = (groups, self._columns.result(acc), None, None)
        return {name: f(r) for name, f in self._select}

    def _current_rows(self, state: DeltaState) -> dict[str, Any]:
        """The partition's current values of the groups touched since its last checkpoint (or rollback): its
        pending deltas start afresh then, and the committed values are read again, once per group."""
        entry = self._current.get(id(state))
        if entry is None or entry[0] is not state or entry[1] is not state.pending:
            if len(self._current) >= _CACHED_PARTITIONS:
                self._current.clear()
            entry = self._current[id(state)] = (state, state.pending, {})
        return entry[2]


def changelog_key(groups: list[Any]) -> str:
    """The state key of a group with these values (what `_keyer` gives from a row): tests and tools."""
    if len(groups) == 1:
        x = groups[0]
        if type(x) is int:
            return str(x)
        return "=" + x if type(x) is str else orjson.dumps(x).decode()
    return orjson.dumps(groups).decode() if groups else ""
