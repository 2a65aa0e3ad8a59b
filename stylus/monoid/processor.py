"""`MonoidProcessor`: user code gives `zero()`, `combine(a, b)` and `map(record)` -> (key, delta) pairs.

Why a monoid: associativity lets deltas be combined in memory between checkpoints and merged into
stored values once per key per checkpoint, in any order and from any partition, which is what makes
remote state cheap (a few round trips per checkpoint instead of a read-modify-write per record).
Laws the user must keep: combine(zero(), x) == x == combine(x, zero()) and combine is associative;
values are JSON values (lists rather than tuples). Deterministic, as every processor.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from stylus.api import Context, Processor, Record
from stylus.monoid.state import MISSING, DeltaState

SqlCombiner = Literal["sum", "count", "max", "min"]


class MonoidProcessor(Processor):
    """Subclass and give `zero`, `combine` and `map`. To emit output as well, override `process`:
    `deltas = list(self.map(record)); self.accumulate(deltas, ctx); ctx.emit(...)`."""

    #: when set, the postgres backend merges entirely in SQL with this built-in combiner (which must
    #: agree with `combine`); otherwise it locks the touched keys, combines in Python and writes back
    sql_combiner: ClassVar[SqlCombiner | None] = None

    @abstractmethod
    def zero(self) -> Any:
        """The identity of `combine` (a fresh object each call)."""

    @abstractmethod
    def combine(self, a: Any, b: Any) -> Any:
        """Associative. Must not mutate its arguments: return a new value (failed records are undone by
        restoring the previous pending delta)."""

    @abstractmethod
    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        """The (key, delta) pairs one input record contributes."""

    def process(self, record: Record, ctx: Context) -> None:
        self.accumulate(self.map(record), ctx)

    def accumulate(self, deltas: Iterable[tuple[str, Any]], ctx: Context) -> None:
        """Remote backend: combine into the pending deltas. Local backend: read-modify-write `ctx.state`."""
        state = ctx.state
        if isinstance(state, DeltaState):
            add = state.add
            for key, delta in deltas:
                add(key, delta)
            return
        combine = self.combine
        for key, delta in deltas:
            current = state.get(key, MISSING)
            state[key] = combine(self.zero() if current is MISSING else current, delta)


class SumMonoid(MonoidProcessor):
    """Numbers under addition. In SQL the sum is exact (`numeric`): integer sums agree bit for bit with
    Python; float sums may differ from Python's binary rounding in the last digits."""

    sql_combiner: ClassVar[SqlCombiner | None] = "sum"

    def zero(self) -> Any:
        return 0

    def combine(self, a: Any, b: Any) -> Any:
        return a + b


class CountMonoid(SumMonoid):
    """Integer counts (`bigint` in SQL). By default one per record, keyed by the record key."""

    sql_combiner: ClassVar[SqlCombiner | None] = "count"

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return ((record.key or "", 1),)


class _ExtremumMonoid(MonoidProcessor):
    """The extreme number seen; `None` is the identity. Subclasses say which of two wins."""

    def zero(self) -> Any:
        return None

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if self.wins(b, a) else a

    @staticmethod
    def wins(b: Any, a: Any) -> bool:
        return bool(b > a)


class MaxMonoid(_ExtremumMonoid):
    """The largest number seen; `None` is the identity."""

    sql_combiner: ClassVar[SqlCombiner | None] = "max"


class MinMonoid(_ExtremumMonoid):
    """The smallest number seen; `None` is the identity."""

    sql_combiner: ClassVar[SqlCombiner | None] = "min"

    @staticmethod
    def wins(b: Any, a: Any) -> bool:
        return bool(b < a)
