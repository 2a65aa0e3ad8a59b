"""Monoid processors (the paper's Figure 11): per-record deltas pre-combined in memory and merged into
remote state once per checkpoint, together with the input offsets.

`MonoidProcessor` runs on either state backend: `rocksdb` (ordinary `ctx.state`, combined per record)
or `postgres` (deltas merged into a table in one transaction with the offsets; see `stylus.monoid.pg`).
"""

from stylus.monoid.processor import CountMonoid, MaxMonoid, MinMonoid, MonoidProcessor, SqlCombiner, SumMonoid
from stylus.monoid.state import DeltaState

__all__ = ["CountMonoid", "DeltaState", "MaxMonoid", "MinMonoid", "MonoidProcessor", "SqlCombiner", "SumMonoid"]
