"""The `config:` of a windowed processor in YAML, as frozen models, and the objects built from it.

    config:
      window: {type: tumbling, size: 1m}        # or {type: hopping, size: 1m, slide: 10s}
                                                # or {type: session, gap: 30s}
      aggregate: {type: sum, field: amount}     # count | sum | min | max | mean (field)
                                                # top_k (k, by, item) | reduce (fn: module:function, initial)
      key: category                             # group by this field of the value (default: the record key)
      emit: final                               # final: once when the window closes; update: every change too;
                                                # changed: an update only when `changed()` says the result moved
      retain: 5m                                # keep closed windows this long for late corrections
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stylus.config.durations import Duration
from stylus.windows.aggregates import Aggregate, Count, Max, Mean, Min, Reduce, Sum, TopK
from stylus.windows.assigners import Hopping, Session, Tumbling


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WindowSpec(_Frozen):
    type: Literal["tumbling", "hopping", "sliding", "session"]
    size: Duration | None = None
    slide: Duration | None = None
    gap: Duration | None = None


class AggregateSpec(_Frozen):
    type: Literal["count", "sum", "min", "max", "mean", "top_k", "reduce"] = "count"
    field: str | None = None
    k: int = Field(10, ge=1)
    by: str = "score"
    item: str = "id"
    fn: str | None = None
    merge: str | None = None
    initial: Any = None


class WindowedConfig(_Frozen):
    window: WindowSpec
    aggregate: AggregateSpec = AggregateSpec()
    key: str | None = None
    emit: Literal["final", "update", "changed"] = "final"
    retain: Duration | None = None


def _ms(seconds: float | None, what: str) -> int:
    if seconds is None or seconds <= 0:
        raise ValueError(f"the window needs a positive `{what}`")
    return round(seconds * 1000)


def build_assigner(spec: WindowSpec) -> Tumbling | Hopping | Session:
    if spec.type == "tumbling":
        return Tumbling(_ms(spec.size, "size"))
    if spec.type in ("hopping", "sliding"):
        return Hopping(_ms(spec.size, "size"), _ms(spec.slide, "slide"))
    return Session(_ms(spec.gap, "gap"))


def _function(path: str | None) -> Any:
    if path is None:
        return None
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def build_aggregate(spec: AggregateSpec) -> Aggregate:
    if spec.type == "count":
        return Count()
    if spec.type == "sum":
        return Sum(spec.field)
    if spec.type == "min":
        return Min(spec.field)
    if spec.type == "max":
        return Max(spec.field)
    if spec.type == "mean":
        return Mean(spec.field)
    if spec.type == "top_k":
        return TopK(spec.k, spec.by, spec.item)
    fn = _function(spec.fn)
    if fn is None:
        raise ValueError("a `reduce` aggregate needs `fn: module:function`")
    return Reduce(fn, spec.initial, spec.field, _function(spec.merge))
