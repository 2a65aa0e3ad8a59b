"""A processor that emits each input where its value says: the topic (default: the first output), the
partition (`ctx.emit(..., partition=n)`), and timers that emit the same way (tests/runtime/test_groupings.py)."""

from __future__ import annotations

from typing import Any

from stylus import Processor


class Router(Processor):
    """Input values `{"id": .., "topic": T?, "partition": n?}`: emitted with `key=record.key` to T
    (or the default output), at partition n when given."""

    def process(self, record: Any, ctx: Any) -> None:
        value = record.value
        ctx.emit(value, key=record.key, topic=value.get("topic"), partition=value.get("partition"))


class TimedRouter(Router):
    """Also sets a timer per record; `on_timer` emits `{"id": -1}` the same way as a record would, to the
    default output (exercises the engine's path for timers, outside any record)."""

    def process(self, record: Any, ctx: Any) -> None:
        super().process(record, ctx)
        ctx.set_timer(record.key or "", record.timestamp)

    def on_timer(self, key: str, timestamp: int, ctx: Any) -> None:
        ctx.emit({"id": -1}, key=key)
